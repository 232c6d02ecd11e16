"""The gRPC side of the SDK: the identity-bound host, its client, and wire conversion.

* :class:`Host` serves one :class:`EndpointService` per Unix socket and authenticates
  every RPC (``GetInfo`` included) with ``authorization: Bearer <token>`` metadata.
* :class:`PluginClient` is the coordinator's typed client for one socket.
* The ``*_from_pb`` / ``*_to_pb`` functions are the only protobuf <-> SDK conversion.
* :func:`status_for` is the only exception -> gRPC status mapping.
* ``prepare_socket_dir``, ``clear_stale_socket``, ``bind_linked_socket`` and
  ``remove_own_socket`` bind any authenticated node socket (the coordinator's too);
  ``check_socket_paths`` / ``socket_path_fits`` say before anything is created whether
  its path can be bound; ``bearer_token_matches`` is its token check;
  ``add_health_service`` serves ``grpc.health.v1`` on it.
"""

from typing import TYPE_CHECKING

from .._lazy import first_use_exports
from ._convert import (
    check_identifier,
    cleanup_request_from_pb,
    cleanup_request_to_pb,
    cleanup_response_from_pb,
    cleanup_response_to_pb,
    connect_request_from_pb,
    connect_request_to_pb,
    connect_response_from_pb,
    connect_response_to_pb,
    envelope_from_pb,
    envelope_to_pb,
    info_from_pb,
    info_to_pb,
    inspect_request_from_pb,
    inspect_request_to_pb,
    inspect_response_from_pb,
    inspect_response_to_pb,
    prepare_request_from_pb,
    prepare_request_to_pb,
    prepare_response_from_pb,
    prepare_response_to_pb,
    remove_request_to_pb,
    unprepare_request_to_pb,
)
from ._server import SOCKET_NAME, Host, read_token, status_for
from ._service import EndpointService
from ._socket import (
    MAX_SOCKET_PATH,
    STAGING_EXTRA,
    bearer_token_matches,
    bind_linked_socket,
    check_socket_paths,
    clear_stale_socket,
    prepare_socket_dir,
    remove_own_socket,
    socket_path_fits,
)

if TYPE_CHECKING:
    from ._client import PluginCallError, PluginClient
    from ._health import add_health_service
    from ._polling import poll_until_ready

__all__ = [
    "MAX_SOCKET_PATH",
    "SOCKET_NAME",
    "STAGING_EXTRA",
    "EndpointService",
    "Host",
    "PluginCallError",
    "PluginClient",
    "add_health_service",
    "bearer_token_matches",
    "bind_linked_socket",
    "check_identifier",
    "check_socket_paths",
    "cleanup_request_from_pb",
    "cleanup_request_to_pb",
    "cleanup_response_from_pb",
    "cleanup_response_to_pb",
    "clear_stale_socket",
    "connect_request_from_pb",
    "connect_request_to_pb",
    "connect_response_from_pb",
    "connect_response_to_pb",
    "envelope_from_pb",
    "envelope_to_pb",
    "info_from_pb",
    "info_to_pb",
    "inspect_request_from_pb",
    "inspect_request_to_pb",
    "inspect_response_from_pb",
    "inspect_response_to_pb",
    "poll_until_ready",
    "prepare_request_from_pb",
    "prepare_request_to_pb",
    "prepare_response_from_pb",
    "prepare_response_to_pb",
    "prepare_socket_dir",
    "read_token",
    "remove_own_socket",
    "remove_request_to_pb",
    "socket_path_fits",
    "status_for",
    "unprepare_request_to_pb",
]

_ON_FIRST_USE = {
    "PluginCallError": "_client",
    "PluginClient": "_client",
    "add_health_service": "_health",
    "poll_until_ready": "_polling",
}

# The client side is imported on first use: a service only serves, and never needs it;
# the health service (grpc_health) only once a server is built. Hidden from mypy, which
# would otherwise accept any name imported from here; the TYPE_CHECKING imports above
# type these.
if not TYPE_CHECKING:
    __getattr__, __dir__ = first_use_exports(__name__, _ON_FIRST_USE, globals(), __all__)
