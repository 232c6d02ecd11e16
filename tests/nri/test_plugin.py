"""NRIPlugin against a tiny runtime written here, over a real Unix socket.

The runtime side frames with ``struct`` itself (mux: id, length; ttrpc: length, stream,
type, flags), independent of the adapter's codecs; it only shares the protobuf messages.
Every wait has a deadline (socket timeouts, Condition.wait_for).
"""

from __future__ import annotations

import logging
import socket
import struct
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from google.protobuf.message import Message

from plugins.api.nri.v1alpha1 import pb
from plugins.api.ttrpc import pb as ttrpc_pb
from plugins.coordinator.nri import (
    PLUGIN_SERVICE,
    RUNTIME_SERVICE,
    Container,
    Event,
    NRIPlugin,
    PodSandbox,
)
from plugins.sdk import FailedPrecondition

from .test_frames_golden import (
    CREATE_CONTAINER_REPLY,
    REGISTER_FRAME,
    UPDATE_CONTAINERS_ENVELOPE,
)

WAIT = 5.0
NETNS = "/var/run/netns/cni-1"


class RecordingHandler:
    """Records every call; create_container refuses while ``refuse`` is set."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.calls: list[tuple[str, object]] = []
        self.refuse: Exception | None = None
        self.hold_create: threading.Event | None = None
        self.synchronized: list[tuple[list[PodSandbox], list[Container]]] = []
        self.evict: object = None  # what synchronize returns (container ids, or None)
        self.evict_on_create: object = None  # what create_container returns, likewise

    def _record(self, name: str, value: object) -> None:
        with self.cond:
            self.calls.append((name, value))
            self.cond.notify_all()

    def wait_calls(self, count: int) -> list[tuple[str, object]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.calls) >= count, WAIT), self.calls
            return list(self.calls)

    def synchronize(
        self, sandboxes: Sequence[PodSandbox], containers: Sequence[Container]
    ) -> Sequence[str] | None:
        self.synchronized.append((list(sandboxes), list(containers)))
        self._record("synchronize", None)
        return self.evict  # type: ignore[return-value]  # tests return malformed answers too

    def run_pod_sandbox(self, sandbox: PodSandbox) -> None:
        self._record("run", sandbox)

    def stop_pod_sandbox(self, sandbox: PodSandbox) -> None:
        self._record("stop", sandbox)

    def remove_pod_sandbox(self, sandbox: PodSandbox) -> None:
        self._record("remove", sandbox)

    def create_container(self, sandbox: PodSandbox, container: Container) -> Sequence[str] | None:
        if self.hold_create is not None:
            assert self.hold_create.wait(WAIT)
        self._record("create", (sandbox, container))
        if self.refuse is not None:
            raise self.refuse
        return self.evict_on_create  # type: ignore[return-value]  # malformed ones too


class RuntimeConnection:
    """The runtime's end of one plugin connection, driven by the test."""

    def __init__(self, conn: socket.socket) -> None:
        conn.settimeout(WAIT)
        self.conn = conn
        self.streams: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
        self.next_stream = 1

    def read_exactly(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self.conn.recv(size - len(data))
            assert chunk, "the plugin closed the connection"
            data += chunk
        return bytes(data)

    def read_message(self, conn_id: int) -> tuple[int, int, bytes]:
        """The next whole ttrpc message on mux connection ``conn_id``."""
        buffer = self.streams[conn_id]
        while True:
            if len(buffer) >= 10:
                (length,) = struct.unpack(">I", buffer[:4])
                if len(buffer) >= 10 + length:
                    stream, kind = struct.unpack(">IB", buffer[4:9])
                    body = bytes(buffer[10 : 10 + length])
                    del buffer[: 10 + length]
                    return stream, kind, body
            frame_conn, frame_len = struct.unpack(">II", self.read_exactly(8))
            self.streams[frame_conn] += self.read_exactly(frame_len)

    def send_message(self, conn_id: int, stream: int, kind: int, body: bytes) -> None:
        message = struct.pack(">IIBB", len(body), stream, kind, 0) + body
        self.conn.sendall(struct.pack(">II", conn_id, len(message)) + message)

    def answer_registration(self, status_code: int = 0) -> pb.RegisterPluginRequest:
        stream, kind, body = self.read_message(2)
        request = ttrpc_pb.Request.FromString(body)
        assert (kind, request.service, request.method) == (1, RUNTIME_SERVICE, "RegisterPlugin")
        response = ttrpc_pb.Response()
        if status_code:
            response.status.code = status_code
            response.status.message = "refused by the test runtime"
        self.send_message(2, stream, 2, response.SerializeToString())
        return pb.RegisterPluginRequest.FromString(request.payload)

    def call(self, method: str, request: Message | bytes) -> ttrpc_pb.Response:
        return ttrpc_pb.Response.FromString(self.call_raw(method, request))

    def call_raw(self, method: str, request: Message | bytes) -> bytes:
        """Call the plugin's service; the answer's ttrpc body as it came."""
        payload = request if isinstance(request, bytes) else request.SerializeToString()
        stream = self.next_stream
        self.next_stream += 2
        envelope = ttrpc_pb.Request(service=PLUGIN_SERVICE, method=method, payload=payload)
        self.send_message(1, stream, 1, envelope.SerializeToString())
        answered, kind, body = self.read_message(1)
        assert (answered, kind) == (stream, 2)
        return body

    def read_runtime_call(self, method: str) -> tuple[int, bytes]:
        """The plugin's next call of the runtime's service: its stream id and envelope."""
        stream, kind, body = self.read_message(2)
        request = ttrpc_pb.Request.FromString(body)
        assert (kind, request.service, request.method) == (1, RUNTIME_SERVICE, method)
        return stream, body

    def read_until_closed(self) -> None:
        """File everything the plugin still sends by mux connection, until it closes."""
        data = bytearray()
        while True:
            try:
                chunk = self.conn.recv(1 << 16)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                break
            data += chunk
        while data:
            frame_conn, frame_len = struct.unpack(">II", data[:8])
            self.streams[frame_conn] += data[8 : 8 + frame_len]
            del data[: 8 + frame_len]

    def wait_closed(self) -> None:
        """The plugin closed its end (EOF within the deadline)."""
        while True:
            try:
                if not self.conn.recv(1 << 16):
                    return
            except ConnectionResetError:
                return


class Runtime:
    """A listening NRI socket accepting plugin connections."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(4)
        self.listener.settimeout(WAIT)
        self.accepted: list[socket.socket] = []

    def accept(self) -> RuntimeConnection:
        conn, _ = self.listener.accept()
        self.accepted.append(conn)
        return RuntimeConnection(conn)

    def accept_registered(self) -> RuntimeConnection:
        connection = self.accept()
        connection.answer_registration()
        return connection

    def close(self) -> None:
        for conn in self.accepted:
            conn.close()
        self.listener.close()


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    # A short directory: Unix socket paths are limited to 107 bytes.
    with tempfile.TemporaryDirectory(prefix="nri-") as directory:
        server = Runtime(str(Path(directory) / "nri.sock"))
        try:
            yield server
        finally:
            server.close()


@pytest.fixture
def handler() -> RecordingHandler:
    return RecordingHandler()


@pytest.fixture
def plugin(runtime: Runtime, handler: RecordingHandler) -> Iterator[NRIPlugin]:
    with NRIPlugin(
        runtime.path, "netcoord", 10, handler, reconnect_initial=0.01, reconnect_max=0.05
    ) as started:
        yield started


def pod(sandbox_id: str = "sb1", netns: str = NETNS) -> pb.PodSandbox:
    namespaces = [pb.LinuxNamespace(type="ipc", path="/proc/1/ns/ipc")]
    if netns:
        namespaces.append(pb.LinuxNamespace(type="network", path=netns))
    return pb.PodSandbox(
        id=sandbox_id,
        name="web",
        namespace="default",
        uid="uid-1",
        labels={"app": "web"},
        annotations={"a": "b"},
        linux=pb.LinuxPodSandbox(namespaces=namespaces),
    )


def container(container_id: str = "c1", sandbox_id: str = "sb1") -> pb.Container:
    return pb.Container(id=container_id, pod_sandbox_id=sandbox_id, name="app")


def test_registers_with_name_and_index_then_answers_configure_with_the_mask(
    runtime: Runtime, plugin: NRIPlugin
) -> None:
    connection = runtime.accept()
    # The plugin's first bytes are exactly the hand-derived RegisterPlugin frame.
    assert connection.read_exactly(len(REGISTER_FRAME)) == REGISTER_FRAME
    assert not plugin.registered
    connection.send_message(2, 1, 2, b"")
    assert plugin.wait_registered(WAIT)
    assert plugin.connected
    assert plugin.connections == 1

    response = connection.call("Configure", pb.ConfigureRequest(runtime_name="containerd"))
    assert not response.HasField("status")
    assert pb.ConfigureResponse.FromString(response.payload).events == 0x0F


def test_synchronize_in_parts_reaches_the_handler_once_whole(
    runtime: Runtime, plugin: NRIPlugin, handler: RecordingHandler
) -> None:
    connection = runtime.accept_registered()
    first = connection.call("Synchronize", pb.SynchronizeRequest(pods=[pod("sb1")], more=True))
    assert pb.SynchronizeResponse.FromString(first.payload).more
    assert not plugin.synchronized
    last = connection.call(
        "Synchronize",
        pb.SynchronizeRequest(pods=[pod("sb2", netns="")], containers=[container("c1", "sb1")]),
    )
    assert not last.HasField("status")
    assert not pb.SynchronizeResponse.FromString(last.payload).more
    assert plugin.wait_synchronized(WAIT)
    assert [name for name, _ in handler.wait_calls(1)] == ["synchronize"]
    ((sandboxes, containers),) = handler.synchronized
    assert [(s.id, s.netns_path) for s in sandboxes] == [("sb1", NETNS), ("sb2", "")]
    assert containers == [Container(id="c1", sandbox_id="sb1", name="app")]


def synchronized(connection: RuntimeConnection, *containers: pb.Container) -> None:
    """Configure and synchronize the plugin with one pod and ``containers``."""
    connection.call("Configure", pb.ConfigureRequest())
    answer = connection.call(
        "Synchronize", pb.SynchronizeRequest(pods=[pod()], containers=list(containers))
    )
    assert not answer.HasField("status"), answer


def test_containers_the_handler_returns_are_evicted_once_synchronize_is_answered(
    runtime: Runtime, plugin: NRIPlugin, handler: RecordingHandler
) -> None:
    connection = runtime.accept_registered()
    handler.evict = ["c1"]
    synchronized(connection, container("c1"))
    # The answer came first: nothing of the eviction had been read when it arrived.
    assert not connection.streams[2]

    stream, envelope = connection.read_runtime_call("UpdateContainers")
    assert stream == 3  # RegisterPlugin was 1
    assert envelope == UPDATE_CONTAINERS_ENVELOPE  # derived by hand, reason and all
    assert plugin.wait_evictions_sent(1, WAIT)
    ok = ttrpc_pb.Response(payload=pb.UpdateContainersResponse().SerializeToString())
    connection.send_message(2, stream, 2, ok.SerializeToString())
    # The connection goes on: a call after the eviction's answer is served.
    response = connection.call(
        "StateChange", pb.StateChangeEvent(event=pb.RUN_POD_SANDBOX, pod=pod())
    )
    assert not response.HasField("status")
    assert (plugin.evictions_sent, plugin.connections) == (1, 1)


@pytest.mark.parametrize("returned", [None, [], ()], ids=["none", "empty-list", "empty-tuple"])
def test_nothing_to_evict_sends_no_call(
    runtime: Runtime,
    plugin: NRIPlugin,
    handler: RecordingHandler,
    returned: object,
) -> None:
    connection = runtime.accept_registered()
    handler.evict = returned
    synchronized(connection, container("c1"))
    assert plugin.wait_synchronized(WAIT)
    plugin.stop()  # joins every worker: anything the plugin would send is sent by now
    connection.read_until_closed()
    assert not connection.streams[2]
    assert plugin.evictions_sent == 0


def test_a_malformed_answer_is_logged_and_only_its_container_ids_are_evicted(
    runtime: Runtime,
    plugin: NRIPlugin,
    handler: RecordingHandler,
    caplog: pytest.LogCaptureFixture,
) -> None:
    connection = runtime.accept_registered()
    handler.evict = ["c2", "", 7, "c1", "c2"]
    with caplog.at_level(logging.ERROR, logger="plugins.coordinator.nri"):
        synchronized(connection, container("c1"), container("c2"))
        _, envelope = connection.read_runtime_call("UpdateContainers")
    request = pb.UpdateContainersRequest.FromString(ttrpc_pb.Request.FromString(envelope).payload)
    assert [e.container_id for e in request.evict] == ["c2", "c1"]  # each once, in order
    assert not request.update
    problems = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(problems) == 2, problems
    assert "'' as a container id" in problems[0]
    assert "7 as a container id" in problems[1]
    assert plugin.wait_evictions_sent(2, WAIT)


def test_a_refused_eviction_is_logged_and_the_connection_stays(
    runtime: Runtime,
    plugin: NRIPlugin,
    handler: RecordingHandler,
    caplog: pytest.LogCaptureFixture,
) -> None:
    connection = runtime.accept_registered()
    handler.evict = ["c1"]
    with caplog.at_level(logging.WARNING, logger="plugins.coordinator.nri"):
        synchronized(connection, container("c1"))
        stream, _ = connection.read_runtime_call("UpdateContainers")
        refused = ttrpc_pb.Response()
        refused.status.code = 12
        refused.status.message = "method UpdateContainers"
        connection.send_message(2, stream, 2, refused.SerializeToString())
        # Served after the refusal was read: the refusal is logged by then.
        response = connection.call(
            "StateChange", pb.StateChangeEvent(event=pb.RUN_POD_SANDBOX, pod=pod())
        )
    assert not response.HasField("status")
    (record,) = [r for r in caplog.records if "refused" in r.getMessage()]
    assert "the eviction of c1: status 12: method UpdateContainers" in record.getMessage()
    assert plugin.connections == 1


def test_sandbox_events_arrive_as_state_changes_and_dedicated_calls(
    runtime: Runtime, plugin: NRIPlugin, handler: RecordingHandler
) -> None:
    connection = runtime.accept_registered()
    for event in (pb.RUN_POD_SANDBOX, pb.STOP_POD_SANDBOX, pb.REMOVE_POD_SANDBOX):
        response = connection.call("StateChange", pb.StateChangeEvent(event=event, pod=pod()))
        assert not response.HasField("status"), response
    response = connection.call("RunPodSandbox", pb.RunPodSandboxRequest(pod=pod("sb9")))
    assert not response.HasField("status"), response

    calls = handler.wait_calls(4)
    assert [name for name, _ in calls] == ["run", "stop", "remove", "run"]
    sandbox = calls[0][1]
    assert sandbox == PodSandbox(
        id="sb1",
        name="web",
        namespace="default",
        uid="uid-1",
        netns_path=NETNS,
        labels={"app": "web"},
        annotations={"a": "b"},
    )
    assert isinstance(calls[3][1], PodSandbox)
    assert calls[3][1].id == "sb9"


def test_create_container_refused_answers_the_status_naming_the_ids(
    runtime: Runtime, plugin: NRIPlugin, handler: RecordingHandler
) -> None:
    connection = runtime.accept_registered()
    request = pb.CreateContainerRequest(pod=pod(), container=container())
    handler.refuse = FailedPrecondition("networks of the sandbox are not connected yet")
    refused = connection.call("CreateContainer", request)
    assert refused.status.code == 9
    assert refused.status.message == (
        "CreateContainer c1 in sandbox sb1: networks of the sandbox are not connected yet"
    )

    handler.refuse = RuntimeError("a bug")
    failed = connection.call("CreateContainer", request)
    assert failed.status.code == 13
    assert "c1" in failed.status.message
    assert "sb1" in failed.status.message
    assert "a bug" not in failed.status.message  # the details are for our log

    handler.refuse = None
    allowed = connection.call("CreateContainer", request)
    assert not allowed.HasField("status")
    assert len(handler.wait_calls(3)) == 3


def test_containers_create_container_returns_are_evicted_in_its_answer(
    runtime: Runtime, plugin: NRIPlugin, handler: RecordingHandler
) -> None:
    connection = runtime.accept_registered()
    handler.evict_on_create = ["c1"]
    body = connection.call_raw(
        "CreateContainer", pb.CreateContainerRequest(pod=pod(), container=container("c2"))
    )
    assert body == CREATE_CONTAINER_REPLY  # derived by hand: evict c1, EVICTION_REASON
    assert plugin.wait_evictions_sent(1, WAIT)
    plugin.stop()  # joins every worker: anything the plugin would send is sent by now
    connection.read_until_closed()
    assert not connection.streams[2]  # the answer carried it: no UpdateContainers call
    assert plugin.evictions_sent == 1


def test_a_malformed_create_container_answer_is_logged_and_only_its_ids_are_evicted(
    runtime: Runtime,
    plugin: NRIPlugin,
    handler: RecordingHandler,
    caplog: pytest.LogCaptureFixture,
) -> None:
    connection = runtime.accept_registered()
    request = pb.CreateContainerRequest(pod=pod(), container=container("c9"))
    handler.evict_on_create = ["c2", "", 7, "c1", "c2"]
    with caplog.at_level(logging.ERROR, logger="plugins.coordinator.nri"):
        answer = connection.call("CreateContainer", request)
    assert not answer.HasField("status")  # the container goes ahead all the same
    response = pb.CreateContainerResponse.FromString(answer.payload)
    assert [e.container_id for e in response.evict] == ["c2", "c1"]
    problems = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(problems) == 2, problems
    assert "create_container returned '' as a container id" in problems[0]
    assert "create_container returned 7 as a container id" in problems[1]
    assert plugin.wait_evictions_sent(2, WAIT)

    handler.evict_on_create = "c1"  # a string is not a list of ids
    with caplog.at_level(logging.ERROR, logger="plugins.coordinator.nri"):
        answer = connection.call("CreateContainer", request)
    assert not answer.HasField("status")
    assert answer.payload == b""  # nothing to evict: the empty answer
    assert "create_container returned 'c1', not a list" in caplog.records[-1].getMessage()


@pytest.mark.parametrize("returned", [None, [], ()], ids=["none", "empty-list", "empty-tuple"])
def test_create_container_with_nothing_to_evict_answers_empty(
    runtime: Runtime, plugin: NRIPlugin, handler: RecordingHandler, returned: object
) -> None:
    connection = runtime.accept_registered()
    handler.evict_on_create = returned
    answer = connection.call(
        "CreateContainer", pb.CreateContainerRequest(pod=pod(), container=container())
    )
    assert (answer.HasField("status"), answer.payload) == (False, b"")
    plugin.stop()
    assert plugin.evictions_sent == 0


def test_a_refused_create_container_evicts_nothing(
    runtime: Runtime, plugin: NRIPlugin, handler: RecordingHandler
) -> None:
    connection = runtime.accept_registered()
    handler.evict_on_create = ["c1"]
    handler.refuse = FailedPrecondition("networks of the sandbox are not connected yet")
    refused = connection.call(
        "CreateContainer", pb.CreateContainerRequest(pod=pod(), container=container("c2"))
    )
    assert (refused.status.code, refused.payload) == (9, b"")  # an error has no payload
    plugin.stop()
    connection.read_until_closed()
    assert not connection.streams[2]
    assert plugin.evictions_sent == 0


def test_update_and_stop_container_are_answered_empty(
    runtime: Runtime, plugin: NRIPlugin, handler: RecordingHandler
) -> None:
    connection = runtime.accept_registered()
    for method, request in (
        ("UpdateContainer", pb.UpdateContainerRequest(pod=pod(), container=container())),
        ("StopContainer", pb.StopContainerRequest(pod=pod(), container=container())),
        ("Shutdown", pb.Empty()),
    ):
        response = connection.call(method, request)
        assert not response.HasField("status"), method
        assert response.payload == b""
    assert handler.calls == []


def test_a_call_without_what_it_needs_is_refused_and_reaches_no_handler(
    runtime: Runtime, plugin: NRIPlugin, handler: RecordingHandler
) -> None:
    connection = runtime.accept_registered()
    no_pod = connection.call("StateChange", pb.StateChangeEvent(event=pb.RUN_POD_SANDBOX))
    assert (no_pod.status.code, no_pod.status.message) == (
        3,
        "RunPodSandbox: the call carries no pod sandbox",
    )
    mismatch = connection.call(
        "CreateContainer",
        pb.CreateContainerRequest(pod=pod("sb1"), container=container("c1", "sb2")),
    )
    assert mismatch.status.code == 3
    assert "names sandbox sb2" in mismatch.status.message
    garbage = connection.call("Configure", b"\xff")
    assert garbage.status.code == 3
    assert "nri.pkg.api.v1alpha1.ConfigureRequest" in garbage.status.message
    unknown = connection.call("PostStartContainer", b"")
    assert unknown.status.code == 12
    assert handler.calls == []
    assert plugin.connections == 1  # refused calls keep the connection


def test_an_even_stream_id_is_refused(runtime: Runtime, plugin: NRIPlugin) -> None:
    connection = runtime.accept_registered()
    envelope = ttrpc_pb.Request(service=PLUGIN_SERVICE, method="Shutdown")
    connection.send_message(1, 2, 1, envelope.SerializeToString())
    stream, kind, body = connection.read_message(1)
    assert (stream, kind) == (2, 2)
    assert ttrpc_pb.Response.FromString(body).status.code == 3


@pytest.mark.parametrize(
    ("garbage", "reason"),
    [
        # A ttrpc request whose body is not a ttrpc.Request (0xff: a truncated varint).
        (struct.pack(">II", 1, 11) + struct.pack(">IIBB", 1, 1, 1, 0) + b"\xff", "ttrpc.Request"),
        # A mux frame declaring more than the protocol's largest frame.
        (struct.pack(">II", 1, 0x0FFFFFFF), "declares 268435455 bytes"),
        # A response on the plugin's service connection.
        (struct.pack(">II", 1, 10) + struct.pack(">IIBB", 0, 1, 2, 0), "type 2"),
    ],
    ids=["not-a-ttrpc-request", "oversized-mux-frame", "response-on-plugin-service"],
)
def test_an_unparseable_frame_drops_the_connection_and_changes_nothing(
    runtime: Runtime,
    plugin: NRIPlugin,
    handler: RecordingHandler,
    caplog: pytest.LogCaptureFixture,
    garbage: bytes,
    reason: str,
) -> None:
    connection = runtime.accept_registered()
    assert plugin.wait_registered(WAIT)
    with caplog.at_level(logging.WARNING, logger="plugins.coordinator.nri"):
        connection.conn.sendall(garbage)
        connection.wait_closed()
        # The loop starts over: a new connection registers again.
        again = runtime.accept_registered()
    assert plugin.wait_registered(WAIT)
    assert plugin.connections == 2
    (record,) = [r for r in caplog.records if "dropping connection 1" in r.getMessage()]
    assert reason in record.getMessage()
    assert handler.calls == []
    response = again.call("StateChange", pb.StateChangeEvent(event=pb.RUN_POD_SANDBOX, pod=pod()))
    assert not response.HasField("status")


def test_reconnects_and_registers_again_after_the_runtime_closes(
    runtime: Runtime, plugin: NRIPlugin, handler: RecordingHandler
) -> None:
    first = runtime.accept_registered()
    assert plugin.wait_registered(WAIT)
    first.call("Configure", pb.ConfigureRequest())
    first.call("Synchronize", pb.SynchronizeRequest(pods=[pod()]))
    assert plugin.wait_synchronized(WAIT)
    first.conn.close()

    second = runtime.accept()
    request = second.answer_registration()
    assert (request.plugin_name, request.plugin_idx) == ("netcoord", "10")
    assert plugin.wait_registered(WAIT)
    assert plugin.connections == 2
    assert not plugin.synchronized  # until the runtime synchronizes this connection
    configure = second.call("Configure", pb.ConfigureRequest())
    assert pb.ConfigureResponse.FromString(configure.payload).events == 0x0F
    second.call("Synchronize", pb.SynchronizeRequest(pods=[pod()]))
    assert plugin.wait_synchronized(WAIT)
    assert [name for name, _ in handler.wait_calls(2)] == ["synchronize", "synchronize"]


def test_a_refused_registration_drops_the_connection_and_retries(
    runtime: Runtime, plugin: NRIPlugin
) -> None:
    refused = runtime.accept()
    refused.answer_registration(status_code=3)
    refused.wait_closed()
    assert not plugin.registered
    runtime.accept_registered()
    assert plugin.wait_registered(WAIT)
    assert plugin.connections == 2


def test_an_unanswered_registration_times_out_and_retries(
    runtime: Runtime, handler: RecordingHandler
) -> None:
    with NRIPlugin(
        runtime.path,
        "netcoord",
        "07",
        handler,
        registration_timeout=0.2,
        reconnect_initial=0.01,
    ) as plugin:
        silent = runtime.accept()
        silent.wait_closed()
        request = runtime.accept().answer_registration()
        assert request.plugin_idx == "07"
        assert plugin.wait_registered(WAIT)


def test_a_slow_handler_does_not_block_other_calls(
    runtime: Runtime, plugin: NRIPlugin, handler: RecordingHandler
) -> None:
    connection = runtime.accept_registered()
    handler.hold_create = threading.Event()
    envelope = ttrpc_pb.Request(
        service=PLUGIN_SERVICE,
        method="CreateContainer",
        payload=pb.CreateContainerRequest(pod=pod(), container=container()).SerializeToString(),
    )
    connection.send_message(1, 1, 1, envelope.SerializeToString())
    connection.next_stream = 3
    # Answered while CreateContainer (stream 1) is still held in its handler.
    response = connection.call(
        "StateChange", pb.StateChangeEvent(event=pb.STOP_POD_SANDBOX, pod=pod())
    )
    assert not response.HasField("status")
    handler.hold_create.set()
    stream, kind, _ = connection.read_message(1)
    assert (stream, kind) == (1, 2)


def test_stop_closes_the_connection_and_joins_every_thread(
    runtime: Runtime, handler: RecordingHandler
) -> None:
    before = set(threading.enumerate())
    plugin = NRIPlugin(runtime.path, "netcoord", 10, handler)
    plugin.start()
    connection = runtime.accept_registered()
    assert plugin.wait_registered(WAIT)
    connection.call("StateChange", pb.StateChangeEvent(event=pb.RUN_POD_SANDBOX, pod=pod()))
    plugin.stop()
    connection.wait_closed()
    assert not plugin.connected
    assert not plugin.registered
    assert set(threading.enumerate()) <= before
    plugin.stop()  # idempotent


def test_stop_while_the_runtime_is_away(tmp_path: Path, handler: RecordingHandler) -> None:
    with NRIPlugin(str(tmp_path / "absent.sock"), "netcoord", 10, handler) as plugin:
        assert not plugin.wait_registered(0.05)
        assert plugin.connections == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"index": 100}, "not two digits"),
        ({"index": "7"}, "not two digits"),
        ({"name": "net coord"}, "not of"),
        ({"events": [Event.START_CONTAINER]}, "START_CONTAINER"),
        ({"events": []}, "at least one event"),
    ],
)
def test_bad_settings_are_refused_naming_them(
    handler: RecordingHandler, kwargs: dict[str, object], message: str
) -> None:
    settings: dict[str, object] = {"name": "netcoord", "index": 10, "handler": handler}
    settings.update(kwargs)
    with pytest.raises(ValueError, match=message):
        NRIPlugin("/nonexistent.sock", **settings)  # type: ignore[arg-type]
