"""The single-writer lock of a state directory: ``flock`` on ``writer.lock``."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from ._errors import StoreLocked

LOCK_NAME = "writer.lock"


class WriterLock:
    """An exclusive, non-blocking ``flock`` held for the lifetime of a Store.

    ``flock`` locks belong to the open file description, so a second open in the
    same process conflicts exactly like one in another process, and the kernel
    drops the lock when the holder dies (also on SIGKILL). The file is never
    deleted: deleting lock files lets two openers lock two different inodes.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, state_dir: Path) -> WriterLock:
        path = state_dir / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise StoreLocked(state_dir, holder) from None
            raise
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
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


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
