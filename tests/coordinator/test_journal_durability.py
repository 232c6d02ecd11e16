"""The coordinator's journal on the durable core: lost, truncated or rolled back is refused.

A coordinator that forgot what it requested or who holds what would hand a resource
out twice, so its journal gets the plugin journal's guarantees: identity, checksums,
the lease of this boot, and never a silent fresh start.
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from plugins.coordinator._journal import Call, CoordinatorJournal
from plugins.sdk import DataLoss
from plugins.sdk.store import JournalUnavailable

from ..journal_damage import sqlite_backup

REPO = Path(__file__).resolve().parents[2]

# Records two calls, answers "ack" after each durable commit, then waits for SIGKILL.
_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from plugins.coordinator._journal import Call, CoordinatorJournal

    journal = CoordinatorJournal(Path(sys.argv[1]), runtime_dir=Path(sys.argv[2]))
    for line in sys.stdin:
        op = line.strip()
        journal.record_call(Call(op, "att-1", op, "p", "ConnectNetwork", 1, {}, "requested", None, None))
        print("ack", op, flush=True)
    """
)


def _crashed_writer(state: Path, run: Path, ops: list[str], backup: Path | None = None) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(state), str(run)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        for i, op in enumerate(ops):
            if i == 1 and backup is not None:
                sqlite_backup(state / "journal.db", backup)
            proc.stdin.write(op + "\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == f"ack {op}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc.stdin.close()
        proc.stdout.close()
    assert (state / "journal.db-wal").exists()


def _refused(state: Path, run: Path, match: str) -> None:
    before = sorted(p.name for p in state.iterdir()) if state.exists() else []
    with pytest.raises(JournalUnavailable, match=match) as info:
        CoordinatorJournal(state, runtime_dir=run)
    assert isinstance(info.value, DataLoss)
    after = sorted(p.name for p in state.iterdir()) if state.exists() else []
    assert [n for n in after if n != "writer.lock"] == [n for n in before if n != "writer.lock"]


def test_a_sigkilled_coordinator_reopens_with_every_acknowledged_call(tmp_path: Path) -> None:
    state, run = tmp_path / "state", tmp_path / "run"
    _crashed_writer(state, run, ["op-1", "op-2"])
    journal = CoordinatorJournal(state, runtime_dir=run)
    try:
        assert [c.operation_id for c in journal.calls()] == ["op-1", "op-2"]
    finally:
        journal.close()


def test_deleted_coordinator_journal_is_not_recreated(tmp_path: Path) -> None:
    state, run = tmp_path / "state", tmp_path / "run"
    _crashed_writer(state, run, ["op-1", "op-2"])
    for name in ("journal.db", "journal.db-wal", "journal.db-shm", "journal.id"):
        (state / name).unlink()
    _refused(state, run, "its files .* are gone")


def test_truncated_coordinator_journal_is_refused(tmp_path: Path) -> None:
    state, run = tmp_path / "state", tmp_path / "run"
    _crashed_writer(state, run, ["op-1", "op-2"])
    for suffix in ("-wal", "-shm"):
        (state / f"journal.db{suffix}").unlink()
    with (state / "journal.db").open("r+b") as f:
        f.truncate(100)
    _refused(state, run, "truncated")


def test_coordinator_journal_replaced_by_an_older_copy_is_refused(tmp_path: Path) -> None:
    state, run = tmp_path / "state", tmp_path / "run"
    copy = tmp_path / "backup.db"
    _crashed_writer(state, run, ["op-1", "op-2", "op-3"], backup=copy)
    for suffix in ("-wal", "-shm"):
        (state / f"journal.db{suffix}").unlink()
    shutil.copyfile(copy, state / "journal.db")
    _refused(state, run, "replaced by an older copy")


def test_an_altered_call_is_never_returned(tmp_path: Path) -> None:
    journal = CoordinatorJournal(tmp_path)
    journal.record_call(
        Call("op-1", "att-1", "s", "p", "ConnectNetwork", 1, {}, "requested", None, None)
    )
    journal.close()
    conn = sqlite3.connect(tmp_path / "journal.db")
    conn.execute("UPDATE calls SET state = 'succeeded'")
    conn.commit()
    conn.close()
    journal = CoordinatorJournal(tmp_path)
    try:
        assert [d.table for d in journal.store.damaged] == ["calls"]
        with pytest.raises(JournalUnavailable, match="calls record op-1/att-1 fails its checksum"):
            journal.calls()
    finally:
        journal.close()
