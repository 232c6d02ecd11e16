"""The plugin registration service the kubelet's plugin watcher calls.

The watcher sees our socket in its registry directory, asks ``GetInfo``, validates the
answer and reports with ``NotifyRegistrationStatus``. It does that again whenever it
sees the socket anew (a kubelet restart, a re-created socket), and retries a failed
registration, so both calls are answered any number of times and every verdict is
kept. A failure is the kubelet's word that it will not call us: it is logged as an
error with the kubelet's reason and counted, and the coordinator can read both.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import grpc

from plugins.api.kubelet.pluginregistration.v1 import registration_pb2 as pb
from plugins.api.kubelet.pluginregistration.v1 import registration_pb2_grpc as pb_grpc

log = logging.getLogger("plugins.coordinator.kubelet")

PLUGIN_TYPE: Final = "DRAPlugin"
SUPPORTED_VERSIONS: Final = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
"""The DRA services served at the endpoint, the newest first (the kubelet picks one)."""


@dataclass(frozen=True)
class RegistrationEvent:
    """One ``NotifyRegistrationStatus`` from the kubelet."""

    registered: bool
    error: str
    at: float
    """``time.monotonic()`` when it arrived."""


class RegistrationServicer(pb_grpc.RegistrationServicer):
    """``pluginregistration.Registration`` for one DRA driver whose service is at
    ``endpoint``."""

    def __init__(self, driver: str, endpoint: str) -> None:
        self._info = pb.PluginInfo(
            type=PLUGIN_TYPE,
            name=driver,
            endpoint=endpoint,
            supported_versions=SUPPORTED_VERSIONS,
        )
        self._changed = threading.Condition()
        self._events: list[RegistrationEvent] = []
        self._on_first_registered: Callable[[], None] | None = None

    def on_first_registered(self, action: Callable[[], None]) -> None:
        """Run ``action`` in a thread of its own once the kubelet first registers us."""
        with self._changed:
            self._on_first_registered = action

    @property
    def events(self) -> tuple[RegistrationEvent, ...]:
        with self._changed:
            return tuple(self._events)

    @property
    def failures(self) -> int:
        """How many times the kubelet refused the registration."""
        with self._changed:
            return sum(1 for e in self._events if not e.registered)

    @property
    def registered(self) -> bool:
        """True if the kubelet's latest verdict is a success."""
        with self._changed:
            return bool(self._events) and self._events[-1].registered

    def wait_for_verdicts(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` verdicts have arrived; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self._events) >= count, timeout)

    def wait_registered(self, timeout: float) -> bool:
        """Wait until the latest verdict is a success; False on timeout."""
        with self._changed:
            return self._changed.wait_for(
                lambda: bool(self._events) and self._events[-1].registered, timeout
            )

    def GetInfo(self, request: pb.InfoRequest, context: grpc.ServicerContext) -> pb.PluginInfo:
        log.debug("kubelet asked for the plugin info of %s", self._info.name)
        response = pb.PluginInfo()
        response.CopyFrom(self._info)
        return response

    def NotifyRegistrationStatus(
        self, request: pb.RegistrationStatus, context: grpc.ServicerContext
    ) -> pb.RegistrationStatusResponse:
        event = RegistrationEvent(
            registered=request.plugin_registered, error=request.error, at=time.monotonic()
        )
        with self._changed:
            self._events.append(event)
            failures = sum(1 for e in self._events if not e.registered)
            self._changed.notify_all()
            action = self._on_first_registered if event.registered else None
            if action is not None:
                self._on_first_registered = None
        if action is not None:  # not on the kubelet's call: it waits for our answer
            threading.Thread(target=action, name="registered", daemon=True).start()
        if event.registered:
            log.info("the kubelet registered DRA driver %s", self._info.name)
        else:
            log.error(
                "the kubelet refused to register DRA driver %s (refusal %d): %s",
                self._info.name,
                failures,
                event.error or "(no reason given)",
            )
        return pb.RegistrationStatusResponse()
