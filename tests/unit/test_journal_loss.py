"""A journal that lost acknowledged commits, was replaced or altered is refused, never served.

The writer is a real process killed by SIGKILL after its writes were acknowledged, so
the ``-wal`` file is left exactly as a crash leaves it (a clean close would checkpoint
and delete it). Then the state directory is damaged the way an operator, a restore
script or a failing disk would, and the journal is opened again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from plugins.sdk import DataLoss
from plugins.sdk.store import JournalUnavailable, Store, _integrity

from ..journal_damage import replace_once, sqlite_backup
from .test_store import P, insert, op, snapshot

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 30.0

# Opens the store, acknowledges one write per line read from stdin, and answers each
# with "ack <n>" only after Store.write returned (the commit is durable).
_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from plugins.sdk.store import Store
    from tests.unit.test_store import insert, op

    store = Store.open(Path(sys.argv[1]), runtime_dir=Path(sys.argv[2]))
    print("open", flush=True)
    for line in sys.stdin:
        insert(store, op(line.strip()))
        print("ack", line.strip(), flush=True)
    """
)


class Writer:
    """A journal writer process that is only ever stopped by SIGKILL."""

    def __init__(self, state_dir: Path, runtime_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(state_dir), str(runtime_dir)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._line() == "open"

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()  # blocks until the child answers

    def acknowledge(self, operation_id: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(operation_id + "\n")
        self.proc.stdin.flush()
        assert self._line() == f"ack {operation_id}"

    def sigkill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "state", tmp_path / "run"


def crashed_after(state_dir: Path, runtime_dir: Path, before_call: Callable[[], None]) -> None:
    """Acknowledge op-1, run ``before_call``, acknowledge op-2 and op-3, then SIGKILL."""
    writer = Writer(state_dir, runtime_dir)
    try:
        writer.acknowledge("op-1")
        before_call()
        writer.acknowledge("op-2")
        writer.acknowledge("op-3")
    finally:
        writer.sigkill()
    assert (state_dir / "journal.db-wal").exists()  # a crash, not a clean close


def refused(state_dir: Path, runtime_dir: Path, match: str) -> JournalUnavailable:
    before = snapshot(state_dir)
    with pytest.raises(JournalUnavailable, match=match) as info:
        Store.open(state_dir, runtime_dir=runtime_dir)
    after = snapshot(state_dir)
    for volatile in ("writer.lock", "journal.db-shm"):  # a lock and SQLite's shared-memory index
        assert (volatile in before) == (volatile in after) or volatile == "writer.lock"
        before.pop(volatile, None)
        after.pop(volatile, None)
    assert after == before, "a refused journal is left exactly as it was found"
    assert isinstance(info.value, DataLoss)
    assert "\n" not in str(info.value)  # one line for the log
    return info.value


def test_intact_journal_after_sigkill_reopens_with_every_acknowledged_write(
    dirs: tuple[Path, Path],
) -> None:
    state_dir, runtime_dir = dirs
    crashed_after(state_dir, runtime_dir, lambda: None)
    with Store.open(state_dir, runtime_dir=runtime_dir) as store:
        ids = [o.operation_id for o in store.read(lambda r: r.operations(P))]
        assert ids == ["op-1", "op-2", "op-3"]


@pytest.mark.parametrize("sidecars", [("-wal",), ("-wal", "-shm")], ids=["wal", "wal+shm"])
def test_deleted_wal_is_lost_commits(dirs: tuple[Path, Path], sidecars: tuple[str, ...]) -> None:
    state_dir, runtime_dir = dirs
    crashed_after(state_dir, runtime_dir, lambda: None)
    for suffix in sidecars:
        (state_dir / f"journal.db{suffix}").unlink()
    error = refused(state_dir, runtime_dir, "were acknowledged in this boot")
    assert "-wal file was lost" in error.reason


def test_journal_replaced_by_an_older_copy(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    state_dir, runtime_dir = dirs
    copy = tmp_path / "backup.db"
    crashed_after(state_dir, runtime_dir, lambda: sqlite_backup(state_dir / "journal.db", copy))
    for suffix in ("-wal", "-shm"):
        (state_dir / f"journal.db{suffix}").unlink()
    shutil.copyfile(copy, state_dir / "journal.db")
    refused(state_dir, runtime_dir, "replaced by an older copy")


def test_every_journal_file_deleted_is_not_recreated(dirs: tuple[Path, Path]) -> None:
    state_dir, runtime_dir = dirs
    crashed_after(state_dir, runtime_dir, lambda: None)
    for name in ("journal.db", "journal.db-wal", "journal.db-shm", "journal.id"):
        (state_dir / name).unlink()
    error = refused(state_dir, runtime_dir, "its files .* are gone")
    assert "a fresh journal would report those operations absent" in error.reason
    assert not (state_dir / "journal.db").exists()


def test_a_different_journal_in_its_place_is_refused(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    state_dir, runtime_dir = dirs
    crashed_after(state_dir, runtime_dir, lambda: None)
    other = tmp_path / "other"
    Store.open(other).close()
    for name in ("journal.db", "journal.db-wal", "journal.db-shm", "journal.id"):
        (state_dir / name).unlink(missing_ok=True)
        if (other / name).exists():
            shutil.copyfile(other / name, state_dir / name)
    refused(state_dir, runtime_dir, "the journal was replaced")


def test_a_lease_from_an_earlier_boot_is_stale(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a reboot the kernel objects are gone too: the old count proves nothing."""
    state_dir, runtime_dir = dirs
    crashed_after(state_dir, runtime_dir, lambda: None)
    (state_dir / "journal.db-wal").unlink()
    (lease,) = runtime_dir.iterdir()
    acknowledged = int(lease.read_text().split("commits=")[1].split()[0])
    monkeypatch.setattr("plugins.sdk.store._lease.boot_id", lambda: "another-boot")
    with Store.open(state_dir, runtime_dir=runtime_dir) as store:
        # Opened although it holds fewer commits than the old boot's lease says.
        assert store.durable_commits < acknowledged


def test_the_lease_never_leads_the_journal(dirs: tuple[Path, Path]) -> None:
    state_dir, runtime_dir = dirs
    with Store.open(state_dir, runtime_dir=runtime_dir) as store:
        for i in range(5):
            insert(store, op(f"op-{i}"))
        commits = store.durable_commits
    (lease,) = runtime_dir.iterdir()
    assert f"commits={commits:020d}" in lease.read_text()
    assert oct(lease.stat().st_mode & 0o777) == "0o600"
    assert oct(runtime_dir.stat().st_mode & 0o777) == "0o700"
    with Store.open(state_dir, runtime_dir=runtime_dir) as store:
        assert store.durable_commits == commits


def test_garbled_lease_is_refused_with_the_way_out(dirs: tuple[Path, Path]) -> None:
    state_dir, runtime_dir = dirs
    Store.open(state_dir, runtime_dir=runtime_dir).close()
    (lease,) = runtime_dir.iterdir()
    lease.write_text("not a lease\n")
    error = refused(state_dir, runtime_dir, "lease .* is unreadable")
    assert "delete it only if the journal is known to be complete" in error.reason


# -- record checksums ---------------------------------------------------------------------


def test_flipped_bytes_in_a_record_make_it_unavailable_and_never_replayed(
    dirs: tuple[Path, Path],
) -> None:
    state_dir, runtime_dir = dirs
    with Store.open(state_dir, runtime_dir=runtime_dir) as store:
        insert(store, op("op-1", scope="att-1"))
        insert(store, op("op-2", scope="att-2"))
    # A clean close checkpoints: both records now live in journal.db itself, whose
    # pages SQLite does not checksum.
    assert not (state_dir / "journal.db-wal").exists()
    replace_once(state_dir / "journal.db", '{"op": "op-1"}', '{"op": "op-X"}')
    with Store.open(state_dir, runtime_dir=runtime_dir) as store:
        (damaged,) = store.damaged
        assert (damaged.table, damaged.key, damaged.scope) == ("operations", f"{P}/op-1", "att-1")
        with pytest.raises(
            JournalUnavailable, match=f"operations record {P}/op-1 fails its checksum"
        ):
            store.read(lambda r: r.operation(P, "op-1"))
        with pytest.raises(JournalUnavailable, match="fails its checksum"):
            store.read(lambda r: r.operations(P, scope="att-1"))
        # Other scopes are served; recovery never sees the altered record.
        assert store.read(lambda r: r.operation(P, "op-2")) is not None
        assert [o.operation_id for o in store.read(lambda r: r.nonterminal_operations())] == [
            "op-2"
        ]


def test_checksums_cover_every_table(dirs: tuple[Path, Path]) -> None:
    state_dir, _ = dirs
    from plugins.sdk.store import ScopeRecord

    from .test_store import eff

    with Store.open(state_dir) as store:
        insert(store, op("op-1"), (eff("op-1", "e0", 0),))
        store.write(
            lambda t: t.put_scope(
                ScopeRecord(partition=P, scope="att-1/vlan0", generation=1, epoch=1)
            )
        )
    conn = sqlite3.connect(state_dir / "journal.db")
    try:
        for table, column in (
            ("scopes", "epoch"),
            ("effects", "attempts"),
            ("operations", "epoch"),
        ):
            conn.execute(f"UPDATE {table} SET {column} = {column} + 7")
        conn.commit()
    finally:
        conn.close()
    with Store.open(state_dir) as store:
        assert sorted(d.table for d in store.damaged) == ["effects", "operations", "scopes"]


def test_a_remembered_checksum_is_the_one_computing_it_gives() -> None:
    """Checksums of recent rows are remembered by exact values: 1, 1.0 and True are equal
    in Python but not in JSON, so none of them is ever answered with another's."""

    def computed(values: tuple[object, ...]) -> str:
        body = json.dumps(["t", *values], separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(body.encode("ascii")).hexdigest()[:32]

    rows: list[tuple[object, ...]] = [(1,), (1.0,), (True,), (0,), (0.0,), (-0.0,), (False,)]
    rows += [("1",), (None,), ("é",)]
    assert len({computed(row) for row in rows}) == len(rows)
    for order in (rows, rows[::-1], rows):
        for row in order:
            assert _integrity.checksum("t", row) == computed(row)


def test_a_journal_without_a_meta_table_is_refused(dirs: tuple[Path, Path]) -> None:
    state_dir, _ = dirs
    with Store.open(state_dir) as store:
        insert(store, op("op-1"))
    assert os.path.exists(state_dir / "journal.db")
