"""Storage faults: the seam through which tests make the journal's storage fail.

SQLite reports an ``EIO``, ``ENOSPC`` or ``EROFS`` met while writing or syncing as an
error of the statement, ``BEGIN`` or ``COMMIT`` that needed it. The store asks a
``StorageFaults`` object before each of those calls, so a test can fail any one of
them, or all of them for as long as a fault lasts, exactly where a disk would.
Production uses ``NO_FAULTS``, which does nothing.
"""

from __future__ import annotations

import errno
import sqlite3
from typing import Final, Protocol

SITES: Final = ("begin", "statement", "commit", "reopen")
"""Where the store consults its faults: each transaction's BEGIN, every write statement,
each COMMIT (its fsync), and the check that clears a fault (``Store.clear_fault``)."""

_SQLITE_NAMES: Final = {
    errno.EIO: ("SQLITE_IOERR", "disk I/O error"),
    errno.ENOSPC: ("SQLITE_FULL", "database or disk is full"),
    errno.EROFS: ("SQLITE_READONLY", "attempt to write a readonly database"),
}


class StorageFaults(Protocol):
    def check(self, site: str) -> None:
        """Raise (``storage_failure``) to make the storage fail at ``site``."""
        ...


class _NoFaults:
    def check(self, site: str) -> None:
        return None


NO_FAULTS: Final[StorageFaults] = _NoFaults()


def storage_failure(code: int, site: str) -> sqlite3.OperationalError:
    """The error SQLite raises when the OS fails one of its calls with ``code``."""
    name, message = _SQLITE_NAMES[code]
    error = sqlite3.OperationalError(f"{message} (injected {errno.errorcode[code]} at {site})")
    error.sqlite_errorname = name
    return error
