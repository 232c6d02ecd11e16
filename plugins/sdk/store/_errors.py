"""Errors of the journal store, rooted in the SDK's error hierarchy."""

from __future__ import annotations

from pathlib import Path

from .._errors import Code, NetworkPluginError, Unavailable


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


class JournalUnavailable(Unavailable):
    """The journal exists (or existed) but cannot be used; it is never recreated.

    A fresh empty journal would report every earlier operation absent, which is
    not proof of a clean host. Resources stay unavailable until an operator
    restores the journal or reconciles the node.
    """

    def __init__(self, state_dir: Path, reason: str) -> None:
        super().__init__(
            f"journal in {state_dir} is unavailable: {reason}; it was not recreated "
            "(restore it or reconcile the node before serving)",
            details={"state_dir": str(state_dir), "reason": reason},
        )
        self.state_dir = state_dir
        self.reason = reason
