"""The VM lab's host-side relay: many clients onto the guest agent's one stream.

QEMU's end of the agent's virtio-serial port is a Unix socket that takes exactly one
connection, but the vm tier has many clients of the guest's kernel at once: the lab's
own ``kernel``, and each service process of a node (``kernel+unix://`` URLs open a
``FakeKernelClient`` each). ``KernelRelay`` owns the one upstream connection and
listens on Unix sockets of its own; every client gets a thread that reads one request
line, forwards it under a lock, reads the one answer line and sends it back (the
protocol is strictly one JSON request line, one JSON answer line, so serializing whole
exchanges keeps the stream in step, as rtnl serializes the kernel's own calls).

A listener may be bound to a lab *session* (``session="s1"``): every request of its
clients is forwarded with ``"session": "s1"`` set, so the agent runs it in that
session's namespaces (``labs.kernel_agent``); a client cannot reach another session.

``host_namespace`` is a constant of a kernel (the seam declares it
``@reads(constant=True)``; ``LinuxKernel`` answers it from memory, without a syscall),
so a listener forwards it once and answers it again itself while the upstream is
healthy: under TCG every exchange with the guest costs milliseconds, and
the lab should not charge a service for what a node's kernel answers for free (the sriov
executors ask it in each capture, apply and undo). A session's listener lives as long
as its session, whose node namespace it names; an error is never kept.

A client that hangs up mid-call does not wedge the relay: the exchange it started is
completed (the answer is read from upstream and dropped), so the stream stays in step;
a partial request line at hang-up is dropped unsent. An upstream failure (the guest
gone, no answer within ``timeout``) closes every listener and client: their next read
sees the end of the stream, never a stray answer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from fakekernel import LAB_CALLS

__all__ = ["KernelRelay", "RelayClosed"]

log = logging.getLogger(__name__)
CLOSED = "the relay is closed"
MAX_LINE = 64 * 1024 * 1024  # a snapshot of many links is large; a runaway line is not
MAX_METHODS_KEPT = 4096
# Answered once per listener: the calls the seam declares constant for the life of a
# kernel (read-only, no parameters): no change of the kernel can be hidden behind them.
CONSTANT_METHODS = frozenset(name for name, call in LAB_CALLS.items() if call.constant)


class RelayClosed(RuntimeError):
    """The relay is closed (or its upstream failed); the message says why."""


class KernelRelay:
    """Owns ``upstream`` (a connected stream socket to the agent) and relays the request
    lines of any number of Unix-socket clients to it, one exchange at a time.

    ``timeout``: how long one answer may take upstream before the relay gives up on it;
    ``on_failure``: called once with the reason when the agent's stream fails (the lab
    logs what the agent's side shows of it).
    """

    def __init__(
        self,
        upstream: socket.socket,
        *,
        timeout: float,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self._upstream = upstream
        self._on_failure = on_failure  # told why, once, when the stream fails (not at close)
        upstream.settimeout(timeout)
        self._reader = upstream.makefile("rb")
        self._exchange = threading.Lock()  # one request/answer on the upstream at a time
        self._state = threading.Condition()  # listeners, clients, failure
        self._listeners: dict[Path, _Listener] = {}
        self._clients: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self.failure: str | None = None
        self.exchanges = 0
        # (session, method) of the latest exchanges, oldest first: what a benchmark counts
        # as round trips to the guest (each one costs milliseconds under TCG).
        self.methods: deque[tuple[str | None, str]] = deque(maxlen=MAX_METHODS_KEPT)

    # -- listeners ---------------------------------------------------------------------------

    def listen(self, path: Path, session: str | None = None) -> None:
        """Accept clients on a new Unix socket at ``path`` (its requests go to
        ``session``'s namespaces, or to the guest's own with None)."""
        with self._state:
            if self.failure is not None:
                raise RelayClosed(self.failure)
            if path in self._listeners:
                raise ValueError(f"the relay already listens on {path}")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(str(path))
                sock.listen(16)
            except BaseException:
                sock.close()
                raise
            listener = _Listener(path, session, sock)
            self._listeners[path] = listener
            self._spawn(self._accept, listener, name=f"relay-accept-{path.name}")

    def unlisten(self, path: Path) -> None:
        """Stop accepting on ``path`` and hang up on its clients (the socket file goes)."""
        with self._state:
            listener = self._listeners.pop(path, None)
        if listener is None:
            return
        _shut(listener.sock)
        for client in list(listener.clients):
            _shut(client)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    # -- the relay ---------------------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], *args: object, name: str) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.add(thread)
        thread.start()

    def _accept(self, listener: _Listener) -> None:
        while True:
            try:
                client, _ = listener.sock.accept()
            except OSError:
                break  # shut down: unlisten() or close()
            with self._state:
                if self.failure is not None or self._listeners.get(listener.path) is not listener:
                    client.close()
                    break
                self._clients.add(client)
                listener.clients.add(client)
                self._state.notify_all()
                self._spawn(
                    self._serve, listener, client, name=f"relay-client-{listener.path.name}"
                )
        listener.sock.close()
        with self._state:
            self._threads.discard(threading.current_thread())

    def _serve(self, listener: _Listener, client: socket.socket) -> None:
        try:
            with client.makefile("rb") as reader:
                while True:
                    try:
                        line = reader.readline(MAX_LINE)
                    except OSError:
                        break
                    if not line.endswith(b"\n"):
                        break  # the end of the stream, or a client dying mid-line: unsent
                    if not line.strip():
                        continue
                    line, request = _in_session(line, listener.session)
                    if self.failure is not None:
                        break  # every client is being hung up on, even one a constant serves
                    answer = listener.constant(request)
                    if answer is None:
                        answer = self._forward(line, (listener.session, _method(request)))
                        if answer is None:
                            break  # the upstream failed: every client is being hung up on
                        listener.remember(request, answer)
                    try:
                        client.sendall(answer)
                    except OSError:
                        break  # the client hung up mid-call; the stream is still in step
        finally:
            client.close()
            with self._state:
                self._clients.discard(client)
                listener.clients.discard(client)
                self._threads.discard(threading.current_thread())
                self._state.notify_all()

    def _forward(self, line: bytes, method: tuple[str | None, str]) -> bytes | None:
        """One exchange with the agent: the answer line, or None once the upstream failed."""
        with self._exchange:
            if self.failure is not None:
                return None
            try:
                self._upstream.sendall(line)
                answer = self._reader.readline(MAX_LINE)
            except TimeoutError:  # named apart: what a report of a hung agent shows first
                waited = self._upstream.gettimeout()
                self._fail(
                    f"the guest agent left {method[1]!r} unanswered: timed out after {waited:g} s"
                )
                return None
            except OSError as exc:
                self._fail(f"the guest agent's stream failed: {exc!r}")
                return None
            if not answer.endswith(b"\n"):
                self._fail("the guest agent closed its stream")
                return None
            self.exchanges += 1
            self.methods.append(method)
            return answer

    def _fail(self, why: str) -> None:
        with self._state:
            first = self.failure is None
            if first:
                self.failure = why
                log.log(logging.INFO if why == CLOSED else logging.WARNING, "kernel relay: %s", why)
            listeners = list(self._listeners.values())
            self._listeners.clear()
            clients = list(self._clients)
        for listener in listeners:
            _shut(listener.sock)
            with contextlib.suppress(FileNotFoundError):
                listener.path.unlink()
        for client in clients:
            _shut(client)
        if first and why != CLOSED and self._on_failure is not None:
            self._on_failure(why)

    def close(self) -> None:
        """Hang up on every client and on the agent (the guest sees the end of its
        stream); waits for the relay's threads. Idempotent."""
        self._fail(CLOSED)
        with self._exchange:  # a call in progress ends first (or fails at its timeout)
            _shut(self._upstream)
            self._reader.close()
            self._upstream.close()
        with self._state:
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join()

    @property
    def clients(self) -> int:
        """How many clients are connected now."""
        with self._state:
            return len(self._clients)

    def wait_clients(self, count: int, timeout: float) -> bool:
        """Wait until exactly ``count`` clients are connected; False at the timeout."""
        with self._state:
            return self._state.wait_for(lambda: len(self._clients) == count, timeout)


class _Listener:
    def __init__(self, path: Path, session: str | None, sock: socket.socket) -> None:
        self.path = path
        self.session = session
        self.sock = sock
        self.clients: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._constants: dict[str, object] = {}  # method -> its result, once answered

    def constant(self, request: dict[str, object] | None) -> bytes | None:
        """The answer line to ``request`` from what this listener was answered before, or
        None to forward it (not a constant's request, or not answered yet)."""
        method = _constant_method(request)
        if request is None or method is None:
            return None
        with self._lock:
            if method not in self._constants:
                return None
            result = self._constants[method]
        return json.dumps({"id": request.get("id"), "result": result}).encode() + b"\n"

    def remember(self, request: dict[str, object] | None, answer: bytes) -> None:
        method = _constant_method(request)
        if method is None:
            return
        try:
            reply = json.loads(answer)
        except ValueError:
            return
        if isinstance(reply, dict) and reply.get("error") is None and "result" in reply:
            with self._lock:
                self._constants[method] = reply["result"]


def _method(request: dict[str, object] | None) -> str:
    return "?" if request is None else str(request.get("method", "?"))


def _constant_method(request: dict[str, object] | None) -> str | None:
    """The method of a request for one of a kernel's constants (no parameters), or None."""
    if request is None or request.get("params"):
        return None
    method = request.get("method")
    return method if isinstance(method, str) and method in CONSTANT_METHODS else None


def _in_session(line: bytes, session: str | None) -> tuple[bytes, dict[str, object] | None]:
    """The request line with ``session`` set (None: as it came), and the request (None if
    the line is not a JSON object). A line that is not a JSON object goes as it came: the
    agent answers it with a protocol error and calls nothing, so it cannot reach the
    guest's own namespaces."""
    try:
        request = json.loads(line)
    except ValueError:
        return line, None
    if not isinstance(request, dict):
        return line, None
    if session is None:
        return line, request
    request["session"] = session
    return json.dumps(request).encode() + b"\n", request


def _shut(sock: socket.socket) -> None:
    """Wake whoever blocks on ``sock`` (accept, recv) with the end of the stream."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
