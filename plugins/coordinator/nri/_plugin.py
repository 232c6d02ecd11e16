"""The coordinator as an NRI plugin: one connection to the runtime, kept up.

The plugin dials the runtime's socket and multiplexes it (``_mux``): the runtime calls
the plugin's service on logical connection 1, the plugin calls the runtime's on
connection 2, each a ttrpc byte stream (``_ttrpc``). A connection goes through:

1. RegisterPlugin (ours, on connection 2) with the name and two-digit index. The runtime
   must answer within the registration timeout, or the connection is dropped.
2. Configure (the runtime's): answered with the event mask; Synchronize, possibly in
   parts (``more``), delivered to the handler once whole. The containers the handler
   returns (ours, started while the plugin was away) are evicted: once Synchronize is
   answered, ``Runtime.UpdateContainers`` (ours, on connection 2) asks the runtime to
   stop them, so that the kubelet recreates them through CreateContainer.
3. Events until the connection ends: RunPodSandbox/StopPodSandbox/RemovePodSandbox (as
   StateChange, or as the dedicated calls of newer runtimes), CreateContainer (the
   handler raises to refuse; the containers it returns are evicted in the answer, the
   route containerd honours), Update/StopContainer (answered empty), Shutdown.

One thread per plugin reads the socket and never runs a handler: each call goes to a
worker thread and is answered when it returns, so a slow handler delays only its own
call (ttrpc streams are independent) and the handler must be thread-safe. A handler's
exception is answered as a status (``status_for``) naming the sandbox or container and
logged. Bytes that are not the protocol's (a frame, a message or its envelope) are
logged with the connection's number and the connection is dropped; nothing of that
call reaches the handler.

When the connection ends (the runtime closed it, Shutdown, a bad frame, a refused or
late registration), calls in flight finish unanswered, the registered and synchronized
states are cleared, and after a backoff (doubling, reset by a registration) the plugin
dials again and registers again; the runtime then configures and synchronizes it anew.
``stop()`` ends the connection and joins the reader and every worker.
"""

from __future__ import annotations

import contextlib
import logging
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Final, Protocol, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from plugins.api.nri.v1alpha1 import pb
from plugins.api.ttrpc import pb as ttrpc_pb
from plugins.sdk import Code, NetworkPluginError

from ._convert import (
    Container,
    MessageError,
    PodSandbox,
    container_from_pb,
    required_sandbox,
    sandbox_from_pb,
)
from ._events import DEFAULT_EVENTS, Event, check_subscription, event_mask
from ._mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, FrameError, MuxDecoder, encode_frames
from ._ttrpc import (
    OK,
    CallError,
    ClientStreams,
    MessageDecoder,
    MessageType,
    MethodHandler,
    RemoteError,
    ServerStreams,
    dispatch,
    encode_request,
    encode_response,
    parse_request,
    parse_response,
)
from ._ttrpc import Message as TtrpcMessage

log = logging.getLogger(__name__)

DEFAULT_SOCKET_PATH: Final = "/var/run/nri/nri.sock"
PLUGIN_SERVICE: Final = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE: Final = "nri.pkg.api.v1alpha1.Runtime"

EVICTION_REASON: Final = (
    "started while the network plugin was away; its pod networking was not checked"
)

_PLUGIN_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
_PLUGIN_INDEX = re.compile(r"[0-9]{2}")
_RECV_SIZE = 1 << 16
_INTERNAL = "internal error; see the coordinator log"
# The deadline our UpdateContainers call carries: containerd's default request timeout.
# Nothing waits for it on our side; the answer is only logged.
_UPDATE_TIMEOUT_S = 2.0

_Msg = TypeVar("_Msg", bound=Message)


class RuntimeHandler(Protocol):
    """What the coordinator does on the runtime's calls. Called on worker threads,
    concurrently; raising refuses the call (the runtime reads a status).

    ``synchronize`` and ``create_container`` return the ids of the containers to evict
    (None or empty: none): after Synchronize they go to ``Runtime.UpdateContainers``, for
    CreateContainer in its answer. A refused CreateContainer (the handler raised) evicts
    nothing: an error answer carries no payload.
    """

    def synchronize(
        self, sandboxes: Sequence[PodSandbox], containers: Sequence[Container]
    ) -> Sequence[str] | None: ...

    def run_pod_sandbox(self, sandbox: PodSandbox) -> None: ...

    def stop_pod_sandbox(self, sandbox: PodSandbox) -> None: ...

    def remove_pod_sandbox(self, sandbox: PodSandbox) -> None: ...

    def create_container(
        self, sandbox: PodSandbox, container: Container
    ) -> Sequence[str] | None: ...


class RegistrationError(Exception):
    """The runtime refused the registration or did not answer it in time."""


def status_for(exc: BaseException, what: str) -> CallError:
    """The single mapping from a handler's exception to the status the runtime reads.

    An SDK error says its code and message (a refusal such as the readiness gate's
    FAILED_PRECONDITION is written for the caller); anything else is INTERNAL with a
    stable sentence, the details going to our log. ``what`` names the call and its ids.
    """
    if isinstance(exc, MessageError):
        return CallError(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    if isinstance(exc, NetworkPluginError) and exc.code is not Code.INTERNAL:
        return CallError(grpc.StatusCode[exc.code.name], f"{what}: {exc.message}")
    return CallError(grpc.StatusCode.INTERNAL, f"{what}: {_INTERNAL}")


def _plugin_index(index: int | str) -> str:
    text = f"{index:02d}" if isinstance(index, int) and not isinstance(index, bool) else index
    if not isinstance(text, str) or _PLUGIN_INDEX.fullmatch(text) is None:
        raise ValueError(f"NRI plugin index {index!r} is not two digits (00..99)")
    return text


def _decode(kind: type[_Msg], payload: bytes, method: str) -> _Msg:
    message = kind()
    try:
        message.ParseFromString(payload)
    except DecodeError as exc:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{method}: payload is not a {kind.DESCRIPTOR.full_name}: {exc}",
        ) from exc
    return message


class NRIPlugin:
    """An NRI plugin connected to ``socket_path`` (default DEFAULT_SOCKET_PATH).

    ``name`` and ``index`` (0..99, or two digits) identify it to the runtime, which
    orders plugins by index; ``events`` is its subscription (DEFAULT_EVENTS: the sandbox
    events and CreateContainer). ``start()`` returns at once; the connection and
    registration happen on the plugin's thread (``wait_registered``).
    """

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET_PATH,
        name: str = "networkplugin-coordinator",
        index: int | str = 10,
        handler: RuntimeHandler | None = None,
        *,
        events: Iterable[Event] = DEFAULT_EVENTS,
        registration_timeout: float = 5.0,
        reconnect_initial: float = 0.1,
        reconnect_max: float = 5.0,
        workers: int = 8,
    ) -> None:
        if handler is None:
            raise ValueError("an NRI plugin needs a RuntimeHandler")
        if _PLUGIN_NAME.fullmatch(name) is None:
            raise ValueError(f"NRI plugin name {name!r} is empty or not of [A-Za-z0-9_.+-]")
        if not 0 < reconnect_initial <= reconnect_max:
            raise ValueError("reconnect backoff needs 0 < reconnect_initial <= reconnect_max")
        if registration_timeout <= 0 or workers < 1:
            raise ValueError("registration_timeout must be positive and workers at least 1")
        self.socket_path = socket_path
        self.name = name
        self.index = _plugin_index(index)
        self.events = check_subscription(events)
        self.event_mask = event_mask(self.events)
        self._handler = handler
        self._registration_timeout = registration_timeout
        self._reconnect_initial = reconnect_initial
        self._reconnect_max = reconnect_max
        self._workers = workers
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._session: _Session | None = None
        self._connections = 0
        self._registered = False
        self._synchronized = False
        self._evictions_sent = 0
        self._unreachable = False  # only the loop thread reads and writes it

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            if self._thread is not None:
                raise RuntimeError(f"NRI plugin {self.name} was already started")
            self._thread = threading.Thread(target=self._run, name=f"nri-{self.name}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """End the connection, wait for the reader and the calls in flight. Idempotent."""
        self._stopping.set()
        with self._cond:
            thread, session = self._thread, self._session
        if session is not None:
            session.abort()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def __enter__(self) -> NRIPlugin:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- state ---------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        with self._cond:
            return self._session is not None

    @property
    def registered(self) -> bool:
        with self._cond:
            return self._registered

    @property
    def synchronized(self) -> bool:
        with self._cond:
            return self._synchronized

    @property
    def connections(self) -> int:
        """Connections made so far (the first and every reconnection)."""
        with self._cond:
            return self._connections

    @property
    def evictions_sent(self) -> int:
        """Evictions written to the runtime so far (over every connection); whether the
        runtime stopped the containers is its own business (failures are logged)."""
        with self._cond:
            return self._evictions_sent

    def wait_evictions_sent(self, count: int, timeout: float) -> bool:
        """True once ``count`` evictions have been sent."""
        with self._cond:
            return self._cond.wait_for(lambda: self._evictions_sent >= count, timeout)

    def wait_registered(self, timeout: float) -> bool:
        """True once the runtime has accepted the current connection's registration."""
        with self._cond:
            return self._cond.wait_for(lambda: self._registered, timeout)

    def wait_synchronized(self, timeout: float) -> bool:
        """True once the current connection's Synchronize reached the handler and returned."""
        with self._cond:
            return self._cond.wait_for(lambda: self._synchronized, timeout)

    def wait_connections(self, count: int, timeout: float) -> bool:
        """True once ``count`` connections have been made."""
        with self._cond:
            return self._cond.wait_for(lambda: self._connections >= count, timeout)

    # -- the connection loop -----------------------------------------------------------------

    def _run(self) -> None:
        delay = self._reconnect_initial
        while not self._stopping.is_set():
            sock = self._dial()
            if sock is not None:
                with sock:
                    if self._serve(sock):
                        delay = self._reconnect_initial
            if self._stopping.wait(delay):
                break
            delay = min(delay * 2, self._reconnect_max)

    def _dial(self) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self._registration_timeout)
            sock.connect(self.socket_path)
            sock.settimeout(None)
        except OSError as exc:
            sock.close()
            # Once per outage at warning level; every retry after that at debug.
            level = logging.DEBUG if self._unreachable else logging.WARNING
            self._unreachable = True
            log.log(level, "nri %s: cannot connect to %s: %s", self.name, self.socket_path, exc)
            return None
        self._unreachable = False
        return sock

    def _serve(self, sock: socket.socket) -> bool:
        """Run one connection to its end; True if it got registered."""
        with self._cond:
            if self._stopping.is_set():
                return False
            self._connections += 1
            number = self._connections
            session = _Session(self, sock, number)
            self._session = session
            self._cond.notify_all()
        log.info("nri %s: connection %d to %s", self.name, number, self.socket_path)
        try:
            session.serve()
            if not self._stopping.is_set():
                log.info("nri %s: connection %d closed by the runtime", self.name, number)
        except (FrameError, RemoteError, RegistrationError, OSError) as exc:
            if not self._stopping.is_set():
                log.warning("nri %s: dropping connection %d: %s", self.name, number, exc)
        finally:
            session.close()
            with self._cond:
                self._session = None
                self._registered = False
                self._synchronized = False
                self._cond.notify_all()
        return session.was_registered

    # -- called by a session -----------------------------------------------------------------

    def _set_state(
        self, session: _Session, *, registered: bool = False, synced: bool = False
    ) -> None:
        with self._cond:
            if self._session is not session:
                return
            self._registered = self._registered or registered
            self._synchronized = self._synchronized or synced
            self._cond.notify_all()

    def _count_evictions(self, count: int) -> None:
        with self._cond:
            self._evictions_sent += count
            self._cond.notify_all()


class _Session:
    """One connection: the reader's decoders and stream state, the calls' workers."""

    def __init__(self, plugin: NRIPlugin, sock: socket.socket, number: int) -> None:
        self._plugin = plugin
        self._sock = sock
        self.number = number
        self.was_registered = False
        self._write_lock = threading.Lock()
        self._mux = MuxDecoder()
        self._served = MessageDecoder()
        self._replies = MessageDecoder()
        self._server_streams = ServerStreams()
        self._client_streams = ClientStreams()
        # Our calls awaiting an answer: stream id -> (method, what it asked, for the log).
        # Written by whichever thread calls, read by the reader.
        self._pending_lock = threading.Lock()
        self._pending: dict[int, tuple[str, str]] = {}
        self._calls = _PluginCalls(plugin, self)
        self._executor = ThreadPoolExecutor(
            max_workers=plugin._workers, thread_name_prefix=f"nri-{plugin.name}-{number}"
        )

    def serve(self) -> None:
        """Register, then read until the runtime closes the connection.

        Raises FrameError, RemoteError, RegistrationError or OSError when the connection
        has to be dropped.
        """
        self._call(
            "RegisterPlugin",
            pb.RegisterPluginRequest(plugin_name=self._plugin.name, plugin_idx=self._plugin.index),
            timeout=self._plugin._registration_timeout,
            what="registration",
        )
        deadline = time.monotonic() + self._plugin._registration_timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self._sock, selectors.EVENT_READ)
            while True:
                if not self.was_registered:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not selector.select(remaining):
                        raise RegistrationError(
                            f"the runtime did not answer RegisterPlugin within "
                            f"{self._plugin._registration_timeout:g} s"
                        )
                data = self._sock.recv(_RECV_SIZE)
                if not data:
                    return
                for conn_id, chunk in self._mux.feed(data):
                    self._on_chunk(conn_id, chunk)

    def abort(self) -> None:
        """Wake the reader and fail any write in progress (from any thread)."""
        # Already shut down or reset by the runtime: the same end.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """After ``serve``: end the connection and wait for the calls in flight."""
        self.abort()
        self._executor.shutdown(wait=True, cancel_futures=True)

    # -- reader side ---------------------------------------------------------------------------

    def _on_chunk(self, conn_id: int, chunk: bytes) -> None:
        if conn_id == PLUGIN_SERVICE_CONN:
            for message in self._served.feed(chunk):
                self._on_request(message)
        elif conn_id == RUNTIME_SERVICE_CONN:
            for message in self._replies.feed(chunk):
                self._on_reply(message)
        else:
            # As upstream: frames of a connection nobody opened are dropped.
            log.warning(
                "nri %s: connection %d: ignoring %d bytes for unopened mux connection %d",
                self._plugin.name,
                self.number,
                len(chunk),
                conn_id,
            )

    def _on_request(self, message: TtrpcMessage) -> None:
        if message.type != MessageType.REQUEST:
            raise FrameError(
                f"ttrpc message of type {message.type} on stream {message.stream_id} of the "
                f"plugin service; only requests (type 1) are served"
            )
        request = parse_request(message)
        refusal = self._server_streams.open(message.stream_id)
        if refusal is not None:
            self._send(PLUGIN_SERVICE_CONN, encode_response(message.stream_id, error=refusal))
            return
        self._executor.submit(self._answer, message.stream_id, request)

    def _on_reply(self, message: TtrpcMessage) -> None:
        stream_id = message.stream_id
        if message.type != MessageType.RESPONSE:
            raise FrameError(
                f"ttrpc message of type {message.type} on stream {stream_id} of the runtime "
                f"service; only responses (type 2) answer the plugin's calls"
            )
        response = parse_response(message)
        with self._pending_lock:
            pending = self._pending.pop(stream_id, None)
        if pending is None:
            log.warning(
                "nri %s: connection %d: ignoring a response on stream %d, which no call opened",
                self._plugin.name,
                self.number,
                stream_id,
            )
            return
        method, what = pending
        if method == "UpdateContainers":
            self._updated(response, what)
            return
        if response.HasField("status") and response.status.code != OK:
            raise RemoteError(method, response.status.code, response.status.message)
        if method == "RegisterPlugin":
            self.was_registered = True
            log.info(
                "nri %s: registered as %s-%s on connection %d",
                self._plugin.name,
                self._plugin.index,
                self._plugin.name,
                self.number,
            )
            self._plugin._set_state(self, registered=True)

    def _updated(self, response: ttrpc_pb.Response, what: str) -> None:
        """The runtime's answer to UpdateContainers: a failure is logged, nothing more (the
        containers keep running; the next Synchronize asks again)."""
        name, number = self._plugin.name, self.number
        if response.HasField("status") and response.status.code != OK:
            log.warning(
                "nri %s: connection %d: the runtime refused %s: status %d: %s",
                name,
                number,
                what,
                response.status.code,
                response.status.message,
            )
            return
        try:
            reply = pb.UpdateContainersResponse.FromString(response.payload)
        except DecodeError as exc:
            log.warning(
                "nri %s: connection %d: unreadable answer to %s: %s", name, number, what, exc
            )
            return
        if reply.failed:
            failed = ", ".join(update.container_id for update in reply.failed)
            log.warning(
                "nri %s: connection %d: %s: the runtime failed to update %s",
                name,
                number,
                what,
                failed,
            )

    def _call(self, method: str, request: Message, timeout: float, what: str) -> None:
        """Call the runtime's service; the answer reaches ``_on_reply`` on the reader."""
        payload = request.SerializeToString()
        # One lock hold from the stream id to the write: ids reach the runtime increasing.
        with self._write_lock:
            stream_id = self._client_streams.next()
            with self._pending_lock:
                self._pending[stream_id] = (method, what)
            frame = encode_request(stream_id, RUNTIME_SERVICE, method, payload, int(timeout * 1e9))
            try:
                self._sock.sendall(encode_frames(RUNTIME_SERVICE_CONN, frame))
            except OSError:
                with self._pending_lock:
                    del self._pending[stream_id]
                raise

    def _evict(self, container_ids: Sequence[str]) -> None:
        """Ask the runtime to stop ``container_ids`` (after Synchronize was answered:
        containerd holds its lock over a plugin's synchronization, so a call made before
        the answer would wait behind it)."""
        what = f"the eviction of {', '.join(container_ids)}"
        request = pb.UpdateContainersRequest(
            evict=[
                pb.ContainerEviction(container_id=container_id, reason=EVICTION_REASON)
                for container_id in container_ids
            ]
        )
        try:
            self._call("UpdateContainers", request, _UPDATE_TIMEOUT_S, what)
        except OSError as exc:
            log.warning(
                "nri %s: connection %d: could not ask for %s: %s",
                self._plugin.name,
                self.number,
                what,
                exc,
            )
            return
        log.warning(
            "nri %s: connection %d: asked the runtime for %s (%s)",
            self._plugin.name,
            self.number,
            what,
            EVICTION_REASON,
        )
        self._plugin._count_evictions(len(container_ids))

    # -- worker side ---------------------------------------------------------------------------

    def _answer(self, stream_id: int, request: ttrpc_pb.Request) -> None:
        method = request.method
        payload: bytes | None = None
        try:
            payload = dispatch(self._calls.methods, request)
            reply = encode_response(stream_id, payload)
        except CallError as error:
            reply = encode_response(stream_id, error=error)
        try:
            self._send(PLUGIN_SERVICE_CONN, reply)
        except OSError as exc:
            log.info(
                "nri %s: connection %d: %s could not be answered: %s",
                self._plugin.name,
                self.number,
                method,
                exc,
            )
            return
        if method == "Synchronize":
            evict = self._calls.take_evictions()
            if evict:
                self._evict(evict)
        elif method == "CreateContainer" and payload is not None:
            self._evicted_in_answer(payload)

    def _evicted_in_answer(self, payload: bytes) -> None:
        """Log and count the evictions a CreateContainer answer carried, once it is written
        (read back from the answer itself: what was counted is what the runtime got)."""
        evict = pb.CreateContainerResponse.FromString(payload).evict
        if not evict:
            return
        log.warning(
            "nri %s: connection %d: the answer to CreateContainer asked the runtime for the "
            "eviction of %s (%s)",
            self._plugin.name,
            self.number,
            ", ".join(eviction.container_id for eviction in evict),
            EVICTION_REASON,
        )
        self._plugin._count_evictions(len(evict))

    def _send(self, conn_id: int, message: bytes) -> None:
        # One whole ttrpc message per lock hold: frames of two messages must not interleave.
        with self._write_lock:
            self._sock.sendall(encode_frames(conn_id, message))


_SANDBOX_EVENTS: Final = {
    Event.RUN_POD_SANDBOX: "run_pod_sandbox",
    Event.STOP_POD_SANDBOX: "stop_pod_sandbox",
    Event.REMOVE_POD_SANDBOX: "remove_pod_sandbox",
}


class _PluginCalls:
    """The plugin service's methods for one connection (Synchronize's parts are per
    connection). Each runs on a worker thread and returns the serialized reply."""

    def __init__(self, plugin: NRIPlugin, session: _Session) -> None:
        self._plugin = plugin
        self._session = session
        self._handler = plugin._handler
        self._sync_lock = threading.Lock()
        self._sync_pods: list[pb.PodSandbox] = []
        self._sync_containers: list[pb.Container] = []
        self._evictions_due: list[str] = []
        by_name: dict[str, MethodHandler] = {
            "Configure": self._configure,
            "Synchronize": self._synchronize,
            "Shutdown": self._shutdown,
            "RunPodSandbox": self._pod_call(pb.RunPodSandboxRequest, Event.RUN_POD_SANDBOX),
            "StopPodSandbox": self._pod_call(pb.StopPodSandboxRequest, Event.STOP_POD_SANDBOX),
            "RemovePodSandbox": self._pod_call(
                pb.RemovePodSandboxRequest, Event.REMOVE_POD_SANDBOX
            ),
            "CreateContainer": self._create_container,
            "UpdateContainer": self._empty_reply(
                pb.UpdateContainerRequest, pb.UpdateContainerResponse
            ),
            "StopContainer": self._empty_reply(pb.StopContainerRequest, pb.StopContainerResponse),
            "StateChange": self._state_change,
        }
        self.methods: Mapping[tuple[str, str], MethodHandler] = {
            (PLUGIN_SERVICE, name): method for name, method in by_name.items()
        }

    def _invoke(self, what: str, call: Callable[[], None]) -> None:
        """Run a handler; its exception becomes the call's status, and is logged."""
        try:
            call()
        except Exception as exc:
            error = status_for(exc, what)
            if error.code is grpc.StatusCode.INTERNAL:
                log.error("nri %s: %s failed", self._plugin.name, what, exc_info=exc)
            else:
                log.info("nri %s: %s: %s", self._plugin.name, error.code.name, error.message)
            raise error from exc

    def _configure(self, payload: bytes) -> bytes:
        request = _decode(pb.ConfigureRequest, payload, "Configure")
        log.info(
            "nri %s: configured by %s %s (connection %d), subscribing to %s",
            self._plugin.name,
            request.runtime_name or "an unnamed runtime",
            request.runtime_version,
            self._session.number,
            ", ".join(sorted(event.name for event in self._plugin.events)),
        )
        return pb.ConfigureResponse(events=self._plugin.event_mask).SerializeToString()

    def _synchronize(self, payload: bytes) -> bytes:
        request = _decode(pb.SynchronizeRequest, payload, "Synchronize")
        with self._sync_lock:
            self._sync_pods.extend(request.pods)
            self._sync_containers.extend(request.containers)
            if request.more:
                return pb.SynchronizeResponse(more=True).SerializeToString()
            pods, self._sync_pods = self._sync_pods, []
            containers, self._sync_containers = self._sync_containers, []
        what = f"Synchronize ({len(pods)} pod sandboxes, {len(containers)} containers)"
        returned: list[object] = []

        def deliver() -> None:
            sandboxes = [sandbox_from_pb(pod, "Synchronize") for pod in pods]
            known = [container_from_pb(ctr, "Synchronize") for ctr in containers]
            returned.append(self._handler.synchronize(sandboxes, known))

        self._invoke(what, deliver)
        evict = self._container_ids(returned[0], "synchronize")
        with self._sync_lock:
            self._evictions_due = evict
        self._plugin._set_state(self._session, synced=True)
        return pb.SynchronizeResponse(more=False).SerializeToString()

    def take_evictions(self) -> list[str]:
        """The containers the last Synchronize asked to evict, once (then none)."""
        with self._sync_lock:
            evict, self._evictions_due = self._evictions_due, []
        return evict

    def _container_ids(self, returned: object, handler_method: str) -> list[str]:
        """The handler's answer (``synchronize``'s or ``create_container``'s) as the ids of
        the containers to evict, each once, in order.

        A malformed answer is a bug of ours, not the runtime's: it is logged and skipped,
        and the call stands (refusing it would only fail the runtime's call for nothing).
        """
        if returned is None:
            return []
        if isinstance(returned, (str, bytes)) or not isinstance(returned, Iterable):
            log.error(
                "nri %s: %s returned %r, not a list of container ids; evicting none",
                self._plugin.name,
                handler_method,
                returned,
            )
            return []
        ids: list[str] = []
        for item in returned:
            if not isinstance(item, str) or not item:
                log.error(
                    "nri %s: %s returned %r as a container id; not evicted",
                    self._plugin.name,
                    handler_method,
                    item,
                )
            elif item not in ids:
                ids.append(item)
        return ids

    def _shutdown(self, payload: bytes) -> bytes:
        _decode(pb.Empty, payload, "Shutdown")
        log.info(
            "nri %s: the runtime is shutting down (connection %d)",
            self._plugin.name,
            self._session.number,
        )
        return pb.Empty().SerializeToString()

    def _sandbox_event(self, event: Event, has_pod: bool, pod: pb.PodSandbox) -> None:
        what = f"{_event_call(event)} {pod.id or '(no id)'}"

        def deliver() -> None:
            sandbox = required_sandbox(has_pod, pod, _event_call(event))
            getattr(self._handler, _SANDBOX_EVENTS[event])(sandbox)

        self._invoke(what, deliver)

    def _pod_call(
        self,
        kind: type[pb.RunPodSandboxRequest]
        | type[pb.StopPodSandboxRequest]
        | type[pb.RemovePodSandboxRequest],
        event: Event,
    ) -> MethodHandler:
        reply = {
            Event.RUN_POD_SANDBOX: pb.RunPodSandboxResponse,
            Event.STOP_POD_SANDBOX: pb.StopPodSandboxResponse,
            Event.REMOVE_POD_SANDBOX: pb.RemovePodSandboxResponse,
        }[event]

        def call(payload: bytes) -> bytes:
            request = _decode(kind, payload, _event_call(event))
            self._sandbox_event(event, request.HasField("pod"), request.pod)
            return reply().SerializeToString()

        return call

    def _state_change(self, payload: bytes) -> bytes:
        request = _decode(pb.StateChangeEvent, payload, "StateChange")
        try:
            event = Event(request.event)
        except ValueError:
            event = None
        if event in _SANDBOX_EVENTS:
            assert event is not None
            self._sandbox_event(event, request.HasField("pod"), request.pod)
        else:
            # Not subscribed, so not expected; acknowledged rather than failed, as upstream.
            log.debug("nri %s: ignoring StateChange event %d", self._plugin.name, request.event)
        return pb.Empty().SerializeToString()

    def _create_container(self, payload: bytes) -> bytes:
        request = _decode(pb.CreateContainerRequest, payload, "CreateContainer")
        what = (
            f"CreateContainer {request.container.id or '(no id)'} "
            f"in sandbox {request.pod.id or '(no id)'}"
        )
        returned: list[object] = []

        def deliver() -> None:
            sandbox = required_sandbox(request.HasField("pod"), request.pod, "CreateContainer")
            if not request.HasField("container"):
                raise MessageError("CreateContainer: the call carries no container")
            container = container_from_pb(request.container, "CreateContainer")
            if container.sandbox_id != sandbox.id:
                raise MessageError(
                    f"CreateContainer: container {container.id} names sandbox "
                    f"{container.sandbox_id}, the call's pod is {sandbox.id}"
                )
            returned.append(self._handler.create_container(sandbox, container))

        self._invoke(what, deliver)
        evict = self._container_ids(returned[0], "create_container")
        return pb.CreateContainerResponse(
            evict=[
                pb.ContainerEviction(container_id=container_id, reason=EVICTION_REASON)
                for container_id in evict
            ]
        ).SerializeToString()

    @staticmethod
    def _empty_reply(
        kind: type[pb.UpdateContainerRequest] | type[pb.StopContainerRequest],
        reply: type[pb.UpdateContainerResponse] | type[pb.StopContainerResponse],
    ) -> MethodHandler:
        def call(payload: bytes) -> bytes:
            _decode(kind, payload, kind.DESCRIPTOR.name.removesuffix("Request"))
            return reply().SerializeToString()

        return call


def _event_call(event: Event) -> str:
    """The call's name for a sandbox event (RUN_POD_SANDBOX -> RunPodSandbox)."""
    return "".join(word.capitalize() for word in event.name.split("_"))
