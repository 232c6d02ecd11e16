"""The standard gRPC health service (``grpc.health.v1.Health``) of one socket.

It answers without the token because a health probe (kubelet's gRPC probe,
``grpc_health_probe``) has none, and so it says nothing but SERVING or NOT_SERVING
for two names: ``""`` (the socket's server) and ``networkplugin.v1alpha1.NetworkPlugin``
(the one service behind it). Any other name is ``NOT_FOUND``; metadata is never read.

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

__all__ = ["HealthReporting", "add_health"]

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["NetworkPlugin"].full_name
_NAMES = ("", SERVICE_NAME)
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

    def __init__(self, serving: Callable[[], bool]) -> None:
        self._serving = serving

    def _status(self) -> Any:
        try:
            up = self._serving()
        except Exception:  # a probe is never answered with an internal error's text
            up = False
        response = health_pb2.HealthCheckResponse
        return response.SERVING if up else response.NOT_SERVING

    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.service not in _NAMES:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return health_pb2.HealthCheckResponse(status=self._status())

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:
        status = self._status()
        return health_pb2.HealthListResponse(
            statuses={name: health_pb2.HealthCheckResponse(status=status) for name in _NAMES}
        )

    def Watch(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, _NO_WATCH)


def add_health(server: grpc.Server, service: EndpointService) -> None:
    """Serve the health service for ``service`` on ``server`` (before it starts)."""
    health_pb2_grpc.add_HealthServicer_to_server(_Health(_serving_of(service)), server)
