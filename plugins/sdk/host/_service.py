"""What the host needs from the thing behind one socket (the runner, per registration)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from plugins.sdk._requests import (
    CleanupRequest,
    CleanupResponse,
    ConnectRequest,
    ConnectResponse,
    EndpointInfo,
    InspectResponse,
    PrepareRequest,
    PrepareResponse,
)

__all__ = ["EndpointService"]


@runtime_checkable
class EndpointService(Protocol):
    """One logical plugin as the host serves it on its own socket.

    The host calls these only after the caller is authenticated and the request has
    been converted and validated (envelope hook matches the RPC, identifiers are well
    formed). Mutating hooks and :meth:`inspect` are called only while
    ``info().ready`` is true. Calls arrive concurrently from the server's worker
    threads, so implementations must be thread-safe.

    Raise :class:`~plugins.sdk.NetworkPluginError` subclasses to choose the status
    code; any other exception becomes ``INTERNAL`` with a generic message.
    """

    def info(self) -> EndpointInfo:
        """Identity and live readiness (``ready`` flips to true after recovery)."""
        ...

    def node_prepare(self, req: PrepareRequest) -> PrepareResponse: ...

    def connect_network(self, req: ConnectRequest) -> ConnectResponse: ...

    def remove_network(self, req: CleanupRequest) -> CleanupResponse: ...

    def node_unprepare(self, req: CleanupRequest) -> CleanupResponse: ...

    def inspect(self, operation_id: str, scope: str) -> InspectResponse: ...
