"""The durable journal store: pragmas, records, group commit, locking, refusal to recreate."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from plugins.sdk import AlreadyExists, CleanupStatus, DataLoss, EffectState, Hook, OperationState
from plugins.sdk.store import (
    NONTERMINAL_STATES,
    SCHEMA_VERSION,
    EffectRecord,
    JournalFault,
    JournalUnavailable,
    OperationRecord,
    Reader,
    ScopeRecord,
    Store,
    StoreClosed,
    StoreError,
    StoreLocked,
    Txn,
    _journal,
)
from plugins.sdk.store import _sqlite as sqlite_store

TIMEOUT = 30.0
REPO = Path(__file__).resolve().parents[2]
P = "links/vlan"


def op(
    operation_id: str,
    *,
    partition: str = P,
    scope: str = "att-1",
    hook: Hook = Hook.CONNECT_NETWORK,
    state: OperationState = OperationState.RUNNING,
    **fields: Any,
) -> OperationRecord:
    return OperationRecord(
        partition=partition,
        operation_id=operation_id,
        hook=hook,
        scope=scope,
        step="vlan0",
        semantic_digest=f"sem-{operation_id}",
        artifact_digest="sha256:artifact",
        contract_digest="sha256:contract",
        generation=1,
        epoch=1,
        request_json=f'{{"op": "{operation_id}"}}',
        state=state,
        **fields,
    )


def eff(operation_id: str, effect_id: str, position: int, *, partition: str = P) -> EffectRecord:
    return EffectRecord(
        partition=partition,
        operation_id=operation_id,
        effect_id=effect_id,
        position=position,
        kind="linux/create-vlan/v1",
    )


def insert(
    store: Store, record: OperationRecord, effects: tuple[EffectRecord, ...] = ()
) -> OperationRecord:
    return store.write(lambda txn: txn.insert_operation(record, effects))


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def store(state_dir: Path) -> Iterator[Store]:
    s = Store.open(state_dir)
    yield s
    s.close()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=20) as executor:
        yield executor


@contextmanager
def held_writer(store: Store, pool: ThreadPoolExecutor) -> Iterator[Future[None]]:
    """Occupy the writer thread with a write function blocked on an event we control.

    Writes submitted meanwhile queue up and run together in the next batch.
    """
    entered = threading.Event()
    release = threading.Event()

    def blocker(txn: Txn) -> None:
        entered.set()
        if not release.wait(TIMEOUT):
            raise TimeoutError("held_writer was never released")
        txn.put_scope(ScopeRecord(partition="hold", scope="hold", generation=1, epoch=1))

    future = pool.submit(store.write, blocker)
    assert entered.wait(TIMEOUT)
    try:
        yield future
    finally:
        release.set()


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def closed_journal(state_dir: Path, fill: Callable[[Store], object] | None = None) -> None:
    with Store.open(state_dir) as s:
        if fill is not None:
            fill(s)


def assert_unavailable_untouched(state_dir: Path, *, match: str) -> JournalUnavailable:
    before = snapshot(state_dir)
    with pytest.raises(JournalUnavailable, match=match) as info:
        Store.open(state_dir)
    after = snapshot(state_dir)
    before.pop("writer.lock", None)
    after.pop("writer.lock", None)
    assert after == before
    assert isinstance(info.value, DataLoss)  # permanent: retrying cannot help
    return info.value


# -- files and pragmas -----------------------------------------------------------------


def test_state_dir_is_created_0700_with_the_journal_files(tmp_path: Path) -> None:
    state_dir = tmp_path / "nested" / "state"
    with Store.open(state_dir) as s:
        assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
        names = {p.name for p in state_dir.iterdir()}
        assert {"journal.db", "journal.id", "writer.lock"} <= names
        assert "journal.db.init" not in names
        assert (state_dir / "journal.id").read_text().strip() == s.journal_id
        assert (state_dir / "writer.lock").read_text().strip() == str(os.getpid())
        assert s.state_dir == state_dir


def test_pragmas_take_effect(store: Store, state_dir: Path) -> None:
    fresh = sqlite3.connect(state_dir / "journal.db")
    try:
        assert fresh.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        (journal_id,) = fresh.execute("SELECT value FROM meta WHERE key = 'journal_id'").fetchone()
        (version,) = fresh.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    finally:
        fresh.close()
    assert journal_id == store.journal_id
    assert int(version) == SCHEMA_VERSION

    def writer_pragmas(txn: Txn) -> dict[str, object]:
        conn = txn._conn
        assert conn.isolation_level is None
        names = ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
        names += ("wal_autocheckpoint",)
        return {n: conn.execute(f"PRAGMA {n}").fetchone()[0] for n in names}

    assert store.write(writer_pragmas) == {
        "journal_mode": "wal",
        "synchronous": 2,  # FULL: every COMMIT fsyncs the WAL
        "busy_timeout": 5000,
        "foreign_keys": 1,
        "wal_autocheckpoint": 10_000,  # a backstop: the writer checkpoints when idle
    }

    def reader_pragmas(reader: Reader) -> dict[str, object]:
        names = ("journal_mode", "busy_timeout", "foreign_keys", "query_only")
        return {n: reader._conn.execute(f"PRAGMA {n}").fetchone()[0] for n in names}

    assert store.read(reader_pragmas) == {
        "journal_mode": "wal",
        "busy_timeout": 5000,
        "foreign_keys": 1,
        "query_only": 1,
    }


# -- records ---------------------------------------------------------------------------


def test_every_record_type_round_trips(store: Store) -> None:
    scope = ScopeRecord(partition=P, scope="att-1", generation=4, epoch=2)
    record = op(
        "op-1",
        plan_json='{"effects": []}',
        response_json='{"outputs": {}}',
        error_json='{"code": "ABORTED"}',
        target_operation_id="op-0",
        cleanup_status=CleanupStatus.PENDING,
    )
    effects = (eff("op-1", "create", 0), eff("op-1", "up", 1))

    def first(txn: Txn) -> OperationRecord:
        txn.put_scope(scope)
        return txn.insert_operation(record, effects)

    stored = store.write(first)
    assert stored == replace(record, seq=stored.seq)
    assert stored.seq > 0

    assert store.read(lambda r: r.scope(P, "att-1")) == scope
    assert store.read(lambda r: r.operation(P, "op-1")) == stored
    assert store.read(lambda r: r.effects(P, "op-1")) == list(effects)
    assert store.read(lambda r: r.scope(P, "nope")) is None
    assert store.read(lambda r: r.operation(P, "nope")) is None
    assert store.read(lambda r: r.effects(P, "nope")) == []

    fenced = replace(scope, generation=5, fence_operation_id="rm-1")
    done = replace(
        stored,
        state=OperationState.SUCCEEDED,
        response_json='{"outputs": {"interface": []}}',
        error_json=None,
        cleanup_status=None,
        epoch=3,
    )
    applied = replace(
        effects[0],
        state=EffectState.APPLIED,
        before_json='{"absent": true}',
        outputs_json='{"ifindex": 7}',
        detail="created",
        attempts=1,
    )

    def second(txn: Txn) -> None:
        txn.put_scope(fenced)
        txn.update_operation(done)
        txn.update_effect(applied)

    store.write(second)
    assert store.read(lambda r: r.scope(P, "att-1")) == fenced
    assert fenced.fenced
    assert not scope.fenced
    assert store.read(lambda r: r.operation(P, "op-1")) == done
    assert done.terminal
    assert store.read(lambda r: r.effects(P, "op-1")) == [applied, effects[1]]


def test_effects_come_back_in_position_order(store: Store) -> None:
    effects = (eff("op-1", "z", 2), eff("op-1", "a", 0), eff("op-1", "m", 1))
    insert(store, op("op-1"), effects)
    assert [e.effect_id for e in store.read(lambda r: r.effects(P, "op-1"))] == ["a", "m", "z"]


def test_seq_is_monotonic_insertion_order_and_filters_apply(store: Store) -> None:
    ids = ["c", "a", "d", "b"]
    scopes = ["s1", "s2", "s1", "s2"]
    hooks = [Hook.CONNECT_NETWORK, Hook.REMOVE_NETWORK, Hook.REMOVE_NETWORK, Hook.CONNECT_NETWORK]
    states = [
        OperationState.SUCCEEDED,
        OperationState.RUNNING,
        OperationState.FAILED,
        OperationState.RUNNING,
    ]
    seqs = [
        insert(store, op(i, scope=s, hook=h, state=st)).seq
        for i, s, h, st in zip(ids, scopes, hooks, states, strict=True)
    ]
    other = insert(store, op("x", partition="links/macvlan")).seq
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 4
    assert other > seqs[-1]

    def names(records: list[OperationRecord]) -> list[str]:
        return [r.operation_id for r in records]

    assert names(store.read(lambda r: r.operations(P))) == ids
    assert names(store.read(lambda r: r.operations(P, scope="s1"))) == ["c", "d"]
    assert names(store.read(lambda r: r.operations(P, hook=Hook.REMOVE_NETWORK))) == ["a", "d"]
    assert names(store.read(lambda r: r.operations(P, states={OperationState.RUNNING}))) == [
        "a",
        "b",
    ]
    assert names(
        store.read(
            lambda r: r.operations(
                P, scope="s2", hook=Hook.CONNECT_NETWORK, states=[OperationState.RUNNING]
            )
        )
    ) == ["b"]
    assert store.read(lambda r: r.operations(P, states=())) == []
    assert names(store.read(lambda r: r.operations("links/macvlan"))) == ["x"]


def test_operations_filter_by_allocation_root_and_excluded_scope(store: Store) -> None:
    def request(root: str | None) -> str:
        return (
            '{"allocation": null}' if root is None else f'{{"allocation": {{"root_id": "{root}"}}}}'
        )

    rows = [("a", "s1", "r1"), ("b", "s2", "r2"), ("c", "s3", "r1"), ("d", "s4", None)]
    for i, scope, root in rows:
        insert(store, replace(op(i, scope=scope), request_json=request(root)))
    insert(store, replace(op("e", scope="s5"), request_json="not json"))

    def names(**filters: Any) -> list[str]:
        return [r.operation_id for r in store.read(lambda r: r.operations(P, **filters))]

    # A request that is not JSON is kept (its reader, not SQLite, judges the row).
    assert names(allocation_root="r1") == ["a", "c", "e"]
    assert names(allocation_root="r1", not_scope="s1") == ["c", "e"]
    assert names(allocation_root="r3") == ["e"]
    assert names(not_scope="s2") == ["a", "c", "d", "e"]


def test_nonterminal_operations_are_running_failed_and_cleanup_pending(store: Store) -> None:
    assert {
        OperationState.RUNNING,
        OperationState.FAILED,
        OperationState.CLEANUP_PENDING,
    } == NONTERMINAL_STATES
    for i, state in enumerate(OperationState):
        insert(store, op(f"v-{i}", state=state))
        insert(store, op(f"m-{i}", partition="links/macvlan", state=state))
    everywhere = store.read(lambda r: r.nonterminal_operations())
    assert {r.state for r in everywhere} == NONTERMINAL_STATES
    assert len(everywhere) == 6
    assert [r.seq for r in everywhere] == sorted(r.seq for r in everywhere)
    vlan = store.read(lambda r: r.nonterminal_operations(P))
    assert [r.operation_id for r in vlan] == [
        r.operation_id for r in everywhere if r.partition == P
    ]
    assert all(not r.terminal for r in vlan)


def test_nonterminal_effects_are_read_in_one_query_with_damage_per_operation(
    store: Store, state_dir: Path
) -> None:
    # Inserted out of position order: each list must come back in plan order.
    insert(store, op("run"), (eff("run", "b", 1), eff("run", "a", 0)))
    insert(store, op("done", state=OperationState.SUCCEEDED), (eff("done", "a", 0),))
    insert(store, op("bad", state=OperationState.FAILED), (eff("bad", "a", 0), eff("bad", "b", 1)))
    insert(store, op("bare", state=OperationState.CLEANUP_PENDING))
    found, damaged = store.read(lambda r: r.nonterminal_effects())
    assert {key: [e.effect_id for e in es] for key, es in found.items()} == {
        (P, "run"): ["a", "b"],
        (P, "bad"): ["a", "b"],
    }
    assert damaged == {}
    assert found[(P, "run")] == store.read(lambda r: r.effects(P, "run"))
    store.close()
    with sqlite3.connect(state_dir / "journal.db") as raw:  # a byte changed behind our back
        raw.execute("UPDATE effects SET detail = 'x' WHERE operation_id = 'bad' AND position = 1")
    with Store.open(state_dir) as reopened:
        found, damaged = reopened.read(lambda r: r.nonterminal_effects())
    assert list(found) == [(P, "run")]
    assert list(damaged) == [(P, "bad")]
    assert "fails its checksum" in damaged[(P, "bad")].reason


def test_duplicate_insert_is_already_exists_and_changes_nothing(store: Store) -> None:
    first = insert(store, op("op-1"), (eff("op-1", "create", 0),))
    with pytest.raises(AlreadyExists, match="op-1"):
        insert(store, op("op-1", scope="other"), (eff("op-1", "other", 0),))
    assert store.read(lambda r: r.operation(P, "op-1")) == first
    assert [e.effect_id for e in store.read(lambda r: r.effects(P, "op-1"))] == ["create"]

    # The failed insert is atomic on its own: a function may catch it and go on.
    def tolerant(txn: Txn) -> OperationRecord:
        with pytest.raises(AlreadyExists):
            txn.insert_operation(op("op-1"), (eff("op-1", "stray", 5),))
        return txn.insert_operation(op("op-2"), ())

    second = store.write(tolerant)
    assert second.seq > first.seq
    assert [e.effect_id for e in store.read(lambda r: r.effects(P, "op-1"))] == ["create"]


def test_misuse_is_a_store_error(store: Store) -> None:
    stored = insert(store, op("op-1"), (eff("op-1", "create", 0),))
    with pytest.raises(StoreError, match="not recorded"):
        store.write(lambda t: t.update_operation(op("missing")))
    with pytest.raises(StoreError, match="immutable"):
        store.write(lambda t: t.update_operation(replace(stored, scope="elsewhere")))
    with pytest.raises(StoreError, match="not recorded"):
        store.write(lambda t: t.update_effect(eff("op-1", "missing", 3)))
    with pytest.raises(StoreError, match="immutable"):
        store.write(lambda t: t.update_effect(replace(eff("op-1", "create", 0), kind="other/v1")))
    with pytest.raises(StoreError, match="belongs to"):
        insert(store, op("op-2"), (eff("op-9", "create", 0),))
    with pytest.raises(StoreError, match="duplicate"):
        insert(store, op("op-2"), (eff("op-2", "a", 0), eff("op-2", "b", 0)))
    with pytest.raises(StoreError, match="inside a write"):
        store.write(lambda t: store.write(lambda t2: None))
    leaked = store.write(lambda t: t)
    with pytest.raises(StoreError, match="after its"):
        leaked.operation(P, "op-1")
    assert store.read(lambda r: r.operation(P, "op-2")) is None


# -- transactions and group commit -----------------------------------------------------


def test_exception_rolls_back_only_its_own_function(store: Store, pool: ThreadPoolExecutor) -> None:
    def good(txn: Txn) -> str:
        txn.insert_operation(op("good"), (eff("good", "e", 0),))
        return "kept"

    def bad(txn: Txn) -> str:
        txn.insert_operation(op("bad"), (eff("bad", "e", 0),))
        txn.put_scope(ScopeRecord(partition=P, scope="bad", generation=9, epoch=9))
        raise ValueError("handler bug")

    commits = store.commits
    with held_writer(store, pool) as holder:
        good_f = pool.submit(store.write, good)
        bad_f = pool.submit(store.write, bad)
        assert store._wait_queued(2, TIMEOUT)
    holder.result(TIMEOUT)
    assert good_f.result(TIMEOUT) == "kept"
    with pytest.raises(ValueError, match="handler bug"):
        bad_f.result(TIMEOUT)
    # One commit for the holder's batch, one for the batch holding both functions.
    assert store.commits == commits + 2
    assert store.read(lambda r: r.operation(P, "good")) is not None
    assert store.read(lambda r: r.operation(P, "bad")) is None
    assert store.read(lambda r: r.effects(P, "bad")) == []
    assert store.read(lambda r: r.scope(P, "bad")) is None


def test_the_writer_checkpoints_once_idle_after_enough_commits(state_dir: Path) -> None:
    with Store.open(state_dir, checkpoint_after=3, checkpoint_idle_s=0.05) as store:
        for i in range(3):
            store.write(
                lambda txn, i=i: txn.put_scope(
                    ScopeRecord(partition=P, scope=f"s{i}", generation=1, epoch=1)
                )
            )
        assert store._wait_checkpoints(1, TIMEOUT)
        observer = sqlite3.connect(state_dir / "journal.db")
        try:
            # (busy, frames in the WAL, frames copied back): the three commits' frames
            # were copied and the WAL started over with the writer's no-op write (its
            # header fsynced then, not by the next commit).
            busy, frames, copied = observer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            # The no-op write rewrote the commit count with the value it had.
            counted = observer.execute("SELECT value FROM meta WHERE key = 'commits'").fetchone()
        finally:
            observer.close()
        assert (busy, copied) == (0, frames)
        assert 1 <= frames <= 2
        assert counted == ("3",)
        assert store.commits == 3
        assert store.read(lambda r: r.scope(P, "s2")) is not None


def test_a_queued_write_hands_its_result_over_once() -> None:
    """``_sqlite._Request`` is a Future without cancel or a second waiter: the first
    resolve wins, its caller wakes once, and an error is raised once and then dropped."""
    done = sqlite_store._Request(lambda t: None)
    done.wait_here()
    woken: list[object] = []
    waiter = threading.Thread(target=lambda: woken.append(done.result()))
    waiter.start()
    done.resolve("first", None)
    done.resolve("second", RuntimeError("ignored"))
    waiter.join(TIMEOUT)
    assert not waiter.is_alive()
    assert woken == ["first"]
    failed = sqlite_store._Request(lambda t: None)
    failed.wait_here()
    failed.resolve(None, ValueError("the write failed"))
    with pytest.raises(ValueError, match="the write failed"):
        failed.result()
    assert failed.error is None  # no cycle through the traceback


def test_concurrent_writes_are_group_committed(store: Store, pool: ThreadPoolExecutor) -> None:
    commits = store.commits
    with held_writer(store, pool) as holder:
        futures = [pool.submit(insert, store, op(f"op-{i}", scope=f"att-{i}")) for i in range(16)]
        assert store._wait_queued(16, TIMEOUT)
    holder.result(TIMEOUT)
    records = [f.result(TIMEOUT) for f in futures]
    assert len({r.seq for r in records}) == 16
    assert store.commits - commits < 16
    assert store.commits - commits == 2
    assert len(store.read(lambda r: r.operations(P))) == 16


def test_functions_that_change_nothing_cost_no_commit(store: Store) -> None:
    commits = store.commits
    assert store.write(lambda t: t.operation(P, "x")) is None
    insert(store, op("a"))
    with pytest.raises(AlreadyExists):
        insert(store, op("a"))
    assert store.commits == commits + 1


def test_reads_see_committed_state_while_the_writer_is_busy(
    store: Store, pool: ThreadPoolExecutor
) -> None:
    with held_writer(store, pool) as holder:
        # The holder's transaction is open; reads neither wait for it nor see it.
        assert store.read(lambda r: r.scope("hold", "hold")) is None
    holder.result(TIMEOUT)
    assert store.read(lambda r: r.scope("hold", "hold")) is not None


class FailingCommit:
    """Wraps the writer's connection and fails its COMMIT like a disk I/O error."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("disk I/O error")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_failed_commit_fails_every_caller_in_the_batch(
    state_dir: Path, pool: ThreadPoolExecutor
) -> None:
    store = Store.open(state_dir)
    try:
        with held_writer(store, pool) as holder:
            store._conn = FailingCommit(store._conn)  # type: ignore[assignment]
            futures = [pool.submit(insert, store, op(f"op-{i}")) for i in range(3)]
            assert store._wait_queued(3, TIMEOUT)
        holder.result(TIMEOUT)
        for f in futures:
            with pytest.raises(JournalFault, match="disk I/O error"):
                f.result(TIMEOUT)
        assert isinstance(store.failure, sqlite3.OperationalError)
        with pytest.raises(JournalFault, match="nothing after the last commit"):
            insert(store, op("later"))
        # The fault clears: a fresh connection, every acknowledged commit still there.
        assert store.clear_fault()
        assert store.failure is None
        insert(store, op("after-fault"))
        assert [o.operation_id for o in store.read(lambda r: r.operations(P))] == ["after-fault"]
    finally:
        store.close()
    with Store.open(state_dir) as reopened:
        assert [o.operation_id for o in reopened.read(lambda r: r.operations(P))] == ["after-fault"]
        assert reopened.read(lambda r: r.scope("hold", "hold")) is not None
        assert reopened.failure is None


# -- lifecycle and the writer lock -----------------------------------------------------


def test_second_open_in_the_same_process_is_locked(store: Store, state_dir: Path) -> None:
    with pytest.raises(StoreLocked) as info:
        Store.open(state_dir)
    assert str(state_dir) in str(info.value)
    assert f"pid {os.getpid()}" in str(info.value)
    assert info.value.holder_pid == os.getpid()
    # The failed opener released nothing of the holder's.
    insert(store, op("still-writable"))


_OPEN_IN_CHILD = """
import sys
from pathlib import Path
from plugins.sdk.store import Store, StoreLocked
try:
    Store.open(Path(sys.argv[1]))
except StoreLocked as exc:
    print(exc)
    sys.exit(3)
print("opened")
"""


def run_child(code: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, str(state_dir)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 2,
        cwd=REPO,
        check=False,
    )


def test_second_open_from_another_process_is_locked(store: Store, state_dir: Path) -> None:
    result = run_child(_OPEN_IN_CHILD, state_dir)
    assert result.returncode == 3, result.stderr
    assert str(state_dir) in result.stdout
    assert f"pid {os.getpid()}" in result.stdout


def test_after_close_the_store_reopens_with_its_data(state_dir: Path) -> None:
    store = Store.open(state_dir)
    journal_id = store.journal_id
    stored = insert(store, op("op-1"))
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreClosed):
        insert(store, op("op-2"))
    with pytest.raises(StoreClosed):
        store.read(lambda r: r.operation(P, "op-1"))
    assert run_child(_OPEN_IN_CHILD, state_dir).stdout.strip() == "opened"
    with Store.open(state_dir) as reopened:
        assert reopened.journal_id == journal_id
        assert reopened.read(lambda r: r.operation(P, "op-1")) == stored
        assert insert(reopened, op("op-2")).seq > stored.seq


_WRITE_THEN_SIGKILL = """
import os, signal, sys
from pathlib import Path
from plugins.sdk.store import ScopeRecord, Store
store = Store.open(Path(sys.argv[1]))
store.write(lambda txn: txn.put_scope(ScopeRecord(partition="p", scope="s", generation=7, epoch=3)))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_writer_keeps_its_commits_and_drops_its_lock(state_dir: Path) -> None:
    result = run_child(_WRITE_THEN_SIGKILL, state_dir)
    assert result.returncode == -signal.SIGKILL, result.stderr
    with Store.open(state_dir) as store:
        assert store.read(lambda r: r.scope("p", "s")) == ScopeRecord(
            partition="p", scope="s", generation=7, epoch=3
        )


def test_abandon_keeps_only_what_was_committed(state_dir: Path) -> None:
    store = Store.open(state_dir)
    insert(store, op("committed"))
    store.abandon()
    with pytest.raises(StoreClosed):
        insert(store, op("after"))
    store.abandon()
    store.close()
    with Store.open(state_dir) as reopened:
        assert [r.operation_id for r in reopened.read(lambda r: r.operations(P))] == ["committed"]


class SimulatedCrash(BaseException):
    pass


def test_a_write_alone_runs_on_its_callers_thread_others_on_the_writers(
    store: Store, pool: ThreadPoolExecutor
) -> None:
    """Leader/follower: nothing to group a lone write with, so no thread hand-off."""
    caller = threading.get_ident()
    assert store.write(lambda t: threading.get_ident()) == caller
    with held_writer(store, pool) as holder:
        queued = pool.submit(store.write, lambda t: threading.current_thread().name)
        assert store._wait_queued(1, TIMEOUT)
    holder.result(TIMEOUT)
    assert queued.result(TIMEOUT) == "journal-writer"
    assert store.write(lambda t: threading.get_ident()) == caller


@pytest.mark.parametrize("thread", ["caller", "writer"])
def test_abandon_inside_a_write_commits_nothing_pending(
    state_dir: Path, pool: ThreadPoolExecutor, thread: str
) -> None:
    store = Store.open(state_dir)
    insert(store, op("committed"))
    entered = threading.Event()
    crash = threading.Event()

    def crashing(txn: Txn) -> None:
        txn.insert_operation(op("in-flight"), ())
        entered.set()
        assert crash.wait(TIMEOUT)
        store.abandon()  # a crash point firing inside the write function
        raise SimulatedCrash

    if thread == "caller":  # alone: it leads its own transaction
        crashing_f = pool.submit(store.write, crashing)
    else:  # queued behind another write: the writer thread runs it
        with held_writer(store, pool) as holder:
            crashing_f = pool.submit(store.write, crashing)
            assert store._wait_queued(1, TIMEOUT)
        holder.result(TIMEOUT)
    assert entered.wait(TIMEOUT)
    queued_f = pool.submit(insert, store, op("queued"))
    assert store._wait_queued(1, TIMEOUT)
    crash.set()
    with pytest.raises(SimulatedCrash):
        crashing_f.result(TIMEOUT)
    with pytest.raises(StoreClosed, match="abandoned"):
        queued_f.result(TIMEOUT)
    # Woken callers may reopen at once: the lock is already released.
    with Store.open(state_dir) as reopened:
        assert [r.operation_id for r in reopened.read(lambda r: r.operations(P))] == ["committed"]
    store.close()


def test_abandon_rolls_back_a_batch_that_had_succeeded(
    state_dir: Path, pool: ThreadPoolExecutor
) -> None:
    store = Store.open(state_dir)
    entered = threading.Event()
    go = threading.Event()

    def slow(txn: Txn) -> str:
        txn.insert_operation(op("slow"), ())
        entered.set()
        assert go.wait(TIMEOUT)
        store.abandon()
        return "done"

    slow_f = pool.submit(store.write, slow)
    assert entered.wait(TIMEOUT)
    go.set()
    with pytest.raises(StoreClosed, match="abandoned"):
        slow_f.result(TIMEOUT)
    with Store.open(state_dir) as reopened:
        assert reopened.read(lambda r: r.operation(P, "slow")) is None


# -- a lost or damaged journal is never recreated --------------------------------------


def test_truncated_journal_is_unavailable_and_left_alone(state_dir: Path) -> None:
    closed_journal(state_dir, lambda s: insert(s, op("op-1")))
    os.truncate(state_dir / "journal.db", 100)
    error = assert_unavailable_untouched(state_dir, match="truncated")
    assert not error.retryable  # DATA_LOSS: an operator must act
    assert (state_dir / "journal.db").stat().st_size == 100


def test_garbled_header_is_unavailable(state_dir: Path) -> None:
    closed_journal(state_dir, lambda s: insert(s, op("op-1")))
    with open(state_dir / "journal.db", "r+b") as f:
        f.write(b"\xde\xad\xbe\xef" * 4)
    assert_unavailable_untouched(state_dir, match="not an SQLite database")


def test_garbled_pages_are_unavailable(state_dir: Path) -> None:
    closed_journal(state_dir, lambda s: [insert(s, op(f"op-{i}")) for i in range(20)])
    db = state_dir / "journal.db"
    size = db.stat().st_size
    with open(db, "r+b") as f:
        f.seek(4096)
        f.write(b"\x5a" * (size - 4096))
    assert_unavailable_untouched(state_dir, match="journal.db")


def test_deleted_journal_is_unavailable_and_not_recreated(state_dir: Path) -> None:
    closed_journal(state_dir, lambda s: insert(s, op("op-1")))
    (state_dir / "journal.db").unlink()
    assert_unavailable_untouched(state_dir, match="journal.db is missing")
    assert not (state_dir / "journal.db").exists()


def test_journal_without_its_id_file_is_unavailable(state_dir: Path) -> None:
    closed_journal(state_dir)
    (state_dir / "journal.id").unlink()
    assert_unavailable_untouched(state_dir, match="journal.id is missing")


def test_journal_of_another_id_is_unavailable(state_dir: Path) -> None:
    closed_journal(state_dir)
    (state_dir / "journal.id").write_text(f"{uuid.uuid4()}\n")
    assert_unavailable_untouched(state_dir, match="belongs to journal")


def test_malformed_id_file_is_unavailable(state_dir: Path) -> None:
    closed_journal(state_dir)
    (state_dir / "journal.id").write_text("not-a-uuid\n")
    assert_unavailable_untouched(state_dir, match="does not hold a journal id")


def test_foreign_database_is_unavailable(state_dir: Path) -> None:
    closed_journal(state_dir)
    (state_dir / "journal.db").unlink()
    foreign = sqlite3.connect(state_dir / "journal.db")
    foreign.execute("CREATE TABLE t (x)")
    foreign.commit()
    foreign.close()
    assert_unavailable_untouched(state_dir, match="no meta table")


# A newer store format is refused, not unavailable: tests/unit/test_format_versions.py.


def test_crash_before_the_id_file_redoes_initialisation(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(state_dir: Path, journal_id: str) -> None:
        raise SimulatedCrash

    monkeypatch.setattr(_journal, "_write_journal_id", crash)
    with pytest.raises(SimulatedCrash):
        Store.open(state_dir)
    assert {p.name for p in state_dir.iterdir()} == {"journal.db.init", "writer.lock"}
    monkeypatch.undo()
    with Store.open(state_dir) as store:
        insert(store, op("op-1"))
    assert not (state_dir / "journal.db.init").exists()


def test_crash_between_id_file_and_publish_finishes_initialisation(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(state_dir: Path) -> None:
        raise SimulatedCrash

    monkeypatch.setattr(_journal, "publish_staging", crash)
    with pytest.raises(SimulatedCrash):
        Store.open(state_dir)
    assert not (state_dir / "journal.db").exists()
    journal_id = (state_dir / "journal.id").read_text().strip()
    monkeypatch.undo()
    with Store.open(state_dir) as store:
        assert store.journal_id == journal_id
        insert(store, op("op-1"))
    assert not (state_dir / "journal.db.init").exists()
