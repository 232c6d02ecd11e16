"""The coordinator program's socket: one authenticated gRPC server on one Unix socket.

Bound by the same functions as the plugin services' sockets (``plugins.sdk.host``:
``prepare_socket_dir``, ``clear_stale_socket``, ``bind_linked_socket``,
``remove_own_socket``): a 0700 directory, a 0600 socket linked into place from a staging
name, so gRPC never unlinks a path someone else may own.

Order of checks per RPC: the bearer token (constant time; a failure reaches nothing),
then decoding, then the service (which gates on readiness and its journal). Every
exception becomes a status code in one place, ``plugins.sdk.host.status_for``.

The standard health service (``grpc.health.v1``, the services' own:
``plugins.sdk.host.add_health_service``) answers on the same socket without a token, for
``""`` and ``coordinator.v1alpha1.Coordinator``: SERVING once recovery is done and the
journal is intact, NOT_SERVING before and otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final, TypeVar

import grpc

from plugins.api.coordinator.v1alpha1 import pb, pb_grpc
from plugins.sdk import RegistrationError
from plugins.sdk.host import (
    add_health_service,
    bearer_token_matches,
    bind_linked_socket,
    clear_stale_socket,
    prepare_socket_dir,
    remove_own_socket,
    status_for,
)

from . import _wire as wire
from ._program import CoordinatorService

log = logging.getLogger("plugins.coordinator.server")

_UNAUTHENTICATED: Final = "missing or invalid authorization metadata (expected 'Bearer <token>')"
SERVICE_NAME: Final = pb.DESCRIPTOR.services_by_name["Coordinator"].full_name

_Out = TypeVar("_Out")


class _Servicer(pb_grpc.CoordinatorServicer):
    def __init__(self, service: CoordinatorService, token: bytes) -> None:
        self._service = service
        self._token = token

    def _authenticated(self, context: grpc.ServicerContext) -> bool:
        return bearer_token_matches(context, self._token)

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
        prepare_socket_dir(self.path.parent)
        clear_stale_socket(self.path, serving="coordinator")
        executor = ThreadPoolExecutor(self._max_workers, thread_name_prefix="coordinator")
        server = grpc.server(executor, options=[("grpc.so_reuseport", 0)])
        pb_grpc.add_CoordinatorServicer_to_server(_Servicer(self._service, self._token), server)
        service = self._service
        add_health_service(server, SERVICE_NAME, lambda: service.ready and not service.fault)
        try:
            self._inode = bind_linked_socket(server, self.path, serving="coordinator")
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
        remove_own_socket(self.path, self._inode)
        return done
