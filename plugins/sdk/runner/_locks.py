"""Per-unit locks and the joining of duplicate calls: bounded by the work in flight.

A daemon serves scopes for months; an entry per scope ever seen would grow without
end. Each entry here exists only while someone holds, waits for or leads it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from .._errors import AlreadyExists

T = TypeVar("T")


class UnitLocks:
    """One lock per key, dropped when its last holder or waiter leaves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, partition: str, unit: str) -> Iterator[None]:
        key = (partition, unit)
        with self._lock:
            lock, users = self._entries.get(key, (threading.Lock(), 0))
            self._entries[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._lock:
                lock, users = self._entries[key]
                if users == 1:
                    del self._entries[key]
                else:
                    self._entries[key] = (lock, users - 1)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class _InFlight:
    """A running operation that duplicates of the same identity join."""

    def __init__(self, semantic: str) -> None:
        self.semantic = semantic
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class Joins:
    """A duplicate of a running operation (same id) waits for the leader's outcome."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], _InFlight] = {}

    def join_or_lead(self, key: tuple[str, str], semantic: str, work: Callable[[], T]) -> T:
        with self._lock:
            running = self._running.get(key)
            leader = running is None
            if running is None:
                running = self._running[key] = _InFlight(semantic)
        if not leader:
            if running.semantic != semantic:
                raise AlreadyExists(f"operation {key[1]} is running with different semantics")
            running.done.wait()
            if running.error is not None:
                raise running.error
            return running.result  # type: ignore[no-any-return]
        try:
            result = work()
            running.result = result
            return result
        except BaseException as exc:
            running.error = exc
            raise
        finally:
            with self._lock:
                del self._running[key]
            running.done.set()

    def __len__(self) -> int:
        with self._lock:
            return len(self._running)
