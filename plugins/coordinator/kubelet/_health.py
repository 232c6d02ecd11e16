"""Device health for the kubelet: the ``v1alpha1.DRAResourceHealth`` stream.

The kubelet opens one ``NodeWatchResources`` stream per registered driver (when its
resource health feature is on) and treats each message as the driver's complete list;
a device it hears nothing of for its timeout becomes Unknown. So the servicer sends the
whole list at once, again on every change, and again every ``resend_s`` without one.

The source of the health is a ``HealthSource``: ``devices()`` and a version that moves
on every change (``wait_for_change``). Reading the version before the devices means a
change between the two is sent twice at worst, never lost. ``DeviceHealthBoard`` is a
ready in-memory source.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Final, Literal, Protocol

import grpc

from plugins.api.kubelet.drahealth.v1alpha1 import health_pb2 as pb
from plugins.api.kubelet.drahealth.v1alpha1 import health_pb2_grpc as pb_grpc

log = logging.getLogger("plugins.coordinator.kubelet")

Health = Literal["Healthy", "Unhealthy", "Unknown"]
HEALTH_STATES: Final[tuple[Health, ...]] = ("Healthy", "Unhealthy", "Unknown")
_WIRE: Final = {"Healthy": pb.HEALTHY, "Unhealthy": pb.UNHEALTHY, "Unknown": pb.UNKNOWN}


class HealthSource(Protocol):
    """The health of a driver's devices, and a version that moves when it changes."""

    def devices(self) -> Sequence[tuple[str, str, str]]:
        """Every device as ``(pool, device, health)``; health is one of ``HEALTH_STATES``."""
        ...

    def wait_for_change(self, seen: int, timeout: float) -> int:
        """The current version, once it differs from ``seen`` or after ``timeout`` s."""
        ...


class DeviceHealthBoard:
    """An in-memory ``HealthSource``: ``set`` a device's health, the stream follows."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._health: dict[tuple[str, str], Health] = {}
        self._version = 0

    def set(self, pool: str, device: str, health: Health) -> None:
        if health not in HEALTH_STATES:
            raise ValueError(
                f"device {pool}/{device}: health {health!r} is not one of "
                f"{', '.join(HEALTH_STATES)}"
            )
        with self._changed:
            if self._health.get((pool, device)) == health:
                return
            self._health[(pool, device)] = health
            self._version += 1
            self._changed.notify_all()

    def remove(self, pool: str, device: str) -> None:
        with self._changed:
            if self._health.pop((pool, device), None) is not None:
                self._version += 1
                self._changed.notify_all()

    def devices(self) -> list[tuple[str, str, str]]:
        with self._changed:
            return [(pool, device, h) for (pool, device), h in sorted(self._health.items())]

    def wait_for_change(self, seen: int, timeout: float) -> int:
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen, timeout)
            return self._version


def health_response(
    devices: Sequence[tuple[str, str, str]], now: int
) -> pb.NodeWatchResourcesResponse:
    """The complete list as the kubelet reads it; an unknown health word is sent as
    Unknown and logged (the stream goes on: one bad entry must not blind the kubelet)."""
    response = pb.NodeWatchResourcesResponse()
    for pool, device, health in devices:
        status = _WIRE.get(health)
        if status is None:
            log.warning(
                "device %s/%s: health %r is not one of %s; sent as Unknown",
                pool,
                device,
                health,
                ", ".join(HEALTH_STATES),
            )
            status = pb.UNKNOWN
        response.devices.add(
            device=pb.DeviceIdentifier(pool_name=pool, device_name=device),
            health=status,
            last_updated_time=now,
        )
    return response


class HealthServicer(pb_grpc.DRAResourceHealthServicer):
    """Streams ``source`` to each watcher until it leaves or ``close`` is called."""

    def __init__(
        self, source: HealthSource, *, resend_s: float = 10.0, poll_s: float = 0.5
    ) -> None:
        self._source = source
        self._resend_s = resend_s
        # How long a stream may go without noticing that it was cancelled or closed: the
        # source's wait cannot be interrupted from here.
        self._poll_s = poll_s
        self._closed = threading.Event()

    def close(self) -> None:
        """End every stream within ``poll_s`` (before the server stops)."""
        self._closed.set()

    def NodeWatchResources(
        self, request: pb.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.NodeWatchResourcesResponse]:
        version = self._source.wait_for_change(-1, 0.0)
        yield health_response(self._source.devices(), int(time.time()))
        last_sent = time.monotonic()
        while context.is_active() and not self._closed.is_set():
            current = self._source.wait_for_change(version, self._poll_s)
            if current != version or time.monotonic() - last_sent >= self._resend_s:
                version = current
                yield health_response(self._source.devices(), int(time.time()))
                last_sent = time.monotonic()
