"""A real full disk under a running store: refused while full, served again once space is back.

The injected faults of tests/runner/test_io_faults.py reach every storage call; this
one checks the same classification against the real thing: the kernel's ENOSPC on a
tiny tmpfs, as SQLite reports it.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from plugins.sdk.store import JournalFault, Store

from .test_service_startup import tmpfs
from .test_store import P, insert, op

ATTEMPTS = 200


def _fill(directory: Path) -> Path:
    """Write a file until the file system is full; returns it (delete it to free the space)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        chunk = b"\0" * 4096
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return filler
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)


def test_a_full_disk_is_a_fault_that_clears_and_loses_nothing(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "fs", "mode=0700,size=1m"):
        state_dir = tmp_path / "fs" / "state"
        acknowledged: list[str] = []
        store = Store.open(state_dir, runtime_dir=tmp_path / "run")
        try:
            insert(store, op("before"))
            acknowledged.append("before")
            filler = _fill(tmp_path / "fs")
            refused: JournalFault | None = None
            for i in range(ATTEMPTS):  # the WAL grows until a page finds no room
                try:
                    insert(store, op(f"while-full-{i}", scope=f"att-{i}"))
                    acknowledged.append(f"while-full-{i}")
                except JournalFault as exc:
                    refused = exc
                    break
            assert refused is not None, f"{ATTEMPTS} writes fitted on a full disk"
            assert refused.retryable
            assert "full" in str(refused)
            filler.unlink()
            assert store.clear_fault()
            insert(store, op("after", scope="att-after"))
            acknowledged.append("after")
        finally:
            store.close()
        with Store.open(state_dir, runtime_dir=tmp_path / "run") as reopened:
            ids = [o.operation_id for o in reopened.read(lambda r: r.operations(P))]
        assert ids == acknowledged, "every acknowledged write, nothing unacknowledged"
