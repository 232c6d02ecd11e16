"""Stop a program on SIGTERM or SIGINT, whichever thread the signal lands on.

A Python-level handler that sets the stop event itself fails in two ways, both seen as
a SIGTERM'd service that never exited (nor did its shutdown watchdog, which waits on
the same event):

- The handler runs in the main thread between two bytecodes, wherever that thread
  is: also inside ``threading.Event.wait()`` while it holds the event's own
  (non-reentrant) lock. ``Event.set()`` then waits forever for a lock its own thread
  holds.
- The kernel may deliver a process's signal to any of its threads (gRPC's among
  them). The C-level handler then only flags it; the main thread, asleep in the
  event's lock, is not woken, and runs no Python handler until it wakes for some
  other reason: never, if it waits for nothing but that event.

:class:`SignalStop` installs a handler that does nothing at the Python level and
points ``signal.set_wakeup_fd`` at a pipe, which CPython's C-level handler writes the
signal's number to from whichever thread received it. A relay thread reads the pipe
and sets the event.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

__all__ = ["STOP_SIGNALS", "SignalStop"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""The signals that ask a service (or the fake kernel) to stop gracefully."""

_CLOSED = 0  # no signal has number 0: the byte close() writes to end the relay

_Handler = Callable[[int, FrameType | None], Any] | int


def _ignore_at_python_level(signum: int, frame: FrameType | None) -> None:
    """Installed so that the C-level handler runs (and writes the wakeup pipe) rather
    than the default action; the relay thread does the work."""


class SignalStop:
    """While installed, each of ``signals`` sets ``stop`` (from a relay thread).

    The process has one wakeup fd: install one ``SignalStop`` at a time, and none
    beside an asyncio loop in the main thread.
    """

    def __init__(
        self, stop: threading.Event, signals: Sequence[signal.Signals] = STOP_SIGNALS
    ) -> None:
        if not signals:
            raise ValueError("SignalStop needs at least one signal")
        self._stop = stop
        self._signals = tuple(signals)
        self._previous: dict[signal.Signals, _Handler] = {}
        self._previous_wakeup_fd = -1
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)  # set_wakeup_fd requires it
        self._relay = threading.Thread(target=self._forward, name="signal-stop", daemon=True)

    @classmethod
    def install(
        cls, stop: threading.Event, signals: Sequence[signal.Signals] = STOP_SIGNALS
    ) -> SignalStop:
        """Install the handlers (from the main thread, as ``signal.signal`` requires)."""
        installed = cls(stop, signals)
        installed._relay.start()
        installed._previous_wakeup_fd = signal.set_wakeup_fd(installed._write)
        for signum in installed._signals:
            previous = signal.signal(signum, _ignore_at_python_level)
            installed._previous[signum] = previous if previous is not None else signal.SIG_DFL
        return installed

    def _forward(self) -> None:
        while True:
            arrived = os.read(self._read, 64)
            # The pipe carries every signal that has a Python handler, not only ours.
            if any(byte in self._signals for byte in arrived):
                self._stop.set()
            if not arrived or _CLOSED in arrived:
                return

    def close(self) -> None:
        """Put the previous handlers and wakeup fd back, end the relay (main thread)."""
        if self._read < 0:
            return
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
        signal.set_wakeup_fd(self._previous_wakeup_fd)
        if self._relay.is_alive():
            os.write(self._write, bytes([_CLOSED]))
            self._relay.join()
        os.close(self._read)
        os.close(self._write)
        self._read = self._write = -1
