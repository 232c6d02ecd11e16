"""The single-writer lock of a state directory: ``flock`` on ``writer.lock``.

A new instance of a program (a rolling update, a restart while the old process is
still stopping) may find the lock held by the instance it replaces. It then waits for
it, bounded: a thread blocks in ``flock(LOCK_EX)`` and the caller waits on an event
with the deadline, so the lock is taken the moment the old holder releases it (or
dies: the kernel drops the lock of a dead process), with no polling. Past the deadline
the caller gets ``StoreLocked`` naming the holder, and nothing in the state directory
was touched. The blocked thread cannot be interrupted; it is told that nobody wants
the lock any more, and drops it at once if it ever gets it.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
import time
from pathlib import Path

from ._errors import StoreLocked

LOCK_NAME = "writer.lock"

log = logging.getLogger("plugins.sdk.store")

_HELD_ERRNOS = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES)


class WriterLock:
    """An exclusive ``flock`` held for the lifetime of a Store.

    ``flock`` locks belong to the open file description, so a second open in the
    same process conflicts exactly like one in another process, and the kernel
    drops the lock when the holder dies (also on SIGKILL). The file is never
    deleted: deleting lock files lets two openers lock two different inodes.
    The holder's pid is written into it (``networkplugin-ctl`` and a waiting
    instance name it).
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, state_dir: Path, *, wait_s: float = 0.0) -> WriterLock:
        """Take the lock of ``state_dir`` (its file created if missing).

        Held by another process (or another open in this one): wait up to ``wait_s``
        seconds for it, saying so in one log line when the wait starts and one when it
        ends; then ``StoreLocked`` naming the holder's pid.
        """
        lock = cls._take(state_dir, wait_s=wait_s, create=True)
        assert lock is not None  # created: there is always a file to lock
        return lock

    @classmethod
    def await_holder(cls, state_dir: Path, *, wait_s: float) -> WriterLock | None:
        """Take the lock of ``state_dir`` if its file exists, waiting for a holder as
        ``acquire`` does; None (and nothing created) when it does not exist: nobody
        ever wrote there, so there is nobody to wait for.

        A program calls this before it binds anything its previous instance may still
        hold (a metrics port, its sockets), then hands the lock to ``Store.open``.
        """
        return cls._take(state_dir, wait_s=wait_s, create=False)

    @classmethod
    def _take(cls, state_dir: Path, *, wait_s: float, create: bool) -> WriterLock | None:
        path = state_dir / LOCK_NAME
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:
            if create:
                raise
            return None
        try:
            if not _try_lock(fd):
                waited, fd = fd, -1
                try:
                    fd = _wait_for(path, state_dir, waited, wait_s)
                finally:
                    os.close(waited)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock; idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        finally:
            os.close(fd)


def _try_lock(fd: int) -> bool:
    """Take the lock without waiting; False if someone holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in _HELD_ERRNOS:
            return False
        raise
    return True


def _wait_for(path: Path, state_dir: Path, fd: int, wait_s: float) -> int:
    """Wait up to ``wait_s`` for the lock on ``fd`` (held by another): the descriptor
    holding it, or ``StoreLocked``. ``fd`` stays the caller's to close either way."""
    holder = _read_pid(fd)
    if wait_s <= 0:
        raise StoreLocked(state_dir, holder)
    log.warning(
        "writer lock %s is held by %s: waiting up to %gs for it to be released "
        "(a previous instance still stopping?)",
        path,
        _describe(holder),
        wait_s,
    )
    started = time.monotonic()
    waiter = _BlockingLock(path)
    if not waiter.wait(wait_s):
        raise StoreLocked(state_dir, _read_pid(fd) or holder, waited_s=wait_s)
    log.warning(
        "writer lock %s taken after %.1fs (%s released it)",
        path,
        time.monotonic() - started,
        _describe(holder),
    )
    return waiter.fd


class _BlockingLock:
    """A thread blocked in ``flock(LOCK_EX)`` on its own descriptor of the lock file.

    Its own open file description, so that a caller who gives up can close its
    descriptor at once while the thread stays blocked: the thread then closes its
    own the moment it gets the lock, which releases it again.
    """

    def __init__(self, path: Path) -> None:
        # A second open, not a dup: a dup shares the open file description, so the
        # caller's close could not be separated from the thread's lock. (The file is
        # never deleted or replaced, so the path names the same inode.)
        self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        self._decided = threading.Lock()
        self._abandoned = False
        self._failure: OSError | None = None
        self._done = threading.Event()
        threading.Thread(target=self._block, name="writer-lock-wait", daemon=True).start()

    def _block(self) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:
            self._failure = exc
        with self._decided:
            if self._abandoned:
                os.close(self.fd)  # nobody waits for it any more: drop it at once
                return
            self._done.set()

    def wait(self, timeout: float) -> bool:
        """True once the lock is ours (on ``self.fd``); False past ``timeout`` (the
        thread's descriptor is then its own to close). Interrupted (a signal's
        exception), nothing is left held either."""
        interrupted = True
        try:
            self._done.wait(timeout)
            interrupted = False
        finally:
            with self._decided:
                taken = self._done.is_set()
                if not taken:
                    self._abandoned = True
                elif interrupted:
                    os.close(self.fd)
        if not taken:
            return False
        if self._failure is not None:
            os.close(self.fd)
            raise self._failure
        return True


def _describe(pid: int | None) -> str:
    return f"pid {pid}" if pid is not None else "an unknown pid"


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
