"""The node coordinator's NRI runtime adapter: an NRI plugin (containerd/nri v0.2+).

``NRIPlugin`` connects to the container runtime's NRI socket, registers, subscribes to
the sandbox events and CreateContainer, and turns the runtime's calls into calls of a
``RuntimeHandler`` with ``PodSandbox``/``Container`` values. See ``_plugin`` for the
connection's life, ``_mux`` and ``_ttrpc`` for the framing.

Written from the public protocol (there is no Python ttrpc); the decisions:

- Framing, outermost first: NRI's multiplexer (4-byte big-endian connection id, 4-byte
  big-endian length, payload; a frame is a chunk of a byte stream, so messages are
  reassembled per connection), then ttrpc (10-byte header: length, stream id, type 1/2/3,
  flags; bodies ``ttrpc.Request``/``ttrpc.Response``; at most 4 MiB).
- Which side serves what: the plugin dials; the runtime calls the plugin's service
  (``nri.pkg.api.v1alpha1.Plugin``) on connection 1, the plugin calls the runtime's
  (``Runtime.RegisterPlugin``) on connection 2, with odd, growing stream ids each way.
- Concurrency: one reader thread per plugin never runs a handler; every call runs on a
  worker and is answered when it returns, so handlers must be thread-safe.
- Errors: a handler's exception is the call's status (``status_for``: an SDK error's
  own code and message, anything else INTERNAL) naming the sandbox/container, and is
  logged. A bad payload inside a well-formed call is answered INVALID_ARGUMENT; bytes
  that are not the protocol's (frame, message or envelope) drop the connection, as does
  an oversized message (upstream ttrpc would skip it and answer RESOURCE_EXHAUSTED; our
  runtime peer never sends one, and a reconnection resynchronizes anyway).
- At a drop: the registered and synchronized states are cleared, calls in flight finish
  unanswered, and the plugin dials again after a doubling backoff, registers again and is
  configured and synchronized anew by the runtime.
- Eviction (``EVICTION_REASON``; ``NRIPlugin.evictions_sent`` counts both routes once
  written): the containers the handler's ``synchronize`` returns are evicted with
  ``Runtime.UpdateContainers`` once Synchronize is answered (the runtime's answer is only
  logged); those its ``create_container`` returns go in the CreateContainer answer's
  ``evict``. Both are kept because containerd acts only on the second: upstream's
  adaptation (containerd/nri ``pkg/adaptation``) passes only the updates of
  UpdateContainers on, not its evictions, while the evictions of CreateContainer and
  UpdateContainer answers are carried out. A refused CreateContainer evicts nothing.
- RegisterPlugin carries no NRI_version: the adapter implements a subset of the protocol
  and claims no release of it (the runtime logs "unknown").
"""

from ._convert import NETWORK_NAMESPACE, Container, MessageError, PodSandbox
from ._events import DEFAULT_EVENTS, HANDLED_EVENTS, Event, event_mask, events_in_mask
from ._mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, FrameError
from ._plugin import (
    DEFAULT_SOCKET_PATH,
    EVICTION_REASON,
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
    "EVICTION_REASON",
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
