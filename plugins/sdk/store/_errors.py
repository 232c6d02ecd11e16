"""Errors of the journal store, rooted in the SDK's error hierarchy."""

from __future__ import annotations

from pathlib import Path

from .._errors import Code, DataLoss, NetworkPluginError, Unavailable


class StoreError(NetworkPluginError):
    """The store was misused or cannot provide its guarantees; a bug or a broken host."""

    code = Code.INTERNAL


class StoreLocked(StoreError):
    """Another writer (this process or another one) holds the state directory."""

    def __init__(self, state_dir: Path, holder_pid: int | None) -> None:
        holder = f"pid {holder_pid}" if holder_pid is not None else "an unknown pid"
        super().__init__(
            f"journal store {state_dir} is already open by another writer ({holder})",
            details={"state_dir": str(state_dir), "holder_pid": str(holder_pid or "")},
        )
        self.state_dir = state_dir
        self.holder_pid = holder_pid


class StoreClosed(StoreError):
    """The store was closed or abandoned; the write was not committed."""


class JournalUnavailable(DataLoss):
    """The journal exists (or existed) but cannot be trusted; it is never recreated.

    Missing, corrupt, foreign, rolled back to an older copy, or a record that
    fails its checksum. A fresh empty journal would report every earlier
    operation absent, which is not proof of a clean host. The affected scopes
    stay unavailable (``DATA_LOSS``: retrying cannot help) until an operator
    restores the journal or reconciles the node.
    """

    def __init__(self, state_dir: Path, reason: str) -> None:
        super().__init__(
            f"journal in {state_dir} is damaged: {reason}; it was not recreated "
            "(restore it or reconcile the node before serving)",
            details={"state_dir": str(state_dir), "reason": reason},
        )
        self.state_dir = state_dir
        self.reason = reason


class JournalFault(Unavailable):
    """The journal's storage failed an I/O call (EIO, ENOSPC, EROFS...): nothing was lost.

    Transient from the client's point of view (``UNAVAILABLE``, retry later): the
    write that failed was not acknowledged, and the store serves again once the
    fault clears.
    """

    def __init__(self, state_dir: Path, reason: str) -> None:
        super().__init__(
            f"journal in {state_dir} cannot be written right now: {reason}; nothing "
            "acknowledged was lost, retry later",
            details={"state_dir": str(state_dir), "reason": reason},
        )
        self.state_dir = state_dir
        self.reason = reason


# SQLite result codes that mean the file's contents are damaged, not that a call failed.
_DAMAGE = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def storage_error(
    state_dir: Path, what: str, exc: BaseException | None, *, after: str = ""
) -> JournalFault | JournalUnavailable:
    """Classify a storage failure: damage is permanent, an I/O fault is transient."""
    if isinstance(exc, JournalUnavailable):
        return exc
    name = getattr(exc, "sqlite_errorname", "") or ""
    reason = f"{what} ({exc}){after}"
    if name.startswith(_DAMAGE):
        return JournalUnavailable(state_dir, reason)
    return JournalFault(state_dir, reason)
