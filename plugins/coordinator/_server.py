"""The coordinator program's socket: one authenticated gRPC server on one Unix socket.

Bound the way the plugin services' host binds theirs (``plugins.sdk.host.Host``, whose
servers serve only the NetworkPlugin contract): the directory is created 0700 (an
existing one must be ours with no group/other bits), the socket is bound under umask
0177 at a private staging name, chmod 0600, then hard-linked to its public name, so gRPC
never unlinks a path someone else may own; a leftover socket is removed only if nothing
answers on it; at stop only the socket this server linked is removed.

Order of checks per RPC: the bearer token (constant time; a failure reaches nothing),
then decoding, then the service (which gates on readiness and its journal). Every
exception becomes a status code in one place, ``plugins.sdk.host.status_for``.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import secrets
import socket
import stat
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final, TypeVar

import grpc

from plugins.api.coordinator.v1alpha1 import pb, pb_grpc
from plugins.sdk import RegistrationError
from plugins.sdk.host import status_for

from . import _wire as wire
from ._program import CoordinatorService

log = logging.getLogger("plugins.coordinator.server")

_UNAUTHENTICATED: Final = "missing or invalid authorization metadata (expected 'Bearer <token>')"
_SOCKET_UMASK: Final = 0o177
_PROBE_TIMEOUT_S: Final = 1.0
_UMASK_LOCK = threading.Lock()

_Out = TypeVar("_Out")


class _Servicer(pb_grpc.CoordinatorServicer):
    def __init__(self, service: CoordinatorService, token: bytes) -> None:
        self._service = service
        self._token = token

    def _authenticated(self, context: grpc.ServicerContext) -> bool:
        values = [v for k, v in context.invocation_metadata() if k.lower() == "authorization"]
        if len(values) != 1:
            return False
        raw = values[0].encode("utf-8", "replace") if isinstance(values[0], str) else values[0]
        scheme, sep, credential = raw.partition(b" ")
        return (
            bool(sep)
            and scheme.lower() == b"bearer"
            and hmac.compare_digest(credential, self._token)
        )

    def _handle(self, context: grpc.ServicerContext, rpc: str, call: Callable[[], _Out]) -> _Out:
        # context.abort raises, so it is only called outside the try block.
        if not self._authenticated(context):
            log.warning("%s: rejected unauthenticated call", rpc)
            context.abort(grpc.StatusCode.UNAUTHENTICATED, _UNAUTHENTICATED)
        try:
            return call()
        except Exception as exc:
            code, message = status_for(exc)
            if code is grpc.StatusCode.INTERNAL:
                log.error("%s failed", rpc, exc_info=exc)
            else:
                log.info("%s: %s: %s", rpc, code.name, message)
        context.abort(code, message)
        raise AssertionError("unreachable: context.abort() returned")

    def ApplyTopology(
        self, request: pb.ApplyTopologyRequest, context: grpc.ServicerContext
    ) -> pb.ApplyTopologyResponse:
        return self._handle(
            context,
            "ApplyTopology",
            lambda: wire.apply_result_to_pb(
                self._service.apply(wire.apply_request_from_pb(request))
            ),
        )

    def RemoveTopology(
        self, request: pb.RemoveTopologyRequest, context: grpc.ServicerContext
    ) -> pb.RemoveTopologyResponse:
        return self._handle(
            context,
            "RemoveTopology",
            lambda: wire.remove_result_to_pb(self._service.remove(request.attachment_id)),
        )

    def GetStatus(
        self, request: pb.GetStatusRequest, context: grpc.ServicerContext
    ) -> pb.GetStatusResponse:
        return self._handle(context, "GetStatus", lambda: wire.status_to_pb(self._service.status()))


class CoordinatorServer:
    """Serve ``service`` on the Unix socket ``path`` to clients presenting ``token``."""

    def __init__(
        self, path: Path, token: str, service: CoordinatorService, *, max_workers: int = 4
    ) -> None:
        self.path = path
        self._token = token.encode("ascii")
        self._service = service
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._inode: int | None = None

    def start(self) -> None:
        _prepare_dir(self.path.parent)
        _clear_stale(self.path)
        staging = self.path.parent / f".{secrets.token_hex(4)}.{self.path.name}"
        executor = ThreadPoolExecutor(self._max_workers, thread_name_prefix="coordinator")
        server = grpc.server(executor, options=[("grpc.so_reuseport", 0)])
        pb_grpc.add_CoordinatorServicer_to_server(_Servicer(self._service, self._token), server)
        try:
            with _UMASK_LOCK:
                previous = os.umask(_SOCKET_UMASK)
                try:
                    server.add_insecure_port(f"unix:{staging}")
                finally:
                    os.umask(previous)
            try:
                os.chmod(staging, 0o600)
                try:
                    os.link(staging, self.path)
                except FileExistsError:
                    raise RegistrationError(
                        f"{self.path} appeared while starting; another coordinator may be serving it"
                    ) from None
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(staging)
            self._inode = os.lstat(self.path).st_ino
            server.start()
        except Exception as exc:
            server.stop(None)
            executor.shutdown(wait=False)
            if isinstance(exc, RegistrationError):
                raise
            raise RegistrationError(f"cannot serve {self.path}: {exc}") from exc
        self._server, self._executor = server, executor
        log.info("serving %s", self.path)

    def stop(self, grace: float | None) -> bool:
        """Stop admitting, let running RPCs finish for up to ``grace`` s; True if they did."""
        if self._server is None:
            return True
        done = self._server.stop(grace).wait((grace or 0.0) + 5.0)
        assert self._executor is not None
        self._executor.shutdown(wait=False)
        self._server = None
        # Only unlink the file we linked: a successor may already own the path.
        with contextlib.suppress(FileNotFoundError):
            if os.lstat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        return done


def _prepare_dir(d: Path) -> None:
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        else:
            os.chmod(d, 0o700)  # mkdir's mode is filtered through the umask
        st = os.lstat(d)
    except OSError as exc:
        raise RegistrationError(f"socket directory {d}: cannot create: {exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RegistrationError(f"socket directory {d}: exists and is not a directory")
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise RegistrationError(
            f"socket directory {d}: owned by uid {st.st_uid} with mode "
            f"{stat.S_IMODE(st.st_mode):04o}; it must be owned by uid {os.geteuid()} with mode 0700"
        )


def _clear_stale(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise RegistrationError(f"{path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(_PROBE_TIMEOUT_S)
    try:
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        log.info("removing stale socket %s", path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    except TimeoutError:
        pass  # a full backlog still means someone is listening
    except OSError as exc:
        raise RegistrationError(f"cannot tell whether {path} is in use: {exc}") from None
    finally:
        probe.close()
    raise RegistrationError(f"another coordinator is serving {path}")
