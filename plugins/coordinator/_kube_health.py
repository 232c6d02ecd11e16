"""The health of the node's published devices for the kubelet's DRA health stream
(``DRAResourceHealth.NodeWatchResources``), from the plugins that serve them.

A device is as healthy as the logical plugins that could realize a claim on it (the
topologies' roots whose device type and exposure policy admit it): ``Healthy`` when every
one of them says it is ready (GetInfo), ``Unhealthy`` when one answers not ready or with a
fault (a damaged journal: it will not get better by itself), ``Unknown`` when one does not
answer at all (a plugin restarting says nothing about the device). Each plugin is asked
once per round, every ``interval_s``; the board (``kubelet.DeviceHealthBoard``) streams a
change to the kubelet at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Final

from plugins.sdk.host import PluginCallError, PluginClient

from ._compile import CompiledTopology
from ._publish import PublishedDevice
from .kubelet import DeviceHealthBoard, Health

log = logging.getLogger("plugins.coordinator.kubernetes")

DEFAULT_INTERVAL_S: Final = 10.0


def plugins_of(
    device: PublishedDevice, topologies: Mapping[str, CompiledTopology]
) -> frozenset[str]:
    """The logical plugins a root step could prepare ``device`` with."""
    found = set()
    for compiled in topologies.values():
        for step in compiled.roots():
            wanted = step.descriptor.preparation.device_type
            if wanted is not None and device.device_type != wanted:
                continue
            if device.policy is not None and device.policy.supports(step.plugin) is None:
                continue
            found.add(step.plugin)
    return frozenset(found)


class PluginHealthWatch:
    """Keeps ``board`` current for ``devices`` by asking the plugins in a thread."""

    def __init__(
        self,
        clients: Mapping[str, PluginClient],
        devices: Sequence[PublishedDevice],
        topologies: Mapping[str, CompiledTopology],
        pool: str,
        board: DeviceHealthBoard,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
    ) -> None:
        self._clients = dict(clients)
        self._serving = {d.name: plugins_of(d, topologies) for d in devices}
        self._pool = pool
        self._board = board
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def plugin_health(self) -> dict[str, Health]:
        """Each plugin's word now (one GetInfo each)."""
        found: dict[str, Health] = {}
        for name in sorted({p for ps in self._serving.values() for p in ps}):
            client = self._clients.get(name)
            if client is None:
                found[name] = "Unknown"
                continue
            try:
                info = client.get_info()
            except PluginCallError as exc:
                log.info("health: plugin %s does not answer: %s", name, exc)
                found[name] = "Unknown"
                continue
            found[name] = "Healthy" if info.ready and not info.fault else "Unhealthy"
        return found

    def refresh(self) -> None:
        """One round: every device's health from its plugins'."""
        plugins = self.plugin_health()
        for device, serving in sorted(self._serving.items()):
            if not serving:
                continue  # no configured topology can use it: nothing to say
            words = {plugins[p] for p in serving}
            health: Health = (
                "Unhealthy"
                if "Unhealthy" in words
                else "Unknown"
                if "Unknown" in words
                else "Healthy"
            )
            self._board.set(self._pool, device, health)

    def start(self) -> None:
        self.refresh()
        self._thread = threading.Thread(target=self._run, name="device-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.refresh()
            except Exception:  # the stream keeps its last word; the next round tries again
                log.exception("health: refresh failed")
