"""The node coordinator's NRI runtime adapter: an NRI plugin (containerd/nri v0.2+).

``NRIPlugin`` connects to the container runtime's NRI socket, registers, subscribes to
the sandbox events and CreateContainer, and turns the runtime's calls into calls of a
``RuntimeHandler`` with ``PodSandbox``/``Container`` values. See ``_plugin`` for the
connection's life, ``_mux`` and ``_ttrpc`` for the framing.
"""

from ._convert import NETWORK_NAMESPACE, Container, MessageError, PodSandbox
from ._events import DEFAULT_EVENTS, HANDLED_EVENTS, Event, event_mask, events_in_mask
from ._mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, FrameError
from ._plugin import (
    DEFAULT_SOCKET_PATH,
    PLUGIN_SERVICE,
    RUNTIME_SERVICE,
    NRIPlugin,
    RegistrationError,
    RuntimeHandler,
    status_for,
)
from ._ttrpc import CallError, RemoteError

__all__ = [
    "DEFAULT_EVENTS",
    "DEFAULT_SOCKET_PATH",
    "HANDLED_EVENTS",
    "NETWORK_NAMESPACE",
    "PLUGIN_SERVICE",
    "PLUGIN_SERVICE_CONN",
    "RUNTIME_SERVICE",
    "RUNTIME_SERVICE_CONN",
    "CallError",
    "Container",
    "Event",
    "FrameError",
    "MessageError",
    "NRIPlugin",
    "PodSandbox",
    "RegistrationError",
    "RemoteError",
    "RuntimeHandler",
    "event_mask",
    "events_in_mask",
    "status_for",
]
