"""The standard gRPC health service (``grpc.health.v1.Health``) of one socket.

It answers without the token because a health probe (kubelet's gRPC probe,
``grpc_health_probe``) has none, and so it says nothing but SERVING or NOT_SERVING
for two names: ``""`` (the socket's server) and ``networkplugin.v1alpha1.NetworkPlugin``
(the one service behind it; ``coordinator.v1alpha1.Coordinator`` on the coordinator's
socket, through ``add_health_service``). Any other name is ``NOT_FOUND``; metadata is
never read.

The status is computed at each ``Check``: SERVING only once recovery is done and the
journal is intact (``serving()`` of the endpoint when it has one, else GetInfo's
readiness without a fault). ``Watch`` is refused (``UNIMPLEMENTED``): an
unauthenticated stream would hold one of the plugin's few worker threads for as long
as the peer likes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from plugins.api.networkplugin.v1alpha1 import pb

from ._service import EndpointService

__all__ = ["HealthReporting", "add_health", "add_health_service"]

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["NetworkPlugin"].full_name
_NO_WATCH = "Watch is not served on this socket; poll Check instead"


@runtime_checkable
class HealthReporting(Protocol):
    """An endpoint that knows more than GetInfo's readiness (the runner: damaged records)."""

    def serving(self) -> bool: ...


def _serving_of(service: EndpointService) -> Callable[[], bool]:
    if isinstance(service, HealthReporting):
        return service.serving

    def from_info() -> bool:
        info = service.info()
        return info.ready and not info.fault

    return from_info


class _Health:
    """``grpc.health.v1.Health`` for one endpoint: Check and List, live."""

    def __init__(self, serving: Callable[[], bool], service_name: str) -> None:
        self._serving = serving
        self._names = ("", service_name)

    def _status(self) -> Any:
        try:
            up = self._serving()
        except Exception:  # a probe is never answered with an internal error's text
            up = False
        response = health_pb2.HealthCheckResponse
        return response.SERVING if up else response.NOT_SERVING

    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.service not in self._names:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return health_pb2.HealthCheckResponse(status=self._status())

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:
        status = self._status()
        return health_pb2.HealthListResponse(
            statuses={name: health_pb2.HealthCheckResponse(status=status) for name in self._names}
        )

    def Watch(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, _NO_WATCH)


def add_health(server: grpc.Server, service: EndpointService) -> None:
    """Serve the health service for ``service`` on ``server`` (before it starts)."""
    add_health_service(server, SERVICE_NAME, _serving_of(service))


def add_health_service(server: grpc.Server, service_name: str, serving: Callable[[], bool]) -> None:
    """Serve the health service on ``server`` (before it starts) for ``""`` and
    ``service_name``: SERVING while ``serving()`` says so, asked at each Check (an
    exception is NOT_SERVING). Any authenticated node socket's (the coordinator's too)."""
    health_pb2_grpc.add_HealthServicer_to_server(_Health(serving, service_name), server)
