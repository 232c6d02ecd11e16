"""Who answers on a plugin socket: the coordinator checks it before it calls.

The config maps each logical plugin to a socket; nothing in that mapping proves the
socket serves that plugin (``macvlan`` mapped to ``vlan.sock`` was accepted, and the
first apply failed with "NodePrepare is not a hook of an Operation-only plugin"). So
the coordinator asks the socket's ``GetInfo`` and compares its plugin name and contract
digest with the descriptor this artifact pins for the name (``identity_problem``, pure):

- at start, on every configured socket (a mismatch refuses to start; a socket that does
  not answer yet is checked at its first connection);
- at every new connection afterwards: the channel's state leaving ``READY`` (the plugin
  service restarted, or the socket was replaced) makes the next call check again first.
  A mismatch makes that call fail ``UNAVAILABLE`` with the reason, before anything is
  journaled or sent (``CheckedPluginClient.admit``).

The check costs one ``GetInfo`` per connection, not per call. Its limit: gRPC reports a
connection's end on a thread of its own, so a call made within a few milliseconds of a
restart can reach the new process before the check is due; the calls themselves still
carry what the plugin checks (hook, step kind, config schema), so such a call is
refused by the plugin rather than misapplied.
"""

from __future__ import annotations

import threading
from pathlib import Path

import grpc

from plugins.sdk import Descriptor, EndpointInfo
from plugins.sdk.host import PluginCallError, PluginClient


class PeerMismatch(PluginCallError):
    """The socket answers, but not as the plugin the config names (``UNAVAILABLE``)."""

    def __init__(self, plugin: str, problem: str) -> None:
        super().__init__("UNAVAILABLE", f"plugin {plugin}: {problem}")
        self.problem = problem


def identity_problem(
    name: str, socket: Path, info: EndpointInfo, descriptor: Descriptor
) -> str | None:
    """Why ``info`` (GetInfo on ``socket``) is not the plugin ``name`` as pinned, or None."""
    if info.plugin_name != name:
        return f"{socket} serves plugin {info.plugin_name!r}, not {name!r}"
    if info.contract_digest != descriptor.contract_digest:
        return (
            f"{socket} serves plugin {name!r} with contract digest {info.contract_digest}, "
            f"not the pinned {descriptor.contract_digest} (an artifact pinned to another "
            "contract)"
        )
    return None


class CheckedPluginClient(PluginClient):
    """A :class:`PluginClient` whose peer's identity is checked at each new connection.

    ``admit`` is what the coordinator calls before it journals a call: it returns at
    once while the connection it checked lasts, and asks ``GetInfo`` first otherwise.
    """

    def __init__(
        self, name: str, socket: Path, token: str, descriptor: Descriptor, *, timeout: float
    ) -> None:
        super().__init__(socket, token, timeout=timeout)
        self.name = name
        self._descriptor = descriptor
        self._lock = threading.Lock()
        # Connections seen ending (the channel leaving READY); a check holds for the
        # connection number it was made in.
        self._connection = 0
        self._checked: int | None = None
        self._state: grpc.ChannelConnectivity | None = None
        self.watch_connectivity(self._on_connectivity)

    def _on_connectivity(self, state: grpc.ChannelConnectivity) -> None:
        ready = grpc.ChannelConnectivity.READY
        with self._lock:
            if self._state is ready and state is not ready:
                self._connection += 1
            self._state = state

    def check(self, info: EndpointInfo) -> None:
        """Raise :class:`PeerMismatch` if ``info`` is not this plugin's."""
        problem = identity_problem(self.name, self.socket_path, info, self._descriptor)
        if problem is not None:
            raise PeerMismatch(self.name, problem)

    def admit(self) -> None:
        """Check the peer unless this connection was checked; ``PluginCallError`` if not
        admitted (``PeerMismatch``, or GetInfo's own failure)."""
        with self._lock:
            if self._checked == self._connection:
                return
            connection = self._connection
        info = self.get_info()
        self.check(info)
        self._checked_in(connection)

    def wait_ready(self, deadline_s: float) -> EndpointInfo:
        """``PluginClient.wait_ready``, refusing a ready peer that is another plugin."""
        with self._lock:
            connection = self._connection
        info = super().wait_ready(deadline_s)
        self.check(info)
        self._checked_in(connection)
        return info

    def _checked_in(self, connection: int) -> None:
        with self._lock:
            self._checked = connection
