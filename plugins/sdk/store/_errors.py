"""Errors of the journal store, rooted in the SDK's error hierarchy."""

from __future__ import annotations

from pathlib import Path

from .._errors import Code, DataLoss, FailedPrecondition, NetworkPluginError, Unavailable


class StoreError(NetworkPluginError):
    """The store was misused or cannot provide its guarantees; a bug or a broken host."""

    code = Code.INTERNAL


class StoreLocked(StoreError):
    """Another writer (this process or another one) holds the state directory.

    ``waited_s``: how long the opener waited for it (0: it did not wait)."""

    def __init__(self, state_dir: Path, holder_pid: int | None, *, waited_s: float = 0.0) -> None:
        holder = f"pid {holder_pid}" if holder_pid is not None else "an unknown pid"
        waited = (
            f"; still held after waiting {waited_s:g}s for it, nothing was changed"
            if waited_s > 0
            else ""
        )
        super().__init__(
            f"journal store {state_dir} is already open by another writer ({holder}){waited}",
            details={"state_dir": str(state_dir), "holder_pid": str(holder_pid or "")},
        )
        self.state_dir = state_dir
        self.holder_pid = holder_pid
        self.waited_s = waited_s


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


class JournalFormatUnsupported(FailedPrecondition):
    """The journal is intact but written in a format this build cannot serve: refused.

    A store format newer than this build's (or one never released), or records of an
    effect format this build cannot execute and undo (written by a newer build). Unlike
    ``JournalUnavailable`` nothing is wrong with the journal: the build is too old for
    it. So the service does not serve without it (every scope ``DATA_LOSS``) but
    refuses to start, with this one line, and leaves every byte of it as it was: the
    release that wrote it (or a later one) serves it again.
    """

    def __init__(
        self, db: Path, what: str, found: int | tuple[int, ...], supported: tuple[int, ...]
    ) -> None:
        found_text = ", ".join(map(str, found)) if isinstance(found, tuple) else str(found)
        supported_text = ", ".join(map(str, supported)) or "none"
        if what == "store format":
            newest = max(supported, default=0)
            why = (
                "newer than this build"
                if isinstance(found, int) and found > newest
                else "not a released one"
            )
            reason = (
                f"store format {found_text} ({why}; this build reads store format {supported_text})"
            )
        else:
            reason = (
                f"records of effect format {found_text} (this build executes and undoes "
                f"effect format {supported_text})"
            )
        super().__init__(
            f"journal {db}: {reason}; refused, the journal was left unchanged (serve it with "
            "the release that wrote it or a later one)",
            details={"journal": str(db), "found": found_text, "supported": supported_text},
        )
        self.db = db
        self.what = what
        self.found = found
        self.supported = supported
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
