"""The identity-bound gRPC host: one server per logical plugin, one Unix socket each.

Each socket gets its own ``grpc.server`` whose servicer holds exactly one
:class:`EndpointService`; nothing on ``vlan.sock`` can reach the ipvlan service.

Every NetworkPlugin RPC, ``GetInfo`` included, must carry ``authorization: Bearer
<token>`` metadata. The token is compared in constant time before anything else
happens; a request that fails never reaches the service. ``GetInfo`` is not exempt
because the node coordinator is the only legitimate peer and the descriptor and
digests it returns are not for anyone else. Probes use the standard gRPC health
service on the same socket (``_health``): it needs no token and tells nothing but
SERVING or NOT_SERVING.

Order of checks per RPC: authentication, then (for the mutating hooks and
``InspectOperation``) readiness, then conversion and validation of the request,
then the service call, then conversion of the response.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc

from plugins.api.networkplugin.v1alpha1 import pb, pb_grpc
from plugins.sdk._errors import Code, NetworkPluginError, RegistrationError
from plugins.sdk._requests import CleanupRequest, ConnectRequest, PrepareRequest

from . import _convert as convert
from ._service import EndpointService
from ._socket import (
    MAX_SOCKET_PATH,
    STAGING_EXTRA,
    bearer_token_matches,
    bind_linked_socket,
    clear_stale_socket,
    prepare_socket_dir,
    remove_own_socket,
    socket_path_fits,
)

__all__ = ["SOCKET_NAME", "Host", "read_token", "status_for"]

logger = logging.getLogger("plugins.sdk.host")

# Same rule as the Registry's socket names: a plain file name, never a path.
SOCKET_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}\.sock")
_TOKEN = re.compile(r"[\x21-\x7e]+")
_MAX_TOKEN_FILE = 4096
_STOP_SLACK_S = 5.0

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_Out = TypeVar("_Out")

_NOT_READY = "recovering; not ready to accept operations, retry later"
_UNAUTHENTICATED = "missing or invalid authorization metadata (expected 'Bearer <token>')"
_GENERIC_INTERNAL = "internal error; see the plugin log"


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The single mapping from an exception to a gRPC status code and message.

    SDK errors map by their ``code`` and say their message, which is written for the
    caller (a field path, a precondition, a fence). ``INTERNAL`` is a bug of the plugin
    or the SDK, whatever raised it (an invalid plan, any other exception): its message
    is one stable sentence, and the caller logs the details and the traceback. What went
    wrong inside is not the peer's to read.
    """
    if isinstance(exc, NetworkPluginError) and exc.code is not Code.INTERNAL:
        return grpc.StatusCode[exc.code.name], exc.message or type(exc).__name__
    return grpc.StatusCode.INTERNAL, _GENERIC_INTERNAL


def _check_token(token: str, source: str) -> str:
    if not token:
        raise RegistrationError(f"{source}: token is empty")
    if _TOKEN.fullmatch(token) is None:
        raise RegistrationError(
            f"{source}: token must be printable ASCII without whitespace (it travels as metadata)"
        )
    return token


def read_token(path: Path) -> str:
    """Read the coordinator token for this host from ``path``.

    The file must be a regular file (not a symlink) owned by the effective uid with no
    group or other permission bits, and hold a non-empty token after stripping
    surrounding whitespace. Anything else raises :class:`RegistrationError`.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise RegistrationError(f"token file {path}: does not exist") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RegistrationError(f"token file {path}: is a symlink") from None
        raise RegistrationError(f"token file {path}: cannot open: {exc.strerror}") from None
    try:
        st = _fstat(fd, path)
        if not stat.S_ISREG(st.st_mode):
            raise RegistrationError(f"token file {path}: is not a regular file")
        if st.st_uid != os.geteuid():
            raise RegistrationError(
                f"token file {path}: owned by uid {st.st_uid}, not the service uid {os.geteuid()}"
            )
        if st.st_mode & 0o077:
            raise RegistrationError(
                f"token file {path}: mode {stat.S_IMODE(st.st_mode):04o} gives group/other "
                "access; it must be 0600 or stricter"
            )
        try:
            data = os.read(fd, _MAX_TOKEN_FILE + 1)
        except OSError as exc:
            raise RegistrationError(f"token file {path}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > _MAX_TOKEN_FILE:
        raise RegistrationError(f"token file {path}: larger than {_MAX_TOKEN_FILE} bytes")
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise RegistrationError(f"token file {path}: token is not ASCII") from None
    return _check_token(token, f"token file {path}")


def _fstat(fd: int, path: Path) -> os.stat_result:
    try:
        return os.fstat(fd)
    except OSError as exc:
        raise RegistrationError(f"token file {path}: cannot stat: {exc.strerror}") from None


@dataclass
class _Call:
    socket: str
    rpc: str
    started: float
    operation: str = ""

    def describe(self, now: float) -> str:
        operation = f" {self.operation}" if self.operation else ""
        return f"{self.socket} {self.rpc}{operation} (running {now - self.started:.1f}s)"


class _InFlight:
    """The service calls running right now, across every socket of one host."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[int, _Call] = {}
        self._next = 0

    @contextlib.contextmanager
    def track(self, socket_name: str, rpc: str) -> Iterator[_Call]:
        entry = _Call(socket_name, rpc, time.monotonic())
        with self._lock:
            self._next += 1
            key = self._next
            self._calls[key] = entry
        try:
            yield entry
        finally:
            with self._lock:
                del self._calls[key]

    def describe(self) -> list[str]:
        now = time.monotonic()
        with self._lock:
            calls = sorted(self._calls.values(), key=lambda c: c.started)
        return [c.describe(now) for c in calls]


def _operation_of(request: object) -> str:
    if isinstance(request, PrepareRequest | ConnectRequest | CleanupRequest):
        return request.envelope.operation_id
    if isinstance(request, tuple) and request and isinstance(request[0], str):
        return request[0]  # InspectOperation: (operation_id, scope)
    return ""


class _Servicer(pb_grpc.NetworkPluginServicer):
    """Serves exactly one logical plugin; holds no reference to any other."""

    def __init__(
        self, socket_name: str, service: EndpointService, token: bytes, in_flight: _InFlight
    ) -> None:
        self._socket = socket_name
        self._service = service
        self._token = token
        self._in_flight = in_flight

    def _authenticated(self, context: grpc.ServicerContext) -> bool:
        return bearer_token_matches(context, self._token)

    def _handle(
        self,
        context: grpc.ServicerContext,
        rpc: str,
        *,
        gated: bool,
        decode: Callable[[], _Req],
        call: Callable[[_Req], _Resp],
        encode: Callable[[_Resp], _Out],
    ) -> _Out:
        # context.abort raises, so it is only called outside the try blocks below.
        if not self._authenticated(context):
            logger.warning("%s %s: rejected unauthenticated call", self._socket, rpc)
            context.abort(grpc.StatusCode.UNAUTHENTICATED, _UNAUTHENTICATED)
        failure: tuple[grpc.StatusCode, str]
        try:
            info = self._service.info() if gated else None
        except Exception as exc:
            failure = self._failed(rpc, "info()", exc)
        else:
            if info is not None and not info.ready:
                # A damaged journal never heals by itself: say so, not "retry later".
                failure = (
                    (grpc.StatusCode.DATA_LOSS, f"{self._socket}: {info.fault}")
                    if info.fault
                    else (grpc.StatusCode.UNAVAILABLE, f"{self._socket}: {_NOT_READY}")
                )
            else:
                try:
                    with self._in_flight.track(self._socket, rpc) as entry:
                        request = decode()
                        entry.operation = _operation_of(request)
                        response = call(request)
                except Exception as exc:
                    failure = self._failed(rpc, "call", exc)
                else:
                    try:
                        return encode(response)
                    except Exception as exc:
                        # The service returned something the wire cannot carry: our bug,
                        # not the caller's, whatever the conversion error says.
                        logger.error(
                            "%s %s: invalid response from the service: %s",
                            self._socket,
                            rpc,
                            exc,
                            exc_info=exc,
                        )
                        failure = (grpc.StatusCode.INTERNAL, _GENERIC_INTERNAL)
        context.abort(*failure)
        raise AssertionError("unreachable: context.abort() returned")

    def _failed(self, rpc: str, stage: str, exc: Exception) -> tuple[grpc.StatusCode, str]:
        code, message = status_for(exc)
        if code is grpc.StatusCode.INTERNAL:
            logger.error("%s %s: %s failed: %s", self._socket, rpc, stage, exc, exc_info=exc)
        else:
            logger.info("%s %s: %s: %s", self._socket, rpc, code.name, message)
        return code, message

    def GetInfo(
        self, request: pb.GetInfoRequest, context: grpc.ServicerContext
    ) -> pb.GetInfoResponse:
        return self._handle(
            context,
            "GetInfo",
            gated=False,
            decode=lambda: None,
            call=lambda _: self._service.info(),
            encode=convert.info_to_pb,
        )

    def NodePrepare(
        self, request: pb.NodePrepareRequest, context: grpc.ServicerContext
    ) -> pb.NodePrepareResponse:
        return self._handle(
            context,
            "NodePrepare",
            gated=True,
            decode=lambda: convert.prepare_request_from_pb(request),
            call=self._service.node_prepare,
            encode=convert.prepare_response_to_pb,
        )

    def ConnectNetwork(
        self, request: pb.ConnectNetworkRequest, context: grpc.ServicerContext
    ) -> pb.ConnectNetworkResponse:
        return self._handle(
            context,
            "ConnectNetwork",
            gated=True,
            decode=lambda: convert.connect_request_from_pb(request),
            call=self._service.connect_network,
            encode=convert.connect_response_to_pb,
        )

    def RemoveNetwork(
        self, request: pb.RemoveNetworkRequest, context: grpc.ServicerContext
    ) -> pb.CleanupResponse:
        return self._handle(
            context,
            "RemoveNetwork",
            gated=True,
            decode=lambda: convert.cleanup_request_from_pb(request),
            call=self._service.remove_network,
            encode=convert.cleanup_response_to_pb,
        )

    def NodeUnprepare(
        self, request: pb.NodeUnprepareRequest, context: grpc.ServicerContext
    ) -> pb.CleanupResponse:
        return self._handle(
            context,
            "NodeUnprepare",
            gated=True,
            decode=lambda: convert.cleanup_request_from_pb(request),
            call=self._service.node_unprepare,
            encode=convert.cleanup_response_to_pb,
        )

    def InspectOperation(
        self, request: pb.InspectOperationRequest, context: grpc.ServicerContext
    ) -> pb.InspectOperationResponse:
        return self._handle(
            context,
            "InspectOperation",
            gated=True,
            decode=lambda: convert.inspect_request_from_pb(request),
            call=lambda ids: self._service.inspect(*ids),
            encode=convert.inspect_response_to_pb,
        )


# Handler threads per socket (started on demand, kept while the server runs). A node's
# burst (64 pods attached at once, issue 13's P2) used to queue behind 8: each call
# spends most of its time waiting for a group commit or the kernel, so the calls that
# wait together are the batch, and 8 threads capped every commit at 8 writes.
DEFAULT_MAX_WORKERS = 64


@dataclass
class _Bound:
    name: str
    path: Path
    server: grpc.Server
    executor: ThreadPoolExecutor
    inode: int


class Host:
    """Serve each ``(socket_name, EndpointService)`` pair on ``<socket_dir>/<socket_name>``.

    ``start`` validates the whole endpoint set before binding anything; one bad entry
    fails it with :class:`RegistrationError` and no socket is created. The socket
    directory is created with mode 0700 (an existing one must already be owned by the
    effective uid with no group/other bits); each socket is bound at a staging name in a
    private directory (the process's umask untouched), chmod 0600, then hard-linked to
    its public name (never replacing a file that is there). A leftover socket file is removed only if nothing
    answers on it; a live one fails start with "another service is serving ...".

    ``stop(grace)`` stops admitting RPCs at once, lets in-flight ones finish for up
    to ``grace`` seconds (``None`` cancels them immediately), then removes the socket
    files this host created (only if they still are the ones it bound).
    ``wait_draining()`` blocks until admission is closed, ``wait()`` until stopped.
    Handler threads blocked past ``grace`` keep running until the service returns (or
    the process exits); ``in_flight()`` names the service calls still running.
    """

    def __init__(
        self, socket_dir: Path, token: str, *, max_workers: int = DEFAULT_MAX_WORKERS
    ) -> None:
        if max_workers < 1:
            raise RegistrationError(f"max_workers must be at least 1, got {max_workers}")
        self._dir = Path(socket_dir)
        self._token = _check_token(token, "host").encode("ascii")
        self._max_workers = max_workers
        self._lock = threading.Lock()
        self._started = False
        self._draining = threading.Event()
        self._stopped = threading.Event()
        self._bound: list[_Bound] = []
        self._in_flight = _InFlight()

    @property
    def socket_dir(self) -> Path:
        return self._dir

    @property
    def socket_paths(self) -> Mapping[str, Path]:
        """Socket name -> path, for the endpoints being served."""
        return {b.name: b.path for b in self._bound}

    def in_flight(self) -> list[str]:
        """One line per service call running now, oldest first.

        ``"vlan.sock ConnectNetwork op-7 (running 2.4s)"``: after ``stop(grace)`` these
        are the calls the grace period did not see finish.
        """
        return self._in_flight.describe()

    # ------------------------------------------------------------------ start

    def start(self, endpoints: Iterable[tuple[str, EndpointService]]) -> None:
        with self._lock:
            if self._started or self._stopped.is_set():
                raise RegistrationError("a Host can be started only once")
            pairs = list(endpoints)
            self._validate(pairs)
            prepare_socket_dir(self._dir)
            for name, _ in pairs:
                clear_stale_socket(self._dir / name)
            try:
                for name, service in pairs:
                    self._bound.append(self._bind(name, service))
            except BaseException:
                self._shutdown(None)
                self._draining.clear()  # never served; the host may be started again
                raise
            self._started = True
        logger.info("host serving %s in %s", ", ".join(n for n, _ in pairs), self._dir)

    def _validate(self, pairs: list[tuple[str, EndpointService]]) -> None:
        problems: list[str] = []
        if not pairs:
            problems.append("no endpoints to serve")
        seen: set[str] = set()
        for i, pair in enumerate(pairs):
            if not (isinstance(pair, tuple) and len(pair) == 2):
                problems.append(f"endpoint #{i}: expected (socket_name, service), got {pair!r}")
                continue
            name, service = pair
            if not isinstance(name, str) or SOCKET_NAME.fullmatch(name) is None:
                problems.append(
                    f"endpoint #{i}: socket name {name!r} must be a plain file name "
                    "like 'vlan.sock'"
                )
                continue
            if name in seen:
                problems.append(f"endpoint #{i}: duplicate socket name {name!r}")
            seen.add(name)
            if not isinstance(service, EndpointService):
                problems.append(
                    f"endpoint {name!r}: {type(service).__name__} does not implement "
                    "EndpointService"
                )
            path = self._dir / name
            if not socket_path_fits(path):
                problems.append(
                    f"endpoint {name!r}: socket path {path} exceeds {MAX_SOCKET_PATH} bytes "
                    f"(with {STAGING_EXTRA} bytes of headroom for binding)"
                )
        if problems:
            raise RegistrationError("invalid endpoint set: " + "; ".join(problems))

    def _bind(self, name: str, service: EndpointService) -> _Bound:
        # Bound through a staging name (plugins/sdk/host/_socket.py says why).
        path = self._dir / name
        executor = ThreadPoolExecutor(self._max_workers, thread_name_prefix=f"np-{name}")
        server = grpc.server(executor, options=[("grpc.so_reuseport", 0)])
        pb_grpc.add_NetworkPluginServicer_to_server(
            _Servicer(name, service, self._token, self._in_flight), server
        )
        # Imported here: a process that only speaks to plugins (PluginClient) never loads it.
        from ._health import add_health

        add_health(server, service)
        try:
            inode = bind_linked_socket(server, path)
            server.start()
        except Exception as exc:
            server.stop(None)
            executor.shutdown(wait=False)
            if isinstance(exc, RegistrationError):
                raise
            raise RegistrationError(f"cannot serve {path}: {exc}") from exc
        return _Bound(name, path, server, executor, inode)

    # ------------------------------------------------------------------ stop

    def stop(self, grace: float | None = None) -> None:
        """Stop admitting RPCs, drain in-flight ones for up to ``grace`` s, remove sockets."""
        with self._lock:
            if self._stopped.is_set():
                return
            self._shutdown(grace)
            self._stopped.set()
        logger.info("host stopped")

    def wait_draining(self, timeout: float | None = None) -> bool:
        """Block until ``stop`` has closed admission (in-flight RPCs may still run)."""
        return self._draining.wait(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the host has stopped (or ``timeout`` passes); True if stopped."""
        return self._stopped.wait(timeout)

    def _shutdown(self, grace: float | None) -> None:
        # All servers stop admitting at once; then each drains within the same grace.
        events = [b.server.stop(grace) for b in self._bound]
        self._draining.set()
        for bound, done in zip(self._bound, events, strict=True):
            if not done.wait((grace or 0.0) + _STOP_SLACK_S):
                logger.error("%s: server did not finish shutting down", bound.name)
            bound.executor.shutdown(wait=False)
            remove_own_socket(bound.path, bound.inode)
        self._bound = []
