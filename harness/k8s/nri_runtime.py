"""A container runtime that speaks NRI to plugins the way containerd does, for tests.

``NRIRuntimeSim`` listens on an NRI socket (the runtime listens, plugins dial) and treats
every plugin as containerd's NRI adaptation (containerd/nri ``pkg/adaptation``) does:

1. the plugin must call ``Runtime.RegisterPlugin`` (name, two-digit index) within the
   registration timeout (containerd's default 5 s), or it is dropped;
2. the runtime calls ``Plugin.Configure`` (config, runtime name and version, both timeouts
   in milliseconds) and reads the event mask from the answer (0 means every event; a bit
   outside the valid events fails the plugin), then ``Plugin.Synchronize`` with the
   sandboxes and containers it has;
3. events go to the plugins subscribed to them, one plugin after another in index order:
   RunPodSandbox / StopPodSandbox / RemovePodSandbox as ``StateChange`` (NRI up to v0.11;
   ``pod_calls="dedicated"`` sends v0.12's dedicated calls and falls back to StateChange
   on Unimplemented, as v0.12 does), and ``CreateContainer``;
4. every call has the request timeout (default 2 s). A plugin that times out, whose
   connection closes or breaks the protocol is dropped and the runtime carries on without
   it: the sandbox or container proceeds (NRI is fail-open). A plugin that answers with
   an error refuses: the remaining plugins are not called; a refused RunPodSandbox or
   CreateContainer fails, a refused StopPodSandbox or RemovePodSandbox is only logged
   (containerd logs "NRI sandbox stop notification failed" and goes on).

A plugin asks the runtime to stop (evict) containers in the answer to CreateContainer
(its ``evict``) or by calling ``Runtime.UpdateContainers``. An eviction the runtime carries
out stops a container it has (it leaves ``containers``, as the kubelet sees it stopped;
the kubelet's recreation is a new ``create_container``) and is recorded in ``evictions``
with the method that carried it. A CreateContainer answer's evictions are carried out
once every plugin has answered and none refused, before the new container exists;
containerd applies no part of a refused CreateContainer, so those of the plugins that
answered before the refusal are not. Upstream's adaptation (containerd/nri
``pkg/adaptation``) passes only the updates of UpdateContainers on to containerd and drops
its evictions: ``honour_update_evictions=False`` does the same, while the default follows
the message's meaning. An eviction not carried out (dropped as containerd does, of a
container the runtime does not have, or of a refused CreateContainer) fails no call and
is kept in ``ignored_evictions`` with why. The simulator models no container resources,
so every update in UpdateContainers that may not fail comes back in ``failed``; the
updates of a CreateContainer answer are not looked at.

Unlike containerd, which takes one connecting plugin at a time, the simulator registers
connections concurrently; it still synchronizes a plugin and dispatches events one at a
time, so a plugin never sees an event before its Synchronize. The simulator creates no
namespaces: the lab gives each sandbox its network namespace path.

The framing is ``harness.k8s.nri_frames`` (written independently of the coordinator's
adapter); the messages are the generated classes of ``plugins.api.nri`` and
``plugins.api.ttrpc``.

Use::

    with NRIRuntimeSim(tmp_path / "nri.sock", request_timeout=0.5) as runtime:
        ...  # start the plugin, pointed at the socket
        runtime.wait_for_plugin("coordinator", timeout=10)
        runtime.run_pod_sandbox(SimSandbox("pod-1", "web", "default", "uid-1", netns_path))
        outcome = runtime.create_container("pod-1", "app")
        assert outcome.proceeded, outcome.refusal
        runtime.stall_next("coordinator", NRIEvent.STOP_POD_SANDBOX)  # a timeout, now
        assert runtime.stop_pod_sandbox("pod-1").dropped  # fail-open: the stop goes on
        runtime.hold_new_plugins()  # a plugin that connects now waits before Configure
        runtime.disconnect("coordinator")
        runtime.wait_for_held("coordinator", timeout=10)  # back, but not in the runtime yet
        runtime.create_container("pod-1", "app")  # proceeds without it (fail-open)
        runtime.admit_new_plugins()  # configured and synchronized: it may evict
        runtime.wait_for_eviction(container_id, timeout=10).method  # "UpdateContainers"

    # As containerd today: only the evictions in CreateContainer answers are carried out.
    NRIRuntimeSim(path, honour_update_evictions=False)
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

from google.protobuf.message import DecodeError, Message

from plugins.api.nri.v1alpha1 import nri_pb2 as nri
from plugins.api.ttrpc import ttrpc_pb2 as ttrpc

from .nri_frames import (
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    FrameError,
    MessageType,
    TrunkDecoder,
    TtrpcFrame,
    encode,
)

RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"

DEFAULT_REGISTRATION_TIMEOUT = 5.0
DEFAULT_REQUEST_TIMEOUT = 2.0

VALID_EVENTS = (1 << (nri.LAST - 1)) - 1
"""The event mask of every event a plugin may subscribe to (containerd's ValidEvents)."""

# gRPC status codes the simulator sends or tells apart.
_CODE_UNKNOWN = 2
_CODE_UNIMPLEMENTED = 12

_MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL
_PLUGIN_INDEX = re.compile(r"[0-9]{2}")
_PLUGIN_NAME = re.compile(r"[A-Za-z0-9_.+-]+")


class NRIEvent(StrEnum):
    """What the runtime sends a plugin; the values are the NRI method names."""

    CONFIGURE = "Configure"
    SYNCHRONIZE = "Synchronize"
    RUN_POD_SANDBOX = "RunPodSandbox"
    STOP_POD_SANDBOX = "StopPodSandbox"
    REMOVE_POD_SANDBOX = "RemovePodSandbox"
    CREATE_CONTAINER = "CreateContainer"
    SHUTDOWN = "Shutdown"


_MASKED_EVENTS: Mapping[NRIEvent, nri.Event.ValueType] = {
    NRIEvent.RUN_POD_SANDBOX: nri.RUN_POD_SANDBOX,
    NRIEvent.STOP_POD_SANDBOX: nri.STOP_POD_SANDBOX,
    NRIEvent.REMOVE_POD_SANDBOX: nri.REMOVE_POD_SANDBOX,
    NRIEvent.CREATE_CONTAINER: nri.CREATE_CONTAINER,
}
"""Events a plugin subscribes to; Configure, Synchronize and Shutdown go to every plugin."""


def event_bit(event: NRIEvent) -> int:
    """The event's bit in a Configure answer's mask (``1 << (event - 1)``)."""
    return 1 << (_MASKED_EVENTS[event] - 1)


@dataclass(frozen=True)
class SimSandbox:
    """A pod sandbox as the runtime knows it. ``netns_path`` empty: host network."""

    id: str
    name: str
    namespace: str
    uid: str
    netns_path: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("id", "name", "namespace", "uid"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"SimSandbox.{name} must be a non-empty string, got {value!r}")
        if not isinstance(self.netns_path, str):
            raise ValueError(f"SimSandbox.netns_path must be a string, got {self.netns_path!r}")


@dataclass(frozen=True)
class SimContainer:
    """A container the runtime created (CreateContainer was not refused)."""

    id: str
    sandbox_id: str
    name: str


@dataclass(frozen=True)
class PluginInfo:
    """A registered plugin. ``name`` is containerd's: ``<index>-<base>``."""

    base: str
    index: str
    connection: int  # the simulator's serial number of the plugin's connection
    events: int = 0  # the subscribed event mask, once configured

    @property
    def name(self) -> str:
        return f"{self.index}-{self.base}"

    def subscribed(self, event: NRIEvent) -> bool:
        return event not in _MASKED_EVENTS or bool(self.events & event_bit(event))


@dataclass(frozen=True)
class Refusal:
    """A plugin answered an event with an error status."""

    plugin: str
    code: int
    message: str


@dataclass(frozen=True)
class Drop:
    """A plugin the runtime gave up on, and why; ``during`` is the phase or the event."""

    plugin: str  # containerd's name, or "connection <n>" for one that never registered
    during: str
    reason: str


# Why an eviction was not carried out (``Eviction.ignored``).
IGNORED_UPDATE_EVICTION = "containerd drops UpdateContainers evictions"
IGNORED_UNKNOWN_CONTAINER = "the runtime has no such container"
IGNORED_REFUSED_CREATE = "the CreateContainer was refused"


@dataclass(frozen=True)
class Eviction:
    """A plugin's request that the runtime stop a container."""

    container_id: str
    reason: str  # the plugin's
    plugin: str  # containerd's name of the plugin that asked
    method: str  # the NRI call that carried it: UpdateContainers or CreateContainer
    ignored: str = ""  # why the runtime did not carry it out; empty if it did


@dataclass(frozen=True)
class EventRecord:
    """One event sent to one plugin, for reports: ``result`` is answered/refused/dropped."""

    plugin: str
    event: NRIEvent
    method: str  # the NRI call that carried it (StateChange for pod events on old runtimes)
    target: str  # sandbox or container id, or what Synchronize carried
    result: Literal["answered", "refused", "dropped"]
    detail: str = ""


@dataclass(frozen=True)
class EventOutcome:
    """What happened to one runtime event across the plugins."""

    event: NRIEvent
    target: str
    proceeded: bool  # the sandbox/container went ahead (fail-open: drops never stop it)
    answered: tuple[str, ...] = ()
    refused: tuple[Refusal, ...] = ()
    dropped: tuple[Drop, ...] = ()
    unsubscribed: tuple[str, ...] = ()
    container: SimContainer | None = None  # the container created, for CreateContainer
    evicted: tuple[Eviction, ...] = ()  # carried out from the answers (CreateContainer)

    @property
    def refusal(self) -> str | None:
        """The refusing plugin's message, if one refused."""
        return self.refused[0].message if self.refused else None


@dataclass(frozen=True)
class _Reply:
    kind: Literal["ok", "error", "timeout", "closed"]
    payload: bytes = b""
    code: int = 0
    message: str = ""


@dataclass
class _Connection:
    """One plugin connection; its fields are guarded by the simulator's condition."""

    serial: int
    sock: socket.socket
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    next_stream_id: int = 1  # the runtime is the client on connection 1: odd stream ids
    pending: dict[int, bytes | None] = field(default_factory=dict)
    plugin: PluginInfo | None = None
    registration_error: str | None = None
    closed: bool = False  # the socket is gone (EOF, error, or we closed it)
    dropped: bool = False  # the runtime has given up on the plugin
    stalls: set[NRIEvent] = field(default_factory=set)
    drop: Drop | None = None  # why the runtime gave up on it, once it has
    threads: list[threading.Thread] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.plugin.name if self.plugin is not None else f"connection {self.serial}"


def _names_match(full_name: str, query: str) -> bool:
    """``query`` is containerd's full name (``10-coordinator``) or the base alone."""
    return query == full_name or (len(full_name) > 3 and full_name[3:] == query)


def _registration_error(request: nri.RegisterPluginRequest) -> str | None:
    if not _PLUGIN_NAME.fullmatch(request.plugin_name):
        return f"invalid plugin name {request.plugin_name!r} (not [a-zA-Z0-9_.+-]+)"
    if not _PLUGIN_INDEX.fullmatch(request.plugin_idx):
        return f"invalid plugin index {request.plugin_idx!r} (not two digits)"
    return None


def _status(code: int, message: str) -> bytes:
    """A ttrpc Response carrying an error status (a google.rpc.Status)."""
    response = ttrpc.Response()
    response.status.code = code
    response.status.message = message
    return response.SerializeToString()


def _ok(payload: bytes) -> bytes:
    """A ttrpc Response of a successful call."""
    response = ttrpc.Response(payload=payload)
    response.status.SetInParent()  # a Go ttrpc server always sends the status, code OK
    return response.SerializeToString()


def _pod_message(sandbox: SimSandbox) -> nri.PodSandbox:
    pod = nri.PodSandbox(
        id=sandbox.id,
        name=sandbox.name,
        uid=sandbox.uid,
        namespace=sandbox.namespace,
        labels=dict(sandbox.labels),
        annotations=dict(sandbox.annotations),
    )
    if sandbox.netns_path:
        pod.linux.namespaces.add(type="network", path=sandbox.netns_path)
    return pod


def _container_message(
    container: SimContainer, state: nri.ContainerState.ValueType
) -> nri.Container:
    return nri.Container(
        id=container.id,
        pod_sandbox_id=container.sandbox_id,
        name=container.name,
        state=state,
    )


class NRIRuntimeSim:
    """An NRI runtime for tests: listens on ``socket_path`` while used as a context manager.

    Thread-safe: events may be sent from any thread (one at a time, as containerd does);
    plugins connect, register and drop concurrently. On exit every connection, the
    listener and every thread are closed, and the socket file removed.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        *,
        registration_timeout: float = DEFAULT_REGISTRATION_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        runtime_name: str = "nri-runtime-sim",
        runtime_version: str = "0.1",
        plugin_config: str = "",
        pod_calls: Literal["state_change", "dedicated"] = "state_change",
        honour_update_evictions: bool = True,
    ) -> None:
        path = Path(socket_path)
        if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
            raise ValueError(
                f"socket_path {str(path)!r} is longer than a Unix socket path holds "
                f"({_MAX_SOCKET_PATH} bytes)"
            )
        for name, value in (
            ("registration_timeout", registration_timeout),
            ("request_timeout", request_timeout),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if pod_calls not in ("state_change", "dedicated"):
            raise ValueError(f"pod_calls must be 'state_change' or 'dedicated', got {pod_calls!r}")
        if not isinstance(honour_update_evictions, bool):
            raise ValueError(
                f"honour_update_evictions must be True or False, got {honour_update_evictions!r}"
            )
        self.socket_path = path
        self.registration_timeout = registration_timeout
        self.request_timeout = request_timeout
        self.runtime_name = runtime_name
        self.runtime_version = runtime_version
        self.plugin_config = plugin_config
        self.pod_calls = pod_calls
        # False: UpdateContainers' evictions are dropped, as containerd drops them.
        self.honour_update_evictions = honour_update_evictions

        self._cond = threading.Condition()
        # Held for a whole event or a plugin's Synchronize, never while waiting on _cond's
        # predicate of another thread: events and synchronizations do not interleave.
        self._dispatch_lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._running = False
        self._stopping = False
        self._connections: list[_Connection] = []
        self._active: list[_Connection] = []
        self._sandboxes: dict[str, SimSandbox] = {}
        self._stopped: set[str] = set()
        self._containers: dict[str, SimContainer] = {}
        self._container_serial = 0
        self._drops: list[Drop] = []
        self._events: list[EventRecord] = []
        self._evictions: list[Eviction] = []
        self._ignored_evictions: list[Eviction] = []
        # While set, a plugin that registers waits before Configure (``hold_new_plugins``).
        self._holding = False
        self._held: list[_Connection] = []

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        """Listen on the socket (a stale socket file is replaced, as containerd does)."""
        if self._running or self._stopping:
            raise RuntimeError("NRIRuntimeSim can be started once")
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(self.socket_path))
            listener.listen()
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._wake_r, self._wake_w = socket.socketpair()
        self._running = True
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="nri-sim-accept", daemon=True
        )
        self._acceptor.start()

    def close(self) -> None:
        """Stop listening, close every plugin connection and join every thread."""
        with self._cond:
            if not self._running:
                return
            self._running = False
            self._stopping = True
            connections = list(self._connections)
            for conn in connections:
                conn.dropped = True  # the runtime stopping is not a plugin's drop
                self._shutdown_socket(conn)
            self._active.clear()
            self._cond.notify_all()
        assert self._wake_w is not None
        assert self._acceptor is not None
        self._wake_w.send(b"x")
        threads = [self._acceptor] + [t for conn in connections for t in conn.threads]
        deadline = self.request_timeout + self.registration_timeout + 1.0
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(deadline)
        for conn in connections:
            conn.sock.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        alive = [t.name for t in threads if t.is_alive()]
        if alive:
            raise RuntimeError(f"NRIRuntimeSim threads still running after close: {alive}")

    # -- what tests look at ------------------------------------------------------------

    @property
    def plugins(self) -> tuple[PluginInfo, ...]:
        """The registered, configured and synchronized plugins, in call order."""
        with self._cond:
            return tuple(conn.plugin for conn in self._active if conn.plugin is not None)

    @property
    def drops(self) -> tuple[Drop, ...]:
        with self._cond:
            return tuple(self._drops)

    @property
    def events(self) -> tuple[EventRecord, ...]:
        """Every call made to every plugin, in order."""
        with self._cond:
            return tuple(self._events)

    def events_for(self, plugin: str) -> tuple[EventRecord, ...]:
        """The calls made to one plugin (full name or base), in order."""
        with self._cond:
            return tuple(r for r in self._events if _names_match(r.plugin, plugin))

    @property
    def sandboxes(self) -> tuple[SimSandbox, ...]:
        with self._cond:
            return tuple(self._sandboxes.values())

    @property
    def containers(self) -> tuple[SimContainer, ...]:
        with self._cond:
            return tuple(self._containers.values())

    @property
    def evictions(self) -> tuple[Eviction, ...]:
        """Containers stopped at a plugin's request, in order."""
        with self._cond:
            return tuple(self._evictions)

    @property
    def ignored_evictions(self) -> tuple[Eviction, ...]:
        """Evictions not carried out, each with why (``Eviction.ignored``), in order."""
        with self._cond:
            return tuple(self._ignored_evictions)

    def wait_for_eviction(self, container_id: str, timeout: float) -> Eviction:
        """Wait until a plugin has had ``container_id`` evicted; return the eviction."""
        with self._cond:

            def found() -> list[Eviction]:
                return [e for e in self._evictions if e.container_id == container_id]

            if not self._cond.wait_for(found, timeout):
                raise TimeoutError(
                    f"container {container_id!r} not evicted within {timeout} s; evictions: "
                    f"{self._evictions}, ignored: {self._ignored_evictions}"
                )
            return found()[0]

    def wait_for_plugin(self, name: str, timeout: float) -> PluginInfo:
        """Wait until a plugin of that name is registered, configured and synchronized."""
        with self._cond:
            found = self._cond.wait_for(lambda: self._active_matching(name), timeout)
            if not found:
                raise TimeoutError(
                    f"no NRI plugin {name!r} synchronized within {timeout} s; registered: "
                    f"{[c.label for c in self._active]}, dropped: {self._drops}"
                )
            plugin = found[0].plugin
            assert plugin is not None
            return plugin

    def wait_for_drop(self, name: str, timeout: float, *, count: int = 1) -> Drop:
        """Wait until ``count`` drops of the plugin are recorded; return the last of them."""
        with self._cond:

            def matching() -> list[Drop]:
                return [d for d in self._drops if _names_match(d.plugin, name)]

            if not self._cond.wait_for(lambda: len(matching()) >= count, timeout):
                raise TimeoutError(
                    f"NRI plugin {name!r} not dropped {count} time(s) within {timeout} s; "
                    f"drops: {self._drops}"
                )
            return matching()[count - 1]

    # -- test hooks --------------------------------------------------------------------

    def stall_next(self, plugin: str, event: NRIEvent | str) -> None:
        """Make the next ``event`` request to ``plugin`` time out on the runtime's side.

        The request is sent, but the runtime does not wait for the answer: it treats the
        call as timed out at once, drops the plugin and goes on (as after the request
        timeout, without spending it).
        """
        try:
            which = NRIEvent(event)
        except ValueError:
            raise ValueError(
                f"unknown NRI event {event!r}; one of {[e.value for e in NRIEvent]}"
            ) from None
        with self._cond:
            self._resolve(plugin).stalls.add(which)

    def hold_new_plugins(self) -> None:
        """From now on, a plugin that registers waits before Configure, and so gets no
        event, until ``admit_new_plugins``: the runtime goes on without it (fail-open),
        as while a real one is still connecting. Plugins already in are not affected."""
        with self._cond:
            self._check_running()
            self._holding = True

    def admit_new_plugins(self) -> None:
        """End ``hold_new_plugins``: the held plugins are configured and synchronized."""
        with self._cond:
            self._holding = False
            self._cond.notify_all()

    def wait_for_held(self, name: str, timeout: float) -> PluginInfo:
        """Wait until a plugin of that name has registered and is held."""
        with self._cond:

            def held() -> list[_Connection]:
                return [
                    c
                    for c in self._held
                    if c.plugin is not None and _names_match(c.plugin.name, name)
                ]

            found = self._cond.wait_for(held, timeout)
            if not found:
                raise TimeoutError(
                    f"no NRI plugin {name!r} held within {timeout} s; held: "
                    f"{[c.label for c in self._held]}, dropped: {self._drops}"
                )
            plugin = found[0].plugin
            assert plugin is not None
            return plugin

    def disconnect(self, plugin: str) -> Drop:
        """Close the plugin's connection from the runtime's side; it is dropped."""
        with self._cond:
            conn = self._resolve(plugin)
            drop = self._drop_locked(conn, "disconnect", "disconnected by the test")
        assert drop is not None
        return drop

    # -- runtime events ----------------------------------------------------------------

    def run_pod_sandbox(self, sandbox: SimSandbox) -> EventOutcome:
        """The sandbox starts: RunPodSandbox; refused, the sandbox is not created."""
        if not isinstance(sandbox, SimSandbox):
            raise TypeError(f"run_pod_sandbox takes a SimSandbox, got {type(sandbox).__name__}")
        with self._dispatch_lock:
            with self._cond:
                self._check_running()
                if sandbox.id in self._sandboxes:
                    raise ValueError(f"sandbox {sandbox.id!r} already exists")
            outcome = self._dispatch(NRIEvent.RUN_POD_SANDBOX, sandbox.id, sandbox, None)
            outcome = replace(outcome, proceeded=not outcome.refused)
            if outcome.proceeded:
                with self._cond:
                    self._sandboxes[sandbox.id] = sandbox
            return outcome

    def stop_pod_sandbox(self, sandbox_id: str) -> EventOutcome:
        """The sandbox stops: StopPodSandbox. It stops whatever the plugins answer."""
        with self._dispatch_lock:
            sandbox = self._known_sandbox(sandbox_id)
            outcome = self._dispatch(NRIEvent.STOP_POD_SANDBOX, sandbox_id, sandbox, None)
            with self._cond:
                self._stopped.add(sandbox_id)
            return outcome

    def remove_pod_sandbox(self, sandbox_id: str) -> EventOutcome:
        """The stopped sandbox and its containers go: RemovePodSandbox."""
        with self._dispatch_lock:
            sandbox = self._known_sandbox(sandbox_id)
            with self._cond:
                if sandbox_id not in self._stopped:
                    raise ValueError(f"sandbox {sandbox_id!r} is running; stop it first")
            outcome = self._dispatch(NRIEvent.REMOVE_POD_SANDBOX, sandbox_id, sandbox, None)
            with self._cond:
                del self._sandboxes[sandbox_id]
                self._stopped.discard(sandbox_id)
                for container_id in [
                    c.id for c in self._containers.values() if c.sandbox_id == sandbox_id
                ]:
                    del self._containers[container_id]
            return outcome

    def create_container(self, sandbox_id: str, name: str) -> EventOutcome:
        """A container is created in a running sandbox: CreateContainer; refused, it is not."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"container name must be a non-empty string, got {name!r}")
        with self._dispatch_lock:
            sandbox = self._known_sandbox(sandbox_id)
            with self._cond:
                if sandbox_id in self._stopped:
                    raise ValueError(f"sandbox {sandbox_id!r} is stopped")
                self._container_serial += 1
                container = SimContainer(
                    f"{sandbox_id}-{name}-{self._container_serial}", sandbox_id, name
                )
            carried: list[Eviction] = []
            outcome = self._dispatch(
                NRIEvent.CREATE_CONTAINER, container.id, sandbox, container, carried
            )
            proceeded = not outcome.refused
            with self._cond:
                if proceeded:
                    # Before the container exists: containerd evicts while creating it.
                    evicted = self._evict_locked(carried)
                    self._containers[container.id] = container
                else:
                    evicted = ()
                    self._ignored_evictions.extend(
                        replace(eviction, ignored=IGNORED_REFUSED_CREATE) for eviction in carried
                    )
                self._cond.notify_all()
            return replace(
                outcome,
                proceeded=proceeded,
                container=container if proceeded else None,
                evicted=evicted,
            )

    def shutdown(self) -> EventOutcome:
        """Tell every plugin the runtime is going away (Shutdown); connections stay open.

        containerd itself closes plugin connections without calling Shutdown; this is for
        tests of a plugin's Shutdown handler.
        """
        with self._dispatch_lock:
            with self._cond:
                self._check_running()
            return self._dispatch(NRIEvent.SHUTDOWN, "", None, None)

    # -- dispatch ----------------------------------------------------------------------

    def _dispatch(
        self,
        event: NRIEvent,
        target: str,
        sandbox: SimSandbox | None,
        container: SimContainer | None,
        carried: list[Eviction] | None = None,
    ) -> EventOutcome:
        """Send one event to the active plugins in order (the caller holds _dispatch_lock).

        The evictions the CreateContainer answers carry are appended to ``carried``.
        """
        answered: list[str] = []
        refused: list[Refusal] = []
        dropped: list[Drop] = []
        unsubscribed: list[str] = []
        with self._cond:
            plugins = [(conn, conn.plugin) for conn in self._active if conn.plugin is not None]
        for conn, plugin in plugins:
            if not plugin.subscribed(event):
                unsubscribed.append(plugin.name)
                continue
            method, reply = self._send_event(conn, event, sandbox, container)
            detail = ""
            if reply.kind == "ok" and event is NRIEvent.CREATE_CONTAINER:
                reply, asked = self._create_container_evictions(plugin.name, reply)
                if carried is not None:
                    carried.extend(asked)
                if asked:
                    detail = "evict " + ", ".join(e.container_id for e in asked)
            if reply.kind == "ok":
                answered.append(plugin.name)
                self._record(plugin.name, event, method, target, "answered", detail)
            elif reply.kind == "error":
                refused.append(Refusal(plugin.name, reply.code, reply.message))
                self._record(plugin.name, event, method, target, "refused", reply.message)
                break  # containerd returns the first plugin's error; later plugins not called
            else:
                # The reader may have dropped it first (connection closed): same drop.
                self._drop(conn, event.value, reply.message)
                self._record(plugin.name, event, method, target, "dropped", reply.message)
                if conn.drop is not None:
                    dropped.append(conn.drop)
        return EventOutcome(
            event=event,
            target=target,
            proceeded=True,
            answered=tuple(answered),
            refused=tuple(refused),
            dropped=tuple(dropped),
            unsubscribed=tuple(unsubscribed),
        )

    @staticmethod
    def _create_container_evictions(plugin: str, reply: _Reply) -> tuple[_Reply, list[Eviction]]:
        """The evictions a CreateContainer answer asks for; an unreadable answer breaks
        the protocol (the reply becomes a drop's)."""
        try:
            response = nri.CreateContainerResponse.FromString(reply.payload)
        except DecodeError as error:
            message = f"protocol error: unreadable CreateContainerResponse ({error})"
            return _Reply("closed", message=message), []
        asked = [
            Eviction(evict.container_id, evict.reason, plugin, "CreateContainer")
            for evict in response.evict
        ]
        return reply, asked

    def _send_event(
        self,
        conn: _Connection,
        event: NRIEvent,
        sandbox: SimSandbox | None,
        container: SimContainer | None,
    ) -> tuple[str, _Reply]:
        if event is NRIEvent.SHUTDOWN:
            return "Shutdown", self._call(conn, event, "Shutdown", nri.Empty())
        assert sandbox is not None
        pod = _pod_message(sandbox)
        if event is NRIEvent.CREATE_CONTAINER:
            assert container is not None
            # containerd reports a container being created as CONTAINER_UNKNOWN.
            request = nri.CreateContainerRequest(
                pod=pod, container=_container_message(container, nri.CONTAINER_UNKNOWN)
            )
            return "CreateContainer", self._call(conn, event, "CreateContainer", request)
        if self.pod_calls == "dedicated":
            dedicated: Message
            if event is NRIEvent.RUN_POD_SANDBOX:
                dedicated = nri.RunPodSandboxRequest(pod=pod)
            elif event is NRIEvent.STOP_POD_SANDBOX:
                dedicated = nri.StopPodSandboxRequest(pod=pod)
            else:
                dedicated = nri.RemovePodSandboxRequest(pod=pod)
            reply = self._call(conn, event, event.value, dedicated)
            if not (reply.kind == "error" and reply.code == _CODE_UNIMPLEMENTED):
                return event.value, reply
        state_change = nri.StateChangeEvent(event=_MASKED_EVENTS[event], pod=pod)
        return "StateChange", self._call(conn, event, "StateChange", state_change)

    def _call(self, conn: _Connection, event: NRIEvent, method: str, message: Message) -> _Reply:
        """One unary ttrpc call to the plugin's service, with the request timeout."""
        with self._cond:
            if conn.closed or conn.dropped:
                return _Reply("closed", message="connection closed")
            stream_id = conn.next_stream_id
            conn.next_stream_id += 2
            conn.pending[stream_id] = None
            stalled = event in conn.stalls
            conn.stalls.discard(event)
        request = ttrpc.Request(
            service=PLUGIN_SERVICE,
            method=method,
            payload=message.SerializeToString(),
            timeout_nano=int(self.request_timeout * 1e9),
        )
        frame = TtrpcFrame(stream_id, MessageType.REQUEST, 0, request.SerializeToString())
        try:
            with conn.write_lock:
                conn.sock.sendall(encode(PLUGIN_SERVICE_CONN, frame))
        except OSError as error:
            with self._cond:
                conn.pending.pop(stream_id, None)
            return _Reply("closed", message=f"connection closed ({error.strerror or error})")
        if stalled:
            with self._cond:
                conn.pending.pop(stream_id, None)
            return _Reply("timeout", message=f"{method} timed out (stalled by the test)")
        with self._cond:
            self._cond.wait_for(
                lambda: conn.pending.get(stream_id) is not None or conn.closed,
                self.request_timeout,
            )
            raw = conn.pending.pop(stream_id, None)
            closed = conn.closed
        if raw is None:
            if closed:
                return _Reply("closed", message="connection closed")
            return _Reply("timeout", message=f"{method} timed out after {self.request_timeout} s")
        try:
            response = ttrpc.Response.FromString(raw)
        except DecodeError as error:
            return _Reply("closed", message=f"protocol error: unreadable ttrpc response ({error})")
        if response.HasField("status") and response.status.code != 0:
            return _Reply("error", code=response.status.code, message=response.status.message)
        return _Reply("ok", payload=response.payload)

    # -- plugin lifecycle --------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None
        assert self._wake_r is not None
        serial = 0
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select()}
                if self._wake_r in ready:
                    return
                try:
                    sock, _ = self._listener.accept()
                except OSError:
                    return
                serial += 1
                conn = _Connection(serial, sock)
                with self._cond:
                    if not self._running:
                        sock.close()
                        return
                    self._connections.append(conn)
                    for target, role in ((self._read_loop, "read"), (self._start_plugin, "start")):
                        thread = threading.Thread(
                            target=target,
                            args=(conn,),
                            name=f"nri-sim-{role}-{serial}",
                            daemon=True,
                        )
                        conn.threads.append(thread)
                        thread.start()

    def _read_loop(self, conn: _Connection) -> None:
        decoder = TrunkDecoder()
        reason = "connection closed"
        try:
            while data := conn.sock.recv(65536):
                for conn_id, frame in decoder.feed(data):
                    self._on_frame(conn, conn_id, frame)
        except FrameError as error:
            reason = f"protocol error: {error}"
        except OSError as error:
            reason = f"connection error: {error.strerror or error}"
        with self._cond:
            conn.closed = True
            if conn in self._active:
                self._drop_locked(conn, "connection", reason)
            self._cond.notify_all()

    def _on_frame(self, conn: _Connection, conn_id: int, frame: TtrpcFrame) -> None:
        if conn_id == PLUGIN_SERVICE_CONN and frame.type == MessageType.RESPONSE:
            with self._cond:
                # A late answer to a call already given up on finds no pending entry.
                if frame.stream_id in conn.pending:
                    conn.pending[frame.stream_id] = frame.data
                    self._cond.notify_all()
        elif conn_id == RUNTIME_SERVICE_CONN and frame.type == MessageType.REQUEST:
            response, registration = self._serve_runtime(conn, frame.data)
            reply = TtrpcFrame(frame.stream_id, MessageType.RESPONSE, 0, response)
            with contextlib.suppress(OSError), conn.write_lock:
                conn.sock.sendall(encode(RUNTIME_SERVICE_CONN, reply))
            # Only once the answer is out: a refused registration ends in a drop, and the
            # plugin must read why before its connection closes.
            if registration is not None:
                self._registered(conn, registration)
        # Anything else (stream data, requests to the plugin's side) has no place in NRI.

    def _serve_runtime(
        self, conn: _Connection, data: bytes
    ) -> tuple[bytes, PluginInfo | str | None]:
        """The runtime's service: the ttrpc Response's bytes, and a registration if one
        came (the plugin, or why its registration is refused)."""
        try:
            request = ttrpc.Request.FromString(data)
        except DecodeError as error:
            return _status(_CODE_UNKNOWN, f"unreadable ttrpc request: {error}"), None
        if request.service != RUNTIME_SERVICE:
            return _status(_CODE_UNIMPLEMENTED, f"service {request.service}"), None
        if request.method == "UpdateContainers":
            return self._update_containers(conn, request.payload), None
        if request.method != "RegisterPlugin":
            return _status(_CODE_UNIMPLEMENTED, f"method {request.method}"), None
        try:
            registration = nri.RegisterPluginRequest.FromString(request.payload)
        except DecodeError as error:
            message = f"unreadable RegisterPluginRequest: {error}"
            return _status(_CODE_UNKNOWN, message), message
        error_message = _registration_error(registration)
        if error_message is not None:
            return _status(_CODE_UNKNOWN, error_message), error_message
        plugin = PluginInfo(registration.plugin_name, registration.plugin_idx, 0)
        return _ok(b""), plugin

    def _update_containers(self, conn: _Connection, payload: bytes) -> bytes:
        """Runtime.UpdateContainers: evict what the runtime has (unless it drops these
        evictions, as containerd does); answer the failed updates.

        Served on the reader thread and never waits for _dispatch_lock: a plugin may call
        it while an event to that same plugin waits for its answer on this thread.
        """
        try:
            request = nri.UpdateContainersRequest.FromString(payload)
        except DecodeError as error:
            return _status(_CODE_UNKNOWN, f"unreadable UpdateContainersRequest: {error}")
        # No resources are modelled: an update cannot be applied, and only one that may
        # fail (ignore_failure) is not reported.
        failed = [update for update in request.update if not update.ignore_failure]
        asked = [
            Eviction(evict.container_id, evict.reason, conn.label, "UpdateContainers")
            for evict in request.evict
        ]
        with self._cond:
            if self.honour_update_evictions:
                self._evict_locked(asked)
            else:
                self._ignored_evictions.extend(
                    replace(eviction, ignored=IGNORED_UPDATE_EVICTION) for eviction in asked
                )
            self._cond.notify_all()
        return _ok(nri.UpdateContainersResponse(failed=failed).SerializeToString())

    def _evict_locked(self, asked: list[Eviction]) -> tuple[Eviction, ...]:
        """Stop each container asked for that the runtime has (skip the others, as
        containerd does); return the evictions carried out."""
        evicted: list[Eviction] = []
        for eviction in asked:
            if self._containers.pop(eviction.container_id, None) is None:
                self._ignored_evictions.append(replace(eviction, ignored=IGNORED_UNKNOWN_CONTAINER))
            else:
                evicted.append(eviction)
        self._evictions.extend(evicted)
        return tuple(evicted)

    def _registered(self, conn: _Connection, registration: PluginInfo | str) -> None:
        with self._cond:
            if conn.plugin is not None or conn.registration_error is not None:
                return  # only the first registration on a connection counts
            if isinstance(registration, str):
                conn.registration_error = registration
            else:
                conn.plugin = replace(registration, connection=conn.serial)
            self._cond.notify_all()

    def _start_plugin(self, conn: _Connection) -> None:
        """Registration, Configure, Synchronize: the plugin joins, or is dropped."""
        with self._cond:
            self._cond.wait_for(
                lambda: (
                    conn.plugin is not None or conn.registration_error is not None or conn.closed
                ),
                self.registration_timeout,
            )
            if conn.registration_error is not None:
                self._drop_locked(conn, "registration", conn.registration_error)
                return
            if conn.plugin is None:
                reason = (
                    "connection closed before registration"
                    if conn.closed
                    else f"registration timed out after {self.registration_timeout} s"
                )
                self._drop_locked(conn, "registration", reason)
                return
            plugin = conn.plugin
            if self._holding:
                self._held.append(conn)
                self._cond.notify_all()
                self._cond.wait_for(lambda: not self._holding or conn.closed or self._stopping)
                self._held.remove(conn)
                if self._stopping:
                    return
                if conn.closed:
                    self._drop_locked(conn, "registration", "connection closed while held")
                    return
        events = self._configure(conn, plugin)
        if events is None:
            return
        plugin = replace(plugin, events=events)
        with self._dispatch_lock:
            if not self._synchronize(conn, plugin):
                return
            with self._cond:
                if conn.closed or conn.dropped:
                    self._drop_locked(conn, "Synchronize", "connection closed")
                    return
                conn.plugin = plugin
                self._active.append(conn)
                self._active.sort(key=lambda c: (c.plugin.index if c.plugin else "", c.serial))
                self._cond.notify_all()

    def _configure(self, conn: _Connection, plugin: PluginInfo) -> int | None:
        request = nri.ConfigureRequest(
            config=self.plugin_config,
            runtime_name=self.runtime_name,
            runtime_version=self.runtime_version,
            registration_timeout=int(self.registration_timeout * 1000),
            request_timeout=int(self.request_timeout * 1000),
        )
        reply = self._call(conn, NRIEvent.CONFIGURE, "Configure", request)
        failure = self._failure(reply)
        if failure is None:
            try:
                events = nri.ConfigureResponse.FromString(reply.payload).events
            except DecodeError as error:
                failure = f"unreadable ConfigureResponse: {error}"
            else:
                if events & ~VALID_EVENTS:
                    failure = f"invalid plugin events: 0x{events & ~VALID_EVENTS:x}"
                else:
                    detail = f"events 0x{events or VALID_EVENTS:x}"
                    self._record(
                        plugin.name, NRIEvent.CONFIGURE, "Configure", "", "answered", detail
                    )
                    return events or VALID_EVENTS  # no subscription means every event
        result: Literal["refused", "dropped"] = "refused" if reply.kind == "error" else "dropped"
        self._record(plugin.name, NRIEvent.CONFIGURE, "Configure", "", result, failure)
        self._drop(conn, "Configure", failure)
        return None

    def _synchronize(self, conn: _Connection, plugin: PluginInfo) -> bool:
        with self._cond:
            sandboxes = list(self._sandboxes.values())
            containers = list(self._containers.values())
        request = nri.SynchronizeRequest(
            pods=[_pod_message(s) for s in sandboxes],
            containers=[_container_message(c, nri.CONTAINER_CREATED) for c in containers],
        )
        target = f"{len(sandboxes)} pods, {len(containers)} containers"
        reply = self._call(conn, NRIEvent.SYNCHRONIZE, "Synchronize", request)
        failure = self._failure(reply)
        if failure is None:
            self._record(plugin.name, NRIEvent.SYNCHRONIZE, "Synchronize", target, "answered")
            return True
        result: Literal["refused", "dropped"] = "refused" if reply.kind == "error" else "dropped"
        self._record(plugin.name, NRIEvent.SYNCHRONIZE, "Synchronize", target, result, failure)
        self._drop(conn, "Synchronize", failure)
        return False

    @staticmethod
    def _failure(reply: _Reply) -> str | None:
        if reply.kind == "ok":
            return None
        if reply.kind == "error":
            return f"error {reply.code}: {reply.message}"
        return reply.message

    # -- bookkeeping (helpers named _..._locked expect _cond held) ----------------------

    def _drop(self, conn: _Connection, during: str, reason: str) -> Drop | None:
        with self._cond:
            return self._drop_locked(conn, during, reason)

    def _drop_locked(self, conn: _Connection, during: str, reason: str) -> Drop | None:
        """Give up on the plugin once: record why, and close its connection."""
        if conn.dropped:
            return None
        conn.dropped = True
        if conn in self._active:
            self._active.remove(conn)
        drop = Drop(conn.label, during, reason)
        conn.drop = drop
        self._drops.append(drop)
        self._shutdown_socket(conn)
        self._cond.notify_all()
        return drop

    @staticmethod
    def _shutdown_socket(conn: _Connection) -> None:
        # shutdown wakes the reader's recv (close alone does not); the reader's exit
        # and close() then release the descriptor.
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_RDWR)

    def _record(
        self,
        plugin: str,
        event: NRIEvent,
        method: str,
        target: str,
        result: Literal["answered", "refused", "dropped"],
        detail: str = "",
    ) -> None:
        with self._cond:
            self._events.append(EventRecord(plugin, event, method, target, result, detail))

    def _active_matching(self, name: str) -> list[_Connection]:
        return [
            c for c in self._active if c.plugin is not None and _names_match(c.plugin.name, name)
        ]

    def _resolve(self, name: str) -> _Connection:
        matches = self._active_matching(name)
        if len(matches) != 1:
            registered = [c.label for c in self._active]
            if not matches:
                raise ValueError(f"no registered NRI plugin {name!r}; registered: {registered}")
            raise ValueError(f"NRI plugin name {name!r} is ambiguous among {registered}")
        return matches[0]

    def _known_sandbox(self, sandbox_id: str) -> SimSandbox:
        with self._cond:
            self._check_running()
            sandbox = self._sandboxes.get(sandbox_id)
            if sandbox is None:
                raise ValueError(f"no sandbox {sandbox_id!r}; known: {sorted(self._sandboxes)}")
            return sandbox

    def _check_running(self) -> None:
        if not self._running:
            raise RuntimeError("NRIRuntimeSim is not running (use it as a context manager)")


__all__ = [
    "DEFAULT_REGISTRATION_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "IGNORED_REFUSED_CREATE",
    "IGNORED_UNKNOWN_CONTAINER",
    "IGNORED_UPDATE_EVICTION",
    "PLUGIN_SERVICE",
    "RUNTIME_SERVICE",
    "VALID_EVENTS",
    "Drop",
    "EventOutcome",
    "EventRecord",
    "Eviction",
    "NRIEvent",
    "NRIRuntimeSim",
    "PluginInfo",
    "Refusal",
    "SimContainer",
    "SimSandbox",
    "event_bit",
]
