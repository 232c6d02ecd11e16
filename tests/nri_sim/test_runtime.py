"""NRIRuntimeSim against a tiny NRI plugin written in this file with the simulator's codec.

The plugin (``_Plugin``) dials the socket, registers on the runtime's service (mux
connection 2), serves Configure / Synchronize / StateChange / CreateContainer on its own
(connection 1), and records every request before it answers, so that once a runtime call
has returned, what the plugin saw is already in ``received``: on one ordered connection,
a request never sent before a later one's answer was never sent at all.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest
from google.protobuf.message import Message

from harness.k8s.nri_frames import (
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    MessageType,
    TrunkDecoder,
    TtrpcFrame,
    encode,
)
from harness.k8s.nri_runtime import (
    IGNORED_REFUSED_CREATE,
    IGNORED_UNKNOWN_CONTAINER,
    PLUGIN_SERVICE,
    RUNTIME_SERVICE,
    VALID_EVENTS,
    Eviction,
    NRIEvent,
    NRIRuntimeSim,
    SimSandbox,
    event_bit,
)
from plugins.api.nri.v1alpha1 import nri_pb2 as nri
from plugins.api.ttrpc import ttrpc_pb2 as ttrpc

WAIT = 5.0  # seconds a test waits for something that should happen at once
UNIMPLEMENTED = 12


class _Plugin:
    """An NRI plugin as small as a test needs, on ``harness.k8s.nri_frames`` alone."""

    def __init__(
        self,
        socket_path: Path,
        *,
        name: str = "test",
        index: str = "10",
        events: int = 0,
        register: bool = True,
        refuse: Mapping[str, str] | None = None,
        unanswered: frozenset[str] = frozenset(),
        unimplemented: frozenset[str] = frozenset(),
    ) -> None:
        self._socket_path = socket_path
        self._name = name
        self._index = index
        self._events = events
        self._register = register
        self._refuse = dict(refuse or {})  # method -> the error message it answers with
        self._unanswered = unanswered
        self._unimplemented = unimplemented
        self._cond = threading.Condition()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._reader = threading.Thread(target=self._read, name=f"test-plugin-{name}")
        self._registration: ttrpc.Response | None = None
        self._runtime_replies: dict[int, ttrpc.Response] = {}  # by stream id, after stream 1
        self._next_runtime_stream = 3  # RegisterPlugin takes 1
        self.received: list[tuple[str, bytes]] = []
        self.closed = False
        self.create_reply = b""  # the payload answering CreateContainer; set before the call

    def __enter__(self) -> Self:
        try:
            self._sock.connect(str(self._socket_path))
            self._reader.start()
            if self._register:
                self._send_registration()
        except BaseException:
            self.__exit__(None, None, None)  # the socket is closed however entering fails
            raise
        return self

    def _send_registration(self) -> None:
        request = nri.RegisterPluginRequest(plugin_name=self._name, plugin_idx=self._index)
        envelope = ttrpc.Request(
            service=RUNTIME_SERVICE,
            method="RegisterPlugin",
            payload=request.SerializeToString(),
        )
        frame = TtrpcFrame(1, MessageType.REQUEST, 0, envelope.SerializeToString())
        self._sock.sendall(encode(RUNTIME_SERVICE_CONN, frame))
        with self._cond:
            assert self._cond.wait_for(lambda: self._registration is not None, WAIT)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.hang_up()
        if self._reader.ident is not None:
            self._reader.join(WAIT)
        self._sock.close()

    def hang_up(self) -> None:
        """Close the connection from the plugin's side."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    @property
    def registration(self) -> ttrpc.Response:
        assert self._registration is not None
        return self._registration

    def update_containers(self, request: nri.UpdateContainersRequest) -> ttrpc.Response:
        """Call Runtime.UpdateContainers and wait for the runtime's answer."""
        return self.call_runtime("UpdateContainers", request.SerializeToString())

    def call_runtime(self, method: str, payload: bytes) -> ttrpc.Response:
        """Call a method of the runtime's service and wait for the answer."""
        stream_id = self._next_runtime_stream
        self._next_runtime_stream += 2
        envelope = ttrpc.Request(service=RUNTIME_SERVICE, method=method, payload=payload)
        frame = TtrpcFrame(stream_id, MessageType.REQUEST, 0, envelope.SerializeToString())
        self._sock.sendall(encode(RUNTIME_SERVICE_CONN, frame))
        with self._cond:
            assert self._cond.wait_for(lambda: stream_id in self._runtime_replies, WAIT)
            return self._runtime_replies.pop(stream_id)

    def methods(self) -> list[str]:
        with self._cond:
            return [method for method, _ in self.received]

    def requests(self, method: str) -> list[bytes]:
        with self._cond:
            return [payload for m, payload in self.received if m == method]

    def wait_closed(self) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.closed, WAIT), "connection still open"

    def _read(self) -> None:
        decoder = TrunkDecoder()
        try:
            while data := self._sock.recv(65536):
                for conn_id, frame in decoder.feed(data):
                    if conn_id == RUNTIME_SERVICE_CONN:
                        reply = ttrpc.Response.FromString(frame.data)
                        with self._cond:
                            if frame.stream_id == 1:
                                self._registration = reply
                            else:
                                self._runtime_replies[frame.stream_id] = reply
                            self._cond.notify_all()
                    else:
                        self._serve(frame)
        except OSError:
            pass
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def _serve(self, frame: TtrpcFrame) -> None:
        request = ttrpc.Request.FromString(frame.data)
        assert request.service == PLUGIN_SERVICE
        with self._cond:
            self.received.append((request.method, request.payload))
            self._cond.notify_all()
        if request.method in self._unanswered:
            return
        response = ttrpc.Response()
        response.status.SetInParent()
        reply: Message | None = None
        if request.method in self._unimplemented:
            response.status.code = UNIMPLEMENTED
            response.status.message = f"method {request.method}"
        elif request.method == "Configure":
            reply = nri.ConfigureResponse(events=self._events)
        elif request.method == "Synchronize":
            reply = nri.SynchronizeResponse()
        elif request.method in self._refuse:
            response.status.code = 2  # what a Go plugin's plain error becomes: Unknown
            response.status.message = self._refuse[request.method]
        elif request.method == "CreateContainer":
            response.payload = self.create_reply
        else:
            reply = nri.Empty()
        if reply is not None:
            response.payload = reply.SerializeToString()
        answer = TtrpcFrame(frame.stream_id, MessageType.RESPONSE, 0, response.SerializeToString())
        with contextlib.suppress(OSError):
            self._sock.sendall(encode(PLUGIN_SERVICE_CONN, answer))


def _sandbox(sandbox_id: str = "pod-a", netns: str = "/run/netns/pod-a") -> SimSandbox:
    return SimSandbox(
        id=sandbox_id,
        name=f"{sandbox_id}-name",
        namespace="default",
        uid=f"{sandbox_id}-uid",
        netns_path=netns,
        labels={"app": "web"},
        annotations={"k8s.v1.cni.cncf.io/networks": "none"},
    )


@pytest.fixture(autouse=True)
def _no_simulator_thread_outlives_its_test() -> Iterator[None]:
    yield
    leftover = [t.name for t in threading.enumerate() if t.name.startswith("nri-sim-")]
    assert leftover == [], f"simulator threads still running: {leftover}"


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "nri.sock"


@pytest.fixture
def sim(socket_path: Path) -> Iterator[NRIRuntimeSim]:
    with NRIRuntimeSim(
        socket_path, registration_timeout=2.0, request_timeout=2.0, runtime_name="sim"
    ) as runtime:
        yield runtime


def test_a_plugin_registers_is_configured_and_synchronized(
    sim: NRIRuntimeSim, socket_path: Path
) -> None:
    with _Plugin(socket_path, name="coordinator", index="05") as plugin:
        info = sim.wait_for_plugin("coordinator", WAIT)

        assert (info.name, info.base, info.index) == ("05-coordinator", "coordinator", "05")
        assert sim.plugins == (info,)
        assert plugin.registration.status.code == 0
        assert plugin.methods() == ["Configure", "Synchronize"]
        (configure_bytes,) = plugin.requests("Configure")
        configure = nri.ConfigureRequest.FromString(configure_bytes)
        assert (configure.runtime_name, configure.registration_timeout) == ("sim", 2000)
        assert configure.request_timeout == 2000
        assert [(r.event, r.result) for r in sim.events_for("05-coordinator")] == [
            (NRIEvent.CONFIGURE, "answered"),
            (NRIEvent.SYNCHRONIZE, "answered"),
        ]


def test_a_plugin_that_does_not_register_in_time_is_dropped(socket_path: Path) -> None:
    with (
        NRIRuntimeSim(socket_path, registration_timeout=0.2) as sim,
        _Plugin(socket_path, register=False) as plugin,
    ):
        drop = sim.wait_for_drop("connection 1", WAIT)

        assert drop.during == "registration"
        assert "registration timed out" in drop.reason
        plugin.wait_closed()
        assert sim.plugins == ()
        assert plugin.methods() == []


def test_an_invalid_registration_is_refused_and_dropped(
    sim: NRIRuntimeSim, socket_path: Path
) -> None:
    with _Plugin(socket_path, index="7") as plugin:
        drop = sim.wait_for_drop("connection 1", WAIT)

        assert plugin.registration.status.code != 0
        assert "invalid plugin index '7'" in plugin.registration.status.message
        assert (drop.during, drop.reason) == ("registration", plugin.registration.status.message)
        plugin.wait_closed()


def test_only_subscribed_events_are_sent(sim: NRIRuntimeSim, socket_path: Path) -> None:
    mask = event_bit(NRIEvent.CREATE_CONTAINER)
    with _Plugin(socket_path, events=mask) as plugin:
        info = sim.wait_for_plugin("test", WAIT)
        assert info.events == mask

        run = sim.run_pod_sandbox(_sandbox())
        create = sim.create_container("pod-a", "app")

        assert (run.proceeded, run.answered, run.unsubscribed) == (True, (), ("10-test",))
        assert (create.proceeded, create.answered) == (True, ("10-test",))
        # The CreateContainer answer came after anything sent before it: no StateChange.
        assert plugin.methods() == ["Configure", "Synchronize", "CreateContainer"]


def test_no_subscription_means_every_event(sim: NRIRuntimeSim, socket_path: Path) -> None:
    with _Plugin(socket_path, events=0) as plugin:
        sim.wait_for_plugin("test", WAIT)

        sim.run_pod_sandbox(_sandbox())
        sim.create_container("pod-a", "app")
        sim.stop_pod_sandbox("pod-a")
        sim.remove_pod_sandbox("pod-a")

        state_changes = [nri.StateChangeEvent.FromString(p) for p in plugin.requests("StateChange")]
        assert [e.event for e in state_changes] == [
            nri.RUN_POD_SANDBOX,
            nri.STOP_POD_SANDBOX,
            nri.REMOVE_POD_SANDBOX,
        ]
        assert {e.pod.id for e in state_changes} == {"pod-a"}
        assert plugin.methods()[2:] == [
            "StateChange",
            "CreateContainer",
            "StateChange",
            "StateChange",
        ]
        assert (sim.sandboxes, sim.containers) == ((), ())


def test_synchronize_carries_the_runtimes_sandboxes_and_containers(
    sim: NRIRuntimeSim, socket_path: Path
) -> None:
    assert sim.run_pod_sandbox(_sandbox("pod-a", "/run/netns/a")).proceeded
    assert sim.run_pod_sandbox(_sandbox("pod-b", "")).proceeded  # host network
    created = sim.create_container("pod-a", "app").container
    assert created is not None

    with _Plugin(socket_path) as plugin:
        sim.wait_for_plugin("test", WAIT)

        (sync_bytes,) = plugin.requests("Synchronize")
        sync = nri.SynchronizeRequest.FromString(sync_bytes)
        pods = {pod.id: pod for pod in sync.pods}
        assert set(pods) == {"pod-a", "pod-b"}
        pod_a = pods["pod-a"]
        assert (pod_a.name, pod_a.uid, pod_a.namespace) == ("pod-a-name", "pod-a-uid", "default")
        assert dict(pod_a.labels) == {"app": "web"}
        assert dict(pod_a.annotations) == {"k8s.v1.cni.cncf.io/networks": "none"}
        assert [(ns.type, ns.path) for ns in pod_a.linux.namespaces] == [
            ("network", "/run/netns/a")
        ]
        assert list(pods["pod-b"].linux.namespaces) == []
        (container,) = sync.containers
        assert (container.id, container.pod_sandbox_id, container.name) == (
            created.id,
            "pod-a",
            "app",
        )
        assert not sync.more


def test_a_refused_create_container_fails_with_the_plugins_message(
    sim: NRIRuntimeSim, socket_path: Path
) -> None:
    with _Plugin(socket_path, refuse={"CreateContainer": "network of pod-a not ready"}) as plugin:
        sim.wait_for_plugin("test", WAIT)
        sim.run_pod_sandbox(_sandbox())

        outcome = sim.create_container("pod-a", "app")

        assert not outcome.proceeded
        assert outcome.refusal == "network of pod-a not ready"
        assert outcome.refused[0].plugin == "10-test"
        assert outcome.container is None
        assert sim.containers == ()
        assert sim.plugins != ()  # a refusal is an answer: the plugin stays
        (request_bytes,) = plugin.requests("CreateContainer")
        request = nri.CreateContainerRequest.FromString(request_bytes)
        assert (request.pod.id, request.container.pod_sandbox_id) == ("pod-a", "pod-a")
        assert [(ns.type, ns.path) for ns in request.pod.linux.namespaces] == [
            ("network", "/run/netns/pod-a")
        ]


def test_a_refused_run_pod_sandbox_fails_the_sandbox(sim: NRIRuntimeSim, socket_path: Path) -> None:
    with _Plugin(socket_path, refuse={"StateChange": "no network for you"}):
        sim.wait_for_plugin("test", WAIT)

        outcome = sim.run_pod_sandbox(_sandbox())

        assert (outcome.proceeded, outcome.refusal) == (False, "no network for you")
        assert sim.sandboxes == ()


def test_a_refused_stop_is_only_logged_the_sandbox_stops(socket_path: Path) -> None:
    with NRIRuntimeSim(socket_path) as sim:
        sim.run_pod_sandbox(_sandbox())
        with _Plugin(socket_path, refuse={"StateChange": "busy"}):
            sim.wait_for_plugin("test", WAIT)

            stop = sim.stop_pod_sandbox("pod-a")
            remove = sim.remove_pod_sandbox("pod-a")

            assert (stop.proceeded, stop.refusal) == (True, "busy")
            assert (remove.proceeded, remove.refusal) == (True, "busy")
            assert sim.sandboxes == ()


def test_a_refusal_ends_the_event_later_plugins_are_not_called(
    sim: NRIRuntimeSim, socket_path: Path
) -> None:
    with (
        _Plugin(socket_path, name="first", index="01", refuse={"CreateContainer": "no"}) as first,
        _Plugin(socket_path, name="second", index="02") as second,
    ):
        sim.wait_for_plugin("first", WAIT)
        sim.wait_for_plugin("second", WAIT)
        sim.run_pod_sandbox(_sandbox())

        outcome = sim.create_container("pod-a", "app")

        assert outcome.answered == ()
        assert [r.plugin for r in outcome.refused] == ["01-first"]
        assert first.methods()[-1] == "CreateContainer"
        assert "CreateContainer" not in second.methods()


def test_a_request_timeout_drops_the_plugin_and_the_event_proceeds(socket_path: Path) -> None:
    with (
        NRIRuntimeSim(socket_path, request_timeout=0.3) as sim,
        _Plugin(socket_path, unanswered=frozenset({"StateChange"})) as plugin,
    ):
        sim.wait_for_plugin("test", WAIT)

        outcome = sim.run_pod_sandbox(_sandbox())

        assert outcome.proceeded
        assert [(d.plugin, d.during) for d in outcome.dropped] == [("10-test", "RunPodSandbox")]
        assert "timed out after 0.3 s" in outcome.dropped[0].reason
        assert sim.plugins == ()
        assert [s.id for s in sim.sandboxes] == ["pod-a"]
        plugin.wait_closed()
        # Dropped, it gets no more events; the container goes ahead without it.
        assert sim.create_container("pod-a", "app").proceeded
        assert plugin.methods() == ["Configure", "Synchronize", "StateChange"]


def test_a_stalled_request_is_a_timeout_without_waiting_for_it(
    sim: NRIRuntimeSim, socket_path: Path
) -> None:
    with _Plugin(socket_path) as plugin:
        sim.wait_for_plugin("test", WAIT)
        sim.run_pod_sandbox(_sandbox())
        sim.stall_next("test", "CreateContainer")

        outcome = sim.create_container("pod-a", "app")

        assert outcome.proceeded
        assert outcome.container is not None
        assert outcome.answered == ()
        assert [(d.during, d.reason) for d in outcome.dropped] == [
            ("CreateContainer", "CreateContainer timed out (stalled by the test)")
        ]
        assert sim.events_for("test")[-1].result == "dropped"
        plugin.wait_closed()


def test_a_closed_connection_drops_the_plugin(sim: NRIRuntimeSim, socket_path: Path) -> None:
    with _Plugin(socket_path) as plugin:
        sim.wait_for_plugin("test", WAIT)

        plugin.hang_up()
        drop = sim.wait_for_drop("test", WAIT)

        assert (drop.plugin, drop.during, drop.reason) == (
            "10-test",
            "connection",
            "connection closed",
        )
        assert sim.plugins == ()
        outcome = sim.run_pod_sandbox(_sandbox())
        assert (outcome.proceeded, outcome.answered, outcome.dropped) == (True, (), ())


def test_disconnect_closes_the_plugins_connection(sim: NRIRuntimeSim, socket_path: Path) -> None:
    with _Plugin(socket_path) as plugin:
        sim.wait_for_plugin("test", WAIT)

        drop = sim.disconnect("10-test")

        assert (drop.plugin, drop.reason) == ("10-test", "disconnected by the test")
        plugin.wait_closed()
        assert sim.plugins == ()


def test_a_plugin_that_reconnects_is_registered_and_synchronized_again(
    sim: NRIRuntimeSim, socket_path: Path
) -> None:
    with _Plugin(socket_path) as first:
        first_info = sim.wait_for_plugin("test", WAIT)
        sim.run_pod_sandbox(_sandbox())
        sim.disconnect("test")
        first.wait_closed()

    with _Plugin(socket_path) as second:
        second_info = sim.wait_for_plugin("test", WAIT)

        assert second_info.connection != first_info.connection
        assert sim.plugins == (second_info,)
        (sync_bytes,) = second.requests("Synchronize")
        assert [pod.id for pod in nri.SynchronizeRequest.FromString(sync_bytes).pods] == ["pod-a"]
        assert sim.create_container("pod-a", "app").answered == ("10-test",)


def _evict(*container_ids: str, reason: str = "started ungated") -> nri.UpdateContainersRequest:
    return nri.UpdateContainersRequest(
        evict=[nri.ContainerEviction(container_id=c, reason=reason) for c in container_ids]
    )


def test_a_plugin_evicts_a_container_and_the_kubelet_recreates_it(
    sim: NRIRuntimeSim, socket_path: Path
) -> None:
    with _Plugin(socket_path) as plugin:
        sim.wait_for_plugin("test", WAIT)
        sim.run_pod_sandbox(_sandbox())
        first = sim.create_container("pod-a", "app").container
        other = sim.create_container("pod-a", "sidecar").container
        assert first is not None
        assert other is not None

        response = plugin.update_containers(_evict(first.id))

        assert (response.status.code, response.status.message) == (0, "")
        assert nri.UpdateContainersResponse.FromString(response.payload).failed == []
        assert sim.evictions == (
            Eviction(first.id, "started ungated", "10-test", "UpdateContainers"),
        )
        assert sim.wait_for_eviction(first.id, WAIT) == sim.evictions[0]
        assert sim.containers == (other,)  # stopped: the runtime no longer has it
        again = sim.create_container("pod-a", "app")  # the kubelet's recreation
        assert again.proceeded
        assert again.container is not None
        assert again.container.id != first.id
        assert len(plugin.requests("CreateContainer")) == 3  # through the plugin again


def test_an_eviction_of_an_unknown_container_is_skipped_as_containerd_does(
    sim: NRIRuntimeSim, socket_path: Path
) -> None:
    with _Plugin(socket_path) as plugin:
        sim.wait_for_plugin("test", WAIT)
        sim.run_pod_sandbox(_sandbox())
        kept = sim.create_container("pod-a", "app").container

        response = plugin.update_containers(_evict("no-such-container"))

        # containerd's NRI domains skip an id no domain has: the call does not fail, and
        # UpdateContainersResponse has no place for evictions anyway.
        assert response.status.code == 0
        assert nri.UpdateContainersResponse.FromString(response.payload).failed == []
        assert sim.evictions == ()
        assert sim.ignored_evictions == (
            Eviction(
                "no-such-container",
                "started ungated",
                "10-test",
                "UpdateContainers",
                ignored=IGNORED_UNKNOWN_CONTAINER,
            ),
        )
        assert sim.containers == (kept,)
        with pytest.raises(TimeoutError, match="no-such-container"):
            sim.wait_for_eviction("no-such-container", 0.01)


def _evict_in_answer(*container_ids: str, reason: str = "started ungated") -> bytes:
    return nri.CreateContainerResponse(
        evict=[nri.ContainerEviction(container_id=c, reason=reason) for c in container_ids]
    ).SerializeToString()


def test_a_create_container_answer_evicts_before_the_new_container_exists(
    sim: NRIRuntimeSim, socket_path: Path
) -> None:
    with _Plugin(socket_path) as plugin:
        sim.wait_for_plugin("test", WAIT)
        sim.run_pod_sandbox(_sandbox())
        ungated = sim.create_container("pod-a", "app").container
        other = sim.create_container("pod-a", "sidecar").container
        assert ungated is not None
        assert other is not None
        plugin.create_reply = _evict_in_answer(ungated.id, "pod-a-init-99")

        outcome = sim.create_container("pod-a", "init")

        assert outcome.proceeded
        assert outcome.container is not None
        eviction = Eviction(ungated.id, "started ungated", "10-test", "CreateContainer")
        assert (outcome.evicted, sim.evictions) == ((eviction,), (eviction,))
        assert sim.wait_for_eviction(ungated.id, WAIT).method == "CreateContainer"
        assert sim.containers == (other, outcome.container)
        assert sim.ignored_evictions == (  # no such container (yet): skipped
            Eviction(
                "pod-a-init-99",
                "started ungated",
                "10-test",
                "CreateContainer",
                ignored=IGNORED_UNKNOWN_CONTAINER,
            ),
        )
        (record,) = [r for r in sim.events_for("test") if r.target == outcome.container.id]
        assert (record.result, record.detail) == ("answered", f"evict {ungated.id}, pod-a-init-99")


def test_create_container_evictions_are_carried_out_without_honouring_update_evictions(
    socket_path: Path,
) -> None:
    with (
        NRIRuntimeSim(socket_path, honour_update_evictions=False) as sim,
        _Plugin(socket_path) as plugin,
    ):
        sim.wait_for_plugin("test", WAIT)
        sim.run_pod_sandbox(_sandbox())
        first = sim.create_container("pod-a", "app").container
        second = sim.create_container("pod-a", "sidecar").container
        assert first is not None
        assert second is not None

        response = plugin.update_containers(_evict(first.id))

        assert response.status.code == 0  # dropped silently, as containerd does
        assert not sim.evictions
        assert sim.ignored_evictions == (
            Eviction(
                first.id,
                "started ungated",
                "10-test",
                "UpdateContainers",
                ignored="containerd drops UpdateContainers evictions",
            ),
        )
        assert sim.containers == (first, second)

        plugin.create_reply = _evict_in_answer(first.id)
        third = sim.create_container("pod-a", "app")

        eviction = Eviction(first.id, "started ungated", "10-test", "CreateContainer")
        assert (third.evicted, sim.evictions) == ((eviction,), (eviction,))
        assert sim.containers == (second, third.container)


def test_a_refused_create_container_carries_out_no_eviction(
    sim: NRIRuntimeSim, socket_path: Path
) -> None:
    with _Plugin(socket_path, name="first", index="01") as first:
        sim.wait_for_plugin("first", WAIT)
        sim.run_pod_sandbox(_sandbox())
        kept = sim.create_container("pod-a", "app")
        assert kept.container is not None
        with _Plugin(socket_path, name="second", index="02", refuse={"CreateContainer": "no"}):
            sim.wait_for_plugin("second", WAIT)
            first.create_reply = _evict_in_answer(kept.container.id)

            outcome = sim.create_container("pod-a", "app")

        assert (outcome.proceeded, outcome.answered, outcome.evicted) == (False, ("01-first",), ())
        assert sim.evictions == ()
        assert sim.containers == (kept.container,)
        assert sim.ignored_evictions == (
            Eviction(
                kept.container.id,
                "started ungated",
                "01-first",
                "CreateContainer",
                ignored=IGNORED_REFUSED_CREATE,
            ),
        )


def test_an_unreadable_create_container_answer_drops_the_plugin_and_the_container_proceeds(
    sim: NRIRuntimeSim, socket_path: Path
) -> None:
    with _Plugin(socket_path) as plugin:
        sim.wait_for_plugin("test", WAIT)
        sim.run_pod_sandbox(_sandbox())
        plugin.create_reply = b"\xff"  # a truncated varint

        outcome = sim.create_container("pod-a", "app")

        assert outcome.proceeded  # fail-open
        (drop,) = outcome.dropped
        assert "unreadable CreateContainerResponse" in drop.reason
        assert sim.evictions == sim.ignored_evictions == ()


def test_updates_cannot_be_applied_and_come_back_failed_unless_they_may_fail(
    sim: NRIRuntimeSim, socket_path: Path
) -> None:
    with _Plugin(socket_path) as plugin:
        sim.wait_for_plugin("test", WAIT)
        request = nri.UpdateContainersRequest(
            update=[
                nri.ContainerUpdate(container_id="c1"),
                nri.ContainerUpdate(container_id="c2", ignore_failure=True),
            ]
        )
        response = plugin.update_containers(request)

        failed = nri.UpdateContainersResponse.FromString(response.payload).failed
        assert [u.container_id for u in failed] == ["c1"]
        assert sim.evictions == sim.ignored_evictions == ()


def test_an_unreadable_update_containers_is_refused(sim: NRIRuntimeSim, socket_path: Path) -> None:
    with _Plugin(socket_path) as plugin:
        sim.wait_for_plugin("test", WAIT)
        sim.run_pod_sandbox(_sandbox())
        kept = sim.create_container("pod-a", "app").container

        refused = plugin.call_runtime("UpdateContainers", b"\xff")  # a truncated varint

        assert refused.status.code == 2
        assert "unreadable UpdateContainersRequest" in refused.status.message
        assert (sim.containers, sim.evictions, sim.ignored_evictions) == ((kept,), (), ())


def test_a_held_plugin_gets_no_event_until_admitted(sim: NRIRuntimeSim, socket_path: Path) -> None:
    sim.hold_new_plugins()
    with _Plugin(socket_path) as plugin:
        held = sim.wait_for_held("test", WAIT)
        assert plugin.registration.status.code == 0  # registered, then held

        ran = sim.run_pod_sandbox(_sandbox())
        created = sim.create_container("pod-a", "app")

        assert sim.plugins == ()
        assert (ran.proceeded, ran.answered, created.proceeded, created.answered) == (
            True,
            (),
            True,
            (),
        )
        assert plugin.methods() == []
        sim.admit_new_plugins()
        assert sim.wait_for_plugin("test", WAIT) == replace(held, events=VALID_EVENTS)
        assert plugin.methods() == ["Configure", "Synchronize"]
        (sync_bytes,) = plugin.requests("Synchronize")
        sync = nri.SynchronizeRequest.FromString(sync_bytes)
        assert ([p.id for p in sync.pods], [c.name for c in sync.containers]) == (
            ["pod-a"],
            ["app"],
        )


def test_a_held_plugin_that_hangs_up_is_dropped(sim: NRIRuntimeSim, socket_path: Path) -> None:
    sim.hold_new_plugins()
    with _Plugin(socket_path) as plugin:
        sim.wait_for_held("test", WAIT)
        plugin.hang_up()
        drop = sim.wait_for_drop("test", WAIT)
    assert (drop.during, drop.reason) == ("registration", "connection closed while held")
    sim.admit_new_plugins()
    assert sim.plugins == ()


def test_plugins_are_called_in_index_order(sim: NRIRuntimeSim, socket_path: Path) -> None:
    with (
        _Plugin(socket_path, name="late", index="90"),
        _Plugin(socket_path, name="early", index="01"),
    ):
        sim.wait_for_plugin("late", WAIT)
        sim.wait_for_plugin("early", WAIT)

        outcome = sim.run_pod_sandbox(_sandbox())

        assert outcome.answered == ("01-early", "90-late")
        assert [p.name for p in sim.plugins] == ["01-early", "90-late"]


def test_dedicated_pod_calls_fall_back_to_state_change_on_unimplemented(
    socket_path: Path,
) -> None:
    with (
        NRIRuntimeSim(socket_path, pod_calls="dedicated") as sim,
        _Plugin(socket_path, name="old", index="01", unimplemented=frozenset({"RunPodSandbox"})),
        _Plugin(socket_path, name="new", index="02") as new,
    ):
        sim.wait_for_plugin("old", WAIT)
        sim.wait_for_plugin("new", WAIT)

        outcome = sim.run_pod_sandbox(_sandbox())

        assert outcome.answered == ("01-old", "02-new")
        assert [r.method for r in sim.events if r.event is NRIEvent.RUN_POD_SANDBOX] == [
            "StateChange",
            "RunPodSandbox",
        ]
        (run_bytes,) = new.requests("RunPodSandbox")
        assert nri.RunPodSandboxRequest.FromString(run_bytes).pod.id == "pod-a"


def test_shutdown_reaches_every_plugin(sim: NRIRuntimeSim, socket_path: Path) -> None:
    with _Plugin(socket_path, events=event_bit(NRIEvent.CREATE_CONTAINER)) as plugin:
        sim.wait_for_plugin("test", WAIT)

        assert sim.shutdown().answered == ("10-test",)
        assert plugin.methods()[-1] == "Shutdown"


def test_exit_closes_every_connection_and_the_socket(socket_path: Path) -> None:
    with NRIRuntimeSim(socket_path) as sim, _Plugin(socket_path) as plugin:
        sim.wait_for_plugin("test", WAIT)
        sim.close()

        plugin.wait_closed()
        assert not socket_path.exists()
        assert sim.drops == ()  # the runtime stopping drops nobody


@pytest.mark.parametrize(
    ("act", "message"),
    [
        (lambda sim: sim.stop_pod_sandbox("nope"), "no sandbox 'nope'"),
        (lambda sim: sim.create_container("nope", "app"), "no sandbox 'nope'"),
        (lambda sim: sim.run_pod_sandbox(_sandbox("pod-z")), "'pod-z' already exists"),
        (lambda sim: sim.remove_pod_sandbox("pod-z"), "'pod-z' is running; stop it first"),
        (lambda sim: sim.create_container("pod-z", ""), "container name must be"),
        (lambda sim: sim.stall_next("ghost", "CreateContainer"), "no registered NRI plugin"),
        (lambda sim: sim.disconnect("ghost"), "no registered NRI plugin 'ghost'"),
    ],
)
def test_bad_requests_are_refused_naming_what_is_wrong(
    sim: NRIRuntimeSim, act: Callable[[NRIRuntimeSim], object], message: str
) -> None:
    assert sim.run_pod_sandbox(_sandbox("pod-z")).proceeded
    before = (sim.sandboxes, sim.containers, sim.events)

    with pytest.raises(ValueError, match=message):
        act(sim)

    assert (sim.sandboxes, sim.containers, sim.events) == before


def test_an_unknown_event_name_is_refused(sim: NRIRuntimeSim, socket_path: Path) -> None:
    with _Plugin(socket_path):
        sim.wait_for_plugin("test", WAIT)
        with pytest.raises(ValueError, match="unknown NRI event 'Crate'"):
            sim.stall_next("test", "Crate")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"registration_timeout": 0}, "registration_timeout must be a positive"),
        ({"request_timeout": -1.0}, "request_timeout must be a positive"),
        ({"pod_calls": "sometimes"}, "pod_calls must be"),
        ({"honour_update_evictions": "no"}, "honour_update_evictions must be True or False"),
    ],
)
def test_bad_settings_are_refused(
    socket_path: Path, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        NRIRuntimeSim(socket_path, **kwargs)  # type: ignore[arg-type]
    assert not socket_path.exists()


def test_a_socket_path_too_long_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="longer than a Unix socket path holds"):
        NRIRuntimeSim(tmp_path / ("x" * 120))


def test_a_sandbox_without_an_id_is_refused() -> None:
    with pytest.raises(ValueError, match=r"SimSandbox\.id must be a non-empty string"):
        SimSandbox(id="", name="n", namespace="ns", uid="u", netns_path="/run/netns/x")
