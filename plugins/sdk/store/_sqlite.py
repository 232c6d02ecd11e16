"""The Store: one writer at a time (a caller alone, or the group-committing writer thread),
pooled snapshot readers."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar, cast

from .._errors import AlreadyExists
from .._requests import CleanupStatus, EffectState, OperationState
from .._types import Hook
from ._errors import JournalFault, JournalUnavailable, StoreClosed, StoreError, storage_error
from ._faults import NO_FAULTS, StorageFaults
from ._integrity import (
    EFFECT_COLUMNS,
    OPERATION_COLUMNS,
    SCOPE_COLUMNS,
    DamagedRecord,
    checksum,
    damaged_records,
)
from ._journal import DB_NAME, ensure_state_dir, fsync_dir, prepare
from ._lease import Lease
from ._lock import WriterLock
from ._records import NONTERMINAL_STATES, EffectRecord, OperationRecord, ScopeRecord
from ._schema import (
    PLUGIN_JOURNAL,
    JournalFormat,
    configure_reader,
    configure_writer,
    connect,
    migrate,
    record_effect_format,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

MAX_BATCH: Final = 512
"""Most write functions committed together in one transaction."""

CHECKPOINT_AFTER_COMMITS: Final = 64
CHECKPOINT_IDLE_S: Final = 0.5
"""The writer checkpoints the WAL into the database once this many commits are not
checkpointed yet and no write has come for this long. A checkpoint costs three fsyncs
(the WAL before it is copied back, the database after, the WAL's new header at the next
commit); SQLite's automatic one ran inside whichever COMMIT crossed 1,000 pages, so the
batch in flight waited for the copy and the fsyncs. Idle, nobody waits for them; under
load that never pauses, the inline checkpoint (``AUTOCHECKPOINT_PAGES``) still bounds the
WAL."""

MAX_IDLE_READERS: Final = 64
"""Reader connections kept for reuse: as many as the host's handler threads (its
``DEFAULT_MAX_WORKERS``), so a burst of concurrent hooks reuses them instead of opening
(and configuring) a connection per read beyond the first 8 and closing it after."""

_OP_COLUMNS: Final = ", ".join(OPERATION_COLUMNS)
_EFFECT_COLUMNS: Final = ", ".join(EFFECT_COLUMNS)
_SCOPE_COLUMNS: Final = ", ".join(SCOPE_COLUMNS)


class Reader:
    """Read access to one consistent snapshot; valid only inside its ``read``/``write`` call.

    The typed methods read a plugin journal; ``select`` reads any sealed table of the
    store's format (the coordinator's journal uses only that).
    """

    def __init__(
        self, conn: sqlite3.Connection, state_dir: Path, fmt: JournalFormat = PLUGIN_JOURNAL
    ) -> None:
        self._conn = conn
        self._state_dir = state_dir
        self._format = fmt
        self._live = True

    def _columns(self, table: str) -> tuple[str, ...]:
        try:
            return self._format.tables[table]
        except KeyError:
            raise StoreError(f"{table!r} is not a sealed table of {self._format.name}") from None

    def select(
        self, table: str, where: Mapping[str, object] | None = None, *, order_by: str = "rowid"
    ) -> list[dict[str, Any]]:
        """Rows of a sealed table whose columns equal ``where``; each checksum verified."""
        columns = self._columns(table)
        clauses = [f"{c} = ?" for c in (where or {})]
        if any(c not in columns for c in (where or {})) or order_by not in (*columns, "rowid"):
            raise StoreError(f"select from {table}: unknown column in {where} / {order_by}")
        rows = self._rows(
            f"SELECT {', '.join(columns)}, checksum FROM {table}"
            + (f" WHERE {' AND '.join(clauses)}" if clauses else "")
            + f" ORDER BY {order_by}",
            list((where or {}).values()),
        )
        return [dict(zip(columns, self._verified(table, row, 2), strict=True)) for row in rows]

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        if not self._live:
            raise StoreError("a Reader/Txn was used after its read()/write() call returned")
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.ProgrammingError as exc:
            raise StoreError(f"journal query failed: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise storage_error(self._state_dir, "reading the journal failed", exc) from exc

    def _verified(self, table: str, row: Any, key_columns: int) -> Any:
        """The row without its checksum column, or JournalUnavailable if it was altered.

        The record is named by its first ``key_columns`` columns, joined only when it
        fails: every row read passed through an f-string that was used only then."""
        if checksum(table, row[:-1]) != row[-1]:
            key = "/".join(map(str, row[:key_columns]))
            raise JournalUnavailable(
                self._state_dir,
                f"{table} record {key} fails its checksum (altered on disk); it is never "
                "replayed and its scope stays unavailable",
            )
        return row[:-1]

    def count(self, table: str, where: Mapping[str, object] | None = None) -> int:
        """How many rows of a sealed table match ``where`` (checksums are not read)."""
        columns = self._columns(table)
        if any(c not in columns for c in (where or {})):
            raise StoreError(f"count in {table}: unknown column in {where}")
        clauses = [f"{c} = ?" for c in (where or {})]
        rows = self._rows(
            f"SELECT count(*) FROM {table}"
            + (f" WHERE {' AND '.join(clauses)}" if clauses else ""),
            list((where or {}).values()),
        )
        return int(rows[0][0])

    def scope(self, partition: str, scope: str) -> ScopeRecord | None:
        rows = self._rows(
            f"SELECT {_SCOPE_COLUMNS}, checksum FROM scopes WHERE partition = ? AND scope = ?",
            (partition, scope),
        )
        if not rows:
            return None
        return _scope(self._verified("scopes", rows[0], 2))

    def operation(self, partition: str, operation_id: str) -> OperationRecord | None:
        rows = self._rows(
            f"SELECT {_OP_COLUMNS}, checksum FROM operations "
            "WHERE partition = ? AND operation_id = ?",
            (partition, operation_id),
        )
        return self._operation(rows[0]) if rows else None

    def operations(
        self,
        partition: str,
        *,
        scope: str | None = None,
        hook: Hook | None = None,
        states: Collection[OperationState] | None = None,
        allocation_root: str | None = None,
        not_scope: str | None = None,
    ) -> list[OperationRecord]:
        """Operations of ``partition`` matching every given filter, in insertion order.

        ``allocation_root`` keeps those whose request names that allocation root
        (``request_json``'s ``allocation.root_id``), ``not_scope`` drops one scope's: both
        filtered by SQLite, so a caller looking for one root among many live operations
        decodes and verifies only the rows that match, not every row of the partition. A
        row whose request is not JSON is kept, so reading it fails its checksum as before.

        Asked by state and not by scope, SQLite reads the state index (``+partition``
        keeps it off the primary key's): the operations in those states, not the
        partition's whole history, which grows for as long as the daemon serves. Every
        attach's single-attachment check (live states only) read all of it, so its cost
        grew with every operation ever served (tests/runner/test_memory.py: 9.5 ms of CPU
        per connect+remove at first, 38 ms after 3,000; flat at ~10 ms this way).
        """
        by_state = states is not None and scope is None
        where = ["+partition = ?" if by_state else "partition = ?"]
        params: list[object] = [partition]
        if scope is not None:
            where.append("scope = ?")
            params.append(scope)
        if not_scope is not None:
            where.append("scope != ?")
            params.append(not_scope)
        if allocation_root is not None:
            where.append(
                "CASE WHEN json_valid(request_json) "
                "THEN json_extract(request_json, '$.allocation.root_id') IS ? ELSE 1 END"
            )
            params.append(allocation_root)
        if hook is not None:
            where.append("hook = ?")
            params.append(Hook(hook).value)
        if states is not None:
            values = sorted({OperationState(s).value for s in states})
            if not values:
                return []
            where.append(f"state IN ({', '.join('?' * len(values))})")
            params.extend(values)
        rows = self._rows(
            f"SELECT {_OP_COLUMNS}, checksum FROM operations WHERE {' AND '.join(where)} "
            "ORDER BY seq",
            params,
        )
        return [self._operation(row) for row in rows]

    def effects(self, partition: str, operation_id: str) -> list[EffectRecord]:
        """The operation's effects in plan order (``position``)."""
        rows = self._rows(
            f"SELECT {_EFFECT_COLUMNS}, checksum FROM effects "
            "WHERE partition = ? AND operation_id = ? ORDER BY position",
            (partition, operation_id),
        )
        return [self._effect(row) for row in rows]

    def nonterminal_operations(self, partition: str | None = None) -> list[OperationRecord]:
        """Running, Failed and CleanupPending operations (what recovery must examine).

        Records that fail their checksum are left out: ``Store.damaged`` lists them,
        and recovery must not act on an altered record.
        """
        values = sorted(s.value for s in NONTERMINAL_STATES)
        sql = (
            f"SELECT {_OP_COLUMNS}, checksum FROM operations "
            f"WHERE state IN ({', '.join('?' * len(values))})"
        )
        params: list[object] = list(values)
        if partition is not None:
            sql += " AND partition = ?"
            params.append(partition)
        rows = self._rows(sql + " ORDER BY seq", params)
        # Each checksum computed once: a failing row is skipped, the others are built as read.
        return [
            self._operation_of(row[:-1])
            for row in rows
            if checksum("operations", row[:-1]) == row[-1]
        ]

    def nonterminal_effects(
        self,
    ) -> tuple[
        dict[tuple[str, str], list[EffectRecord]], dict[tuple[str, str], JournalUnavailable]
    ]:
        """The effects of every non-terminal operation, by (partition, operation id).

        One query (operations by the state index, each one's effects by its key) for
        what ``effects`` would read once per operation. Each list is in plan order.
        An operation with an effect record that fails its checksum or holds an unknown
        value is left out of the first map and named in the second, with the error
        ``effects`` would raise for it.
        """
        values = sorted(s.value for s in NONTERMINAL_STATES)
        rows = self._rows(
            f"SELECT {', '.join(f'e.{c}' for c in EFFECT_COLUMNS)}, e.checksum "
            "FROM operations AS o JOIN effects AS e "
            "ON e.partition = o.partition AND e.operation_id = o.operation_id "
            f"WHERE o.state IN ({', '.join('?' * len(values))}) ORDER BY o.seq, e.position",
            values,
        )
        found: dict[tuple[str, str], list[EffectRecord]] = {}
        damaged: dict[tuple[str, str], JournalUnavailable] = {}
        for row in rows:
            key = (row[0], row[1])
            if key in damaged:
                continue
            try:
                found.setdefault(key, []).append(self._effect(row))
            except JournalUnavailable as exc:
                damaged[key] = exc
                found.pop(key, None)
        return found, damaged

    def _operation(self, row: Any) -> OperationRecord:
        return self._operation_of(self._verified("operations", row, 2))

    def _operation_of(self, row: Any) -> OperationRecord:
        """The record of a verified row (without its checksum column)."""
        try:
            hook = Hook(row[2])
            state = OperationState(row[11])
            cleanup_status = None if row[16] is None else CleanupStatus(row[16])
        except ValueError as exc:
            raise JournalUnavailable(
                self._state_dir, f"operation {row[0]}/{row[1]} holds an unknown value: {exc}"
            ) from exc
        return _record(
            OperationRecord,
            OPERATION_COLUMNS,
            (*row[:2], hook, *row[3:11], state, *row[12:16], cleanup_status, row[17]),
        )

    def _effect(self, row: Any) -> EffectRecord:
        row = self._verified("effects", row, 3)
        try:
            state = EffectState(row[5])
        except ValueError as exc:
            raise JournalUnavailable(
                self._state_dir, f"effect {row[0]}/{row[1]}/{row[2]} holds an unknown value: {exc}"
            ) from exc
        return _record(EffectRecord, EFFECT_COLUMNS, (*row[:5], state, *row[6:10]))


def _scope(row: Any) -> ScopeRecord:
    return _record(ScopeRecord, SCOPE_COLUMNS, row[:5])


_R = TypeVar("_R", ScopeRecord, OperationRecord, EffectRecord)


def _record(cls: type[_R], columns: tuple[str, ...], values: Sequence[Any]) -> _R:
    return cls(**dict(zip(columns, values, strict=True)))


class Txn(Reader):
    """A write function's view: reads see this batch's uncommitted writes."""

    def __init__(self, conn: sqlite3.Connection, store: Store) -> None:
        super().__init__(conn, store.state_dir, store.journal_format)
        self._store = store

    def put(self, table: str, row: Mapping[str, object], *, key: Sequence[str]) -> None:
        """Insert ``row`` into a sealed table, or replace the row with the same ``key``."""
        columns = self._columns(table)
        unknown = sorted(set(row) - set(columns))
        if unknown or not set(key) <= set(columns):
            raise StoreError(f"put into {table}: unknown columns {unknown or list(key)}")
        values = tuple(row.get(c) for c in columns)
        updates = ", ".join(f"{c} = excluded.{c}" for c in (*columns, "checksum") if c not in key)
        self._exec(
            f"INSERT INTO {table} ({', '.join(columns)}, checksum) "
            f"VALUES ({', '.join('?' * (len(columns) + 1))}) "
            f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}",
            (*values, checksum(table, values)),
        )

    def delete(self, table: str, where: Mapping[str, object]) -> int:
        """Delete the rows of a sealed table whose columns equal ``where``; returns the count."""
        columns = self._columns(table)
        if not where or any(c not in columns for c in where):
            raise StoreError(f"delete from {table}: needs known columns, got {list(where)}")
        cursor = self._exec(
            f"DELETE FROM {table} WHERE {' AND '.join(f'{c} = ?' for c in where)}",
            list(where.values()),
        )
        return cursor.rowcount

    def _exec(
        self, sql: str, params: Sequence[object], *, raw_integrity: bool = False
    ) -> sqlite3.Cursor:
        if not self._live:
            raise StoreError("a Txn was used after its write() call returned")
        if self._store._abandoned:
            raise StoreClosed(f"journal store {self._state_dir} was abandoned")
        try:
            self._store._faults.check("statement")
            return self._conn.execute(sql, params)
        except sqlite3.IntegrityError as exc:
            if raw_integrity:
                raise
            raise StoreError(f"journal rejected a write: {exc}") from exc
        except sqlite3.ProgrammingError as exc:
            raise StoreError(f"journal write failed: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise storage_error(self._state_dir, "writing the journal failed", exc) from exc

    def put_scope(self, record: ScopeRecord) -> None:
        """Insert or replace the scope's generation, epoch and fence."""
        values = (
            record.partition,
            record.scope,
            record.generation,
            record.epoch,
            record.fence_operation_id,
        )
        self._exec(
            f"INSERT INTO scopes ({_SCOPE_COLUMNS}, checksum) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (partition, scope) DO UPDATE SET generation = excluded.generation, "
            "epoch = excluded.epoch, fence_operation_id = excluded.fence_operation_id, "
            "checksum = excluded.checksum",
            (*values, checksum("scopes", values)),
        )

    def insert_operation(
        self, record: OperationRecord, effects: Sequence[EffectRecord]
    ) -> OperationRecord:
        """Record a new operation and its planned effects atomically; returns it with ``seq``.

        Raises ``AlreadyExists`` if the (partition, operation_id) is already recorded.
        """
        key = (record.partition, record.operation_id)
        ids: set[str] = set()
        positions: set[int] = set()
        for e in effects:
            if (e.partition, e.operation_id) != key:
                raise StoreError(
                    f"effect {e.effect_id!r} belongs to {e.partition}/{e.operation_id}, "
                    f"not {record.partition}/{record.operation_id}"
                )
            if e.effect_id in ids or e.position in positions:
                raise StoreError(
                    f"operation {record.operation_id!r}: duplicate effect id or position "
                    f"({e.effect_id!r}, {e.position})"
                )
            ids.add(e.effect_id)
            positions.add(e.position)
        self._exec("SAVEPOINT insert_operation", ())
        try:
            (last,) = self._rows("SELECT value FROM meta WHERE key = 'last_seq'")[0]
            seq = int(last) + 1
            values = (*key, *_operation_fields(record), seq)
            try:
                self._exec(
                    f"INSERT INTO operations ({_OP_COLUMNS}, checksum) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*values, checksum("operations", values)),
                    raw_integrity=True,
                )
            except sqlite3.IntegrityError as exc:
                if exc.sqlite_errorname == "SQLITE_CONSTRAINT_PRIMARYKEY":
                    raise AlreadyExists(
                        f"operation {record.operation_id!r} is already recorded in partition "
                        f"{record.partition!r}",
                        details={
                            "partition": record.partition,
                            "operation_id": record.operation_id,
                        },
                    ) from exc
                raise StoreError(f"journal rejected operation {key}: {exc}") from exc
            self._exec("UPDATE meta SET value = ? WHERE key = 'last_seq'", (str(seq),))
            for e in effects:
                effect_values = (*key, e.effect_id, e.position, e.kind, *_effect_fields(e))
                self._exec(
                    f"INSERT INTO effects ({_EFFECT_COLUMNS}, checksum) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*effect_values, checksum("effects", effect_values)),
                )
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK TO insert_operation")
                self._conn.execute("RELEASE insert_operation")
            raise
        self._exec("RELEASE insert_operation", ())
        return replace(record, seq=seq)

    def update_operation(self, record: OperationRecord) -> None:
        """Store every mutable field of ``record``; its identity must match the journal."""
        fields = _operation_fields(record)
        identity = (
            record.partition,
            record.operation_id,
            fields[0],  # the hook's value
            record.scope,
            record.step,
            record.semantic_digest,
        )
        if record.seq:
            # A record read from the journal or returned by insert_operation carries its
            # seq (the checksum covers it): the identity check rides in the UPDATE's WHERE,
            # instead of a SELECT before every update (three per connect+remove). Any
            # other record, or one whose identity does not match, takes the path below.
            values = (record.partition, record.operation_id, *fields, record.seq)
            cursor = self._exec(
                "UPDATE operations SET artifact_digest = ?, contract_digest = ?, "
                "generation = ?, epoch = ?, request_json = ?, state = ?, plan_json = ?, "
                "response_json = ?, error_json = ?, target_operation_id = ?, "
                "cleanup_status = ?, checksum = ? WHERE partition = ? AND operation_id = ? "
                "AND hook = ? AND scope = ? AND step = ? AND semantic_digest = ? AND seq = ?",
                (*fields[4:], checksum("operations", values), *identity, record.seq),
            )
            if cursor.rowcount == 1:
                return
        rows = self._rows(
            "SELECT seq FROM operations WHERE partition = ? AND operation_id = ? AND hook = ? "
            "AND scope = ? AND step = ? AND semantic_digest = ?",
            identity,
        )
        if not rows:
            if self.operation(record.partition, record.operation_id) is None:
                raise StoreError(
                    f"cannot update operation {record.partition}/{record.operation_id}: "
                    "not recorded"
                )
            raise StoreError(
                f"cannot update operation {record.partition}/{record.operation_id}: hook, "
                "scope, step and semantic digest are immutable"
            )
        values = (record.partition, record.operation_id, *fields, rows[0][0])
        self._exec(
            "UPDATE operations SET artifact_digest = ?, contract_digest = ?, generation = ?, "
            "epoch = ?, request_json = ?, state = ?, plan_json = ?, response_json = ?, "
            "error_json = ?, target_operation_id = ?, cleanup_status = ?, checksum = ? "
            "WHERE partition = ? AND operation_id = ?",
            (
                *fields[4:],
                checksum("operations", values),
                record.partition,
                record.operation_id,
            ),
        )

    def update_effect(self, record: EffectRecord) -> None:
        """Store the effect's state, before-image, outputs, detail and attempts."""
        key = (
            record.partition,
            record.operation_id,
            record.effect_id,
            record.position,
            record.kind,
        )
        fields = _effect_fields(record)  # once: the row's checksum and its SET clause
        cursor = self._exec(
            "UPDATE effects SET state = ?, before_json = ?, outputs_json = ?, detail = ?, "
            "attempts = ?, checksum = ? WHERE partition = ? AND operation_id = ? "
            "AND effect_id = ? AND position = ? AND kind = ?",
            (*fields, checksum("effects", (*key, *fields)), *key),
        )
        if cursor.rowcount == 1:
            return
        name = f"{record.partition}/{record.operation_id}/{record.effect_id}"
        if not self._rows(
            "SELECT 1 FROM effects WHERE partition = ? AND operation_id = ? AND effect_id = ?",
            (record.partition, record.operation_id, record.effect_id),
        ):
            raise StoreError(f"cannot update effect {name}: not recorded")
        raise StoreError(f"cannot update effect {name}: position and kind are immutable")


def _operation_fields(r: OperationRecord) -> tuple[object, ...]:
    """Columns after (partition, operation_id) and before seq, in _OP_COLUMNS order."""
    return (
        Hook(r.hook).value,
        r.scope,
        r.step,
        r.semantic_digest,
        r.artifact_digest,
        r.contract_digest,
        r.generation,
        r.epoch,
        r.request_json,
        OperationState(r.state).value,
        r.plan_json,
        r.response_json,
        r.error_json,
        r.target_operation_id,
        None if r.cleanup_status is None else CleanupStatus(r.cleanup_status).value,
    )


def _effect_fields(r: EffectRecord) -> tuple[object, ...]:
    return (EffectState(r.state).value, r.before_json, r.outputs_json, r.detail, r.attempts)


class _Request:
    """One write function and its caller's wait: a lock held until the writer resolves it.

    What a ``Future`` was here, without its Condition, its states and its notify_all:
    nobody cancels a write nor waits on it twice, and the handoff per commit (the writer
    waking its caller) was most of the writer thread's own CPU after the COMMIT. What it
    buys today, and the test that pins it: docs/benchmarks.md, "Tricks kept and removed".
    """

    __slots__ = ("_waiting", "done", "error", "fn", "value")

    def __init__(self, fn: Callable[[Txn], object]) -> None:
        self.fn = fn
        self.done = False
        self.value: object = None
        self.error: BaseException | None = None
        self._waiting: threading.Lock | None = None  # a leader never waits

    def wait_here(self) -> None:
        """Before queueing: the caller will wait in ``result`` for the writer thread."""
        self._waiting = threading.Lock()
        self._waiting.acquire()

    def resolve(self, value: object, error: BaseException | None) -> None:
        """Writer thread: hand the result over and wake the caller (once)."""
        if self.done:
            return
        self.done = True
        self.value, self.error = value, error
        if self._waiting is not None:
            self._waiting.release()

    def result(self) -> object:
        """Caller: wait for ``resolve``; its value, or its error raised."""
        assert self._waiting is not None, "wait_here() before queueing"
        self._waiting.acquire()
        if self.error is not None:
            try:
                raise self.error
            finally:
                self.error = None  # no cycle through the traceback, as Future.result
        return self.value


@dataclass
class _Outcome:
    request: _Request
    ok: bool
    value: object = None
    error: BaseException | None = None


class Store:
    """The durable journal of one service. Create with ``Store.open``.

    Writes are closures run one transaction at a time: ``write(fn)`` returns fn's
    result only after the transaction holding fn's changes is committed (one
    WAL fsync under ``synchronous=FULL``). A write that finds no other running or
    queued commits itself on its caller's thread; concurrent writes queue for the
    writer thread and are group-committed: each fn runs in its own savepoint, so
    an exception rolls back that fn only.
    Reads use pooled per-thread connections and never wait for the writer.
    """

    def __init__(
        self,
        *,
        state_dir: Path,
        journal_id: str,
        lock: WriterLock,
        conn: sqlite3.Connection,
        lease: Lease | None = None,
        durable_commits: int = 0,
        damaged: Sequence[DamagedRecord] = (),
        faults: StorageFaults = NO_FAULTS,
        journal_format: JournalFormat = PLUGIN_JOURNAL,
        checkpoint_after: int = CHECKPOINT_AFTER_COMMITS,
        checkpoint_idle_s: float = CHECKPOINT_IDLE_S,
        effect_formats: tuple[int, ...] | None = None,
        found: tuple[int, tuple[int, ...]] | None = None,
    ) -> None:
        self._state_dir = state_dir
        self._effect_formats = (
            effect_formats if effect_formats is not None else journal_format.effect_formats[-1:]
        )
        self._found = found or (journal_format.version, self._effect_formats)
        self._checkpoint_after = checkpoint_after
        self._checkpoint_idle_s = checkpoint_idle_s
        self._format = journal_format
        self._journal_id = journal_id
        self._db = state_dir / DB_NAME
        self._lock = lock
        self._conn = conn
        self._lease = lease
        self._durable_commits = durable_commits
        self._damaged = tuple(damaged)
        self._faults = faults
        self._cond = threading.Condition()
        self._queue: deque[_Request] = deque()
        # A batch is running (on the writer thread, or a caller leading its own write:
        # ``_leader`` is its thread's id); nobody else touches the connection meanwhile.
        self._busy = False
        self._leader: int | None = None
        self._last_write = time.monotonic()  # when the last batch ended (idle checkpoints)
        self._stopping = False
        self._abandoned = False
        self._failure: BaseException | None = None
        self._commits = 0
        self._checkpoints = 0
        self._uncheckpointed = 0  # commits since the writer's last checkpoint (its own)
        self._readers_lock = threading.Lock()
        self._idle_readers: list[sqlite3.Connection] = []
        self._readers_closed = False
        self._writer = threading.Thread(target=self._run_writer, name="journal-writer", daemon=True)
        self._writer.start()

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        state_dir: Path,
        *,
        runtime_dir: Path | None = None,
        faults: StorageFaults = NO_FAULTS,
        journal_format: JournalFormat = PLUGIN_JOURNAL,
        checkpoint_after: int = CHECKPOINT_AFTER_COMMITS,
        checkpoint_idle_s: float = CHECKPOINT_IDLE_S,
        writer_wait_s: float = 0.0,
        lock: WriterLock | None = None,
    ) -> Store:
        """Lock ``state_dir`` (created 0700 if missing), validate or create its journal.

        ``writer_wait_s``: how long to wait for another process holding the writer lock
        (an instance still stopping) before ``StoreLocked``; 0 refuses at once. ``lock``:
        the writer lock of ``state_dir``, already taken by the caller (``WriterLock``);
        the store owns it from now on, and releases it if opening fails.

        With ``runtime_dir`` (a tmpfs, e.g. under ``/run``) the store keeps a lease
        there (see ``_lease``): a journal that lost acknowledged commits in this boot,
        was replaced, or whose files are gone is refused instead of served or
        recreated. Every record's checksum is verified; ``damaged`` lists failures.

        Raises ``StoreLocked`` if another writer holds it, ``JournalUnavailable``
        if a journal existed here but is missing, corrupt, foreign or rolled back, and
        ``JournalFormatUnsupported`` if it is of a store format this build does not read
        or holds records of an effect format it cannot execute (nothing changed). ``checkpoint_after`` and ``checkpoint_idle_s``: when the writer
        checkpoints (``CHECKPOINT_AFTER_COMMITS``).
        """
        state_dir = Path(state_dir).absolute()
        if lock is None:
            ensure_state_dir(state_dir)
            lock = WriterLock.acquire(state_dir, wait_s=writer_wait_s)
        elif not lock.held or lock.path.parent.absolute() != state_dir:
            raise StoreError(f"the writer lock {lock.path} is not a held lock of {state_dir}")
        conn: sqlite3.Connection | None = None
        lease: Lease | None = None
        try:
            known = None
            if runtime_dir is not None:
                lease, known = Lease.open(Path(runtime_dir), state_dir)
            journal = prepare(state_dir, known, journal_format)
            journal_id = journal.journal_id
            conn = connect(state_dir / DB_NAME, "rw")
            configure_writer(conn)
            conn.execute("SELECT count(*) FROM meta").fetchall()
            # The -wal file exists now; make its directory entry durable before
            # the first commit relies on it.
            fsync_dir(state_dir)
            migrate(conn, journal.version, journal_format)
            held = record_effect_format(conn, journal_format, journal.effect_formats)
            commits = _durable_commits(conn, state_dir)  # checked against the lease by prepare
            # A journal created just now is the checked image: its rows passed already.
            damaged = [] if journal.created else damaged_records(conn, journal_format.tables)
            if lease is not None:
                lease.record(journal_id, commits)
            return cls(
                state_dir=state_dir,
                journal_id=journal_id,
                lock=lock,
                conn=conn,
                lease=lease,
                durable_commits=commits,
                damaged=damaged,
                faults=faults,
                journal_format=journal_format,
                checkpoint_after=checkpoint_after,
                checkpoint_idle_s=checkpoint_idle_s,
                effect_formats=held,
                found=(journal.version, journal.effect_formats),
            )
        except BaseException:
            if conn is not None:
                conn.close()
            if lease is not None:
                lease.close()
            lock.release()
            raise

    def close(self) -> None:
        """Commit what is queued, stop the writer, close connections, release the lock.

        Idempotent. Writes submitted after ``close`` raise ``StoreClosed``.
        """
        if self._inside_write():
            raise StoreError("Store.close() called from inside a write function")
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._writer.join()

    def abandon(self) -> None:
        """Simulate a crash: stop without committing anything still pending.

        The batch in progress is rolled back and every queued or in-flight write
        raises ``StoreClosed`` (a write function that itself raised gets its own
        exception). Connections are closed and the lock is released before any
        of those callers is woken. May be called from inside a write function (a
        crash point on the writer thread, or on a caller leading its own write);
        then it returns at once and the batch rolls back as soon as that function
        returns or raises.
        """
        with self._cond:
            self._abandoned = True
            self._stopping = True
            self._cond.notify_all()
            inside = self._inside_write()
        if not inside:
            self._writer.join()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- properties --------------------------------------------------------------------

    @property
    def state_dir(self) -> Path:
        return self._state_dir

    @property
    def journal_id(self) -> str:
        return self._journal_id

    @property
    def journal_format(self) -> JournalFormat:
        return self._format

    @property
    def store_format(self) -> int:
        """The store format of this journal (migrated to this build's newest at open)."""
        return self._format.version

    @property
    def effect_formats(self) -> tuple[int, ...]:
        """The effect formats of the records this journal holds (this build's among them
        once opened; () for a journal kind without effect records)."""
        return self._effect_formats

    @property
    def found_formats(self) -> tuple[int, tuple[int, ...]]:
        """The store format and effect formats the journal was at when opened, before an
        older store format was migrated and this build's effect format added."""
        return self._found

    @property
    def damaged(self) -> tuple[DamagedRecord, ...]:
        """Records that failed their checksum when the store was opened."""
        return self._damaged

    @property
    def durable_commits(self) -> int:
        """Transactions this journal has committed over its whole life (the lease's count)."""
        with self._cond:
            return self._durable_commits

    @property
    def commits(self) -> int:
        """COMMITs issued (each one WAL fsync), by the writer thread or a leading caller."""
        with self._cond:
            return self._commits

    @property
    def checkpoints(self) -> int:
        """Checkpoints the writer thread ran when the journal was idle."""
        with self._cond:
            return self._checkpoints

    def _wait_checkpoints(self, count: int, timeout: float) -> bool:
        """Test hook: wait until the writer has run at least ``count`` idle checkpoints."""
        with self._cond:
            return self._cond.wait_for(lambda: self._checkpoints >= count, timeout)

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped the writer (a failed COMMIT), or None while healthy."""
        with self._cond:
            return self._failure

    # -- reads -------------------------------------------------------------------------

    def read(self, fn: Callable[[Reader], T]) -> T:
        """Run ``fn`` on a consistent snapshot of the committed journal."""
        conn = self._acquire_reader()
        reader = Reader(conn, self._state_dir, self._format)
        try:
            try:
                conn.execute("BEGIN")
            except sqlite3.DatabaseError as exc:
                raise JournalUnavailable(
                    self._state_dir, f"reading the journal failed: {exc}"
                ) from exc
            try:
                return fn(reader)
            finally:
                reader._live = False
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        finally:
            self._release_reader(conn)

    def _acquire_reader(self) -> sqlite3.Connection:
        with self._readers_lock:
            if self._readers_closed:
                raise StoreClosed(f"journal store {self._state_dir} is closed")
            if self._idle_readers:
                return self._idle_readers.pop()
        try:
            conn = connect(self._db, "rw")
        except sqlite3.Error as exc:
            raise storage_error(self._state_dir, "cannot open a reader", exc) from exc
        try:
            configure_reader(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _release_reader(self, conn: sqlite3.Connection) -> None:
        with self._readers_lock:
            if not self._readers_closed and len(self._idle_readers) < MAX_IDLE_READERS:
                self._idle_readers.append(conn)
                return
        conn.close()

    # -- writes ------------------------------------------------------------------------

    def write(self, fn: Callable[[Txn], T]) -> T:
        """Run ``fn`` in a write transaction; return its result once durably committed.

        An exception from ``fn`` rolls back fn's changes only and is re-raised
        here. ``fn`` runs on the caller's thread when no other write is running or
        waiting (it leads its own transaction), else on the writer thread, with the
        writes queued beside it: keep it short, touch only the Txn, and never call
        ``write``/``close`` from it. If the COMMIT fails the store is failed for good
        (``failure``) and this raises ``JournalUnavailable``.
        """
        if self._inside_write():
            raise StoreError("Store.write() called from inside a write function")
        request = _Request(fn)
        with self._cond:
            if self._failure is not None:
                raise self._failed_error()
            if self._stopping:
                raise StoreClosed(f"journal store {self._state_dir} is closed")
            # Leader/follower: an idle writer would only be woken to run this one function
            # and wake us again, two thread switches that were about half of a commit's
            # cost at one client (~40 of ~74 us). Writes that find another running queue
            # for the writer thread and are group-committed as before.
            lead = not self._busy and not self._queue
            if lead:
                self._busy = True
                self._leader = threading.get_ident()
            else:
                request.wait_here()
                self._queue.append(request)
                self._cond.notify_all()
        if lead:
            return cast(T, self._lead(request))
        return cast(T, request.result())

    def _inside_write(self) -> bool:
        """Whether this thread is running a write function (the writer's or its own)."""
        return threading.current_thread() is self._writer or threading.get_ident() == self._leader

    def _lead(self, request: _Request) -> object:
        """Run ``request`` alone on the caller's thread, as the writer thread would.

        ``_busy`` keeps the writer thread off the connection meanwhile: it neither runs a
        batch, nor checkpoints, nor shuts down (``close``, ``abandon``) until this returns.
        """
        try:
            try:
                (outcome,) = self._run_batch([request])
            except BaseException as exc:  # a bug in the store itself: fail loudly
                with self._cond:
                    conn = self._conn
                _rollback(conn)
                self._fail(exc)
                outcome = _Outcome(request, False, error=self._failed_error())
        finally:
            with self._cond:
                self._busy = False
                self._leader = None
                self._last_write = time.monotonic()
                abandoned = self._abandoned
                # Wake the writer only when it has something to do: writes queued behind
                # this one, a stop, or (once per cycle) enough commits to checkpoint after.
                if self._queue or self._stopping or self._uncheckpointed == self._checkpoint_after:
                    self._cond.notify_all()
        if abandoned:
            # As for the writer thread's callers: woken once the lock is released.
            self._writer.join()
        if outcome.ok:
            return outcome.value
        assert outcome.error is not None
        try:
            raise outcome.error
        finally:
            outcome.error = None  # no cycle through the traceback

    def _wait_queued(self, count: int, timeout: float) -> bool:
        """Test hook: wait until at least ``count`` writes wait for the writer."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._queue) >= count, timeout)

    def _failed_error(self) -> JournalFault | JournalUnavailable:
        error = storage_error(
            self._state_dir,
            "the journal writer failed",
            self._failure,
            after="; nothing after the last commit was acknowledged",
        )
        error.__cause__ = self._failure
        return error

    def ensure_writable(self) -> None:
        """Raise the writer's failure (classified) unless it is clear or clears now."""
        if self.failure is not None and not self.clear_fault():
            raise self._failed_error()

    def clear_fault(self) -> bool:
        """Serve again after a storage fault: start the next batch on a fresh connection.

        A failed COMMIT is rolled back and was never acknowledged, so the journal
        on disk holds every acknowledged write. The old connection is dropped (its
        cache may describe pages the failed write never made durable) and the
        journal is checked again: it must still hold every commit this store
        acknowledged. Returns False (the fault stays) when that check fails or the
        storage still refuses. Damage (``JournalUnavailable``) is never cleared.
        """
        with self._cond:
            failure = self._failure
            if failure is None:
                return True
            if self._stopping or isinstance(
                storage_error(self._state_dir, "", failure), JournalUnavailable
            ):
                return False
            try:
                self._faults.check("reopen")
                fresh = connect(self._db, "rw")
                try:
                    configure_writer(fresh)
                    commits = _durable_commits(fresh, self._state_dir)
                except BaseException:
                    fresh.close()
                    raise
            except (sqlite3.Error, StoreError, JournalUnavailable) as exc:
                log.warning("journal %s still faulty: %s", self._state_dir, exc)
                return False
            if commits < self._durable_commits:
                fresh.close()
                self._failure = JournalUnavailable(
                    self._state_dir,
                    f"{DB_NAME} holds {commits} commits after a storage fault, but "
                    f"{self._durable_commits} were acknowledged",
                )
                return False
            # A COMMIT that reported failure may still have reached the disk.
            self._durable_commits = commits
            old, self._conn = self._conn, fresh
            self._failure = None
        _rollback(old)
        with contextlib.suppress(sqlite3.Error):
            old.close()
        self._record_lease()
        log.warning("journal %s: storage fault cleared; serving again", self._state_dir)
        return True

    def _run_writer(self) -> None:
        deferred: list[_Outcome] = []
        try:
            while True:
                batch = self._next_batch()
                if batch is None:
                    break
                if not batch:
                    try:
                        self._checkpoint()
                    finally:
                        with self._cond:
                            self._busy = False
                    continue
                try:
                    outcomes = self._run_batch(batch)
                except BaseException as exc:  # a bug in the store itself: fail loudly
                    _rollback(self._conn)
                    self._fail(exc)
                    outcomes = [_Outcome(r, False, error=self._failed_error()) for r in batch]
                with self._cond:
                    # Abandoned: stay busy, so no caller leads a write on a connection
                    # about to be closed (none may start anyway: abandon stops the store).
                    abandoned = self._abandoned
                    if not abandoned:
                        self._busy = False
                        self._last_write = time.monotonic()
                if abandoned:
                    deferred = outcomes  # woken only after the lock is released
                    break
                self._resolve(outcomes)
        finally:
            with self._cond:
                self._stopping = True  # from now on write() refuses instead of queueing
            try:
                self._shutdown()
            finally:
                with self._cond:
                    dropped = list(self._queue)
                    self._queue.clear()
                self._resolve(deferred)
                self._resolve(
                    [_Outcome(r, False, error=StoreClosed(self._closed_message())) for r in dropped]
                )

    def _next_batch(self) -> list[_Request] | None:
        """Wait for the writer thread's next batch, and mark it busy with it.

        An empty batch: the journal is idle, checkpoint it. None: the writer stops.
        """
        with self._cond:
            idle = False
            # While a caller leads its own write, wait: it notifies when it ends with
            # writes queued, a stop, or (once) enough commits to checkpoint after.
            while self._busy or (not self._queue and not self._stopping):
                if self._uncheckpointed < self._checkpoint_after:
                    self._cond.wait()
                    continue
                # Idle: no write (here or led by a caller) for checkpoint_idle_s.
                remaining = self._last_write + self._checkpoint_idle_s - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                elif self._busy:
                    self._cond.wait(self._checkpoint_idle_s)
                else:
                    idle = True
                    break
            if idle:
                batch = []
            elif self._abandoned or not self._queue:
                return None
            else:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), MAX_BATCH))]
            self._busy = True
            return batch

    def _checkpoint(self) -> None:
        """Copy the WAL back into the database while nobody writes (PASSIVE: readers are
        never blocked; what an open reader still needs is copied next time). A failure is
        logged and retried after the next commits: every commit is durable in the WAL.

        Once everything is copied, the next transaction starts the WAL over, and under
        synchronous=FULL it fsyncs the new header before its own frames: a write that
        changes nothing (the commit count's row deleted and inserted again with its value,
        so SQLite writes the page; not counted, nothing waits for it) pays that now, so
        the next burst's commits cost one fsync each (docs/benchmarks.md, "Tricks kept and removed")."""
        with self._cond:
            conn, failed = self._conn, self._failure is not None
            self._uncheckpointed = 0
            count = str(self._durable_commits)
        if failed:
            return
        try:
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if busy == 0 and frames > 0 and copied == frames:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("DELETE FROM meta WHERE key = 'commits'")
                conn.execute("INSERT INTO meta (key, value) VALUES ('commits', ?)", (count,))
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            log.warning("journal %s: checkpoint failed (retried later): %s", self._state_dir, exc)
            return
        with self._cond:
            self._checkpoints += 1
            self._cond.notify_all()

    def _closed_message(self) -> str:
        how = "abandoned" if self._abandoned else "closed"
        return f"journal store {self._state_dir} was {how} before this write was committed"

    def _run_batch(self, batch: list[_Request]) -> list[_Outcome]:
        with self._cond:  # clear_fault() swaps the connection while failed
            conn, failed = self._conn, self._failure is not None
        live = batch  # a write is never cancelled
        if failed:
            return [_Outcome(r, False, error=self._failed_error()) for r in live]
        try:
            self._faults.check("begin")
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._fail(exc)
            return [_Outcome(r, False, error=self._failed_error()) for r in live]
        outcomes: list[_Outcome] = []
        changes = 0
        # A function alone in its batch needs no savepoint: its failure rolls back the
        # whole transaction, which holds nothing else (the batch then commits nothing, as
        # after its savepoint's rollback). Most batches hold one write: two statements
        # fewer per commit, ~a fifth of the statements of a connect+remove.
        alone = len(live) == 1
        for index, request in enumerate(live):
            if self._abandoned:
                outcomes.extend(
                    _Outcome(r, False, error=StoreClosed(self._closed_message()))
                    for r in live[index:]
                )
                break
            before = conn.total_changes
            txn = Txn(conn, self)
            try:
                if not alone:
                    conn.execute("SAVEPOINT write_fn")
                value = request.fn(txn)
                txn._live = False
                if not alone:
                    conn.execute("RELEASE write_fn")
            except BaseException as exc:
                txn._live = False
                outcomes.append(_Outcome(request, False, error=exc))
                if not (_rollback_all(conn) if alone else _rollback_savepoint(conn)):
                    # SQLite aborted the whole transaction (I/O error, disk full...):
                    # earlier functions' changes are gone too.
                    self._fail(exc)
                    return self._lost(outcomes, live[index + 1 :])
                continue
            changes += conn.total_changes - before
            outcomes.append(_Outcome(request, True, value=value))
        if self._abandoned or changes == 0:
            _rollback(conn)
            if self._abandoned:
                return self._lost(outcomes, [], closed=True)
            return outcomes
        try:
            self._faults.check("commit")
            # Counted inside the transaction it counts: no extra fsync.
            conn.execute(
                "UPDATE meta SET value = ? WHERE key = 'commits'", (str(self._durable_commits + 1),)
            )
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            self._fail(exc)
            return self._lost(outcomes, [])
        with self._cond:
            self._commits += 1
            self._durable_commits += 1
            self._uncheckpointed += 1
        self._record_lease()
        return outcomes

    def _record_lease(self) -> None:
        """After the COMMIT is durable: the lease may lag the journal, never lead it."""
        if self._lease is None:
            return
        try:
            self._lease.record(self._journal_id, self._durable_commits)
        except OSError as exc:
            # Losing the lease weakens detection of a later rollback; it loses nothing.
            log.error(
                "journal lease %s not updated (%s); rollback detection is off",
                self._lease.path,
                exc,
            )
            self._lease.close()
            self._lease = None

    def _lost(
        self, outcomes: list[_Outcome], not_run: list[_Request], *, closed: bool = False
    ) -> list[_Outcome]:
        """Turn successes into errors when their transaction did not commit."""

        def error() -> BaseException:
            return StoreClosed(self._closed_message()) if closed else self._failed_error()

        result = [o if not o.ok else _Outcome(o.request, False, error=error()) for o in outcomes]
        result.extend(_Outcome(r, False, error=error()) for r in not_run)
        return result

    def _fail(self, exc: BaseException) -> None:
        with self._cond:
            if self._failure is None:
                self._failure = exc

    @staticmethod
    def _resolve(outcomes: list[_Outcome]) -> None:
        for o in outcomes:
            if o.ok:
                o.request.resolve(o.value, None)
            else:
                assert o.error is not None
                o.request.resolve(None, o.error)

    def _shutdown(self) -> None:
        """Close every connection and release the lock (writer thread, on exit)."""
        _rollback(self._conn)
        try:
            self._conn.close()
        finally:
            with self._readers_lock:
                self._readers_closed = True
                idle, self._idle_readers = self._idle_readers, []
            for conn in idle:
                conn.close()
            if self._lease is not None:
                self._lease.close()
            self._lock.release()


def _durable_commits(conn: sqlite3.Connection, state_dir: Path) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'commits'").fetchone()
    if row is None or not str(row[0]).isdigit():
        raise JournalUnavailable(state_dir, f"{DB_NAME} has a corrupt commit count {row!r}")
    return int(row[0])


def _rollback_savepoint(conn: sqlite3.Connection) -> bool:
    if not conn.in_transaction:
        return False
    try:
        conn.execute("ROLLBACK TO write_fn")
        conn.execute("RELEASE write_fn")
    except sqlite3.Error:
        return False
    return True


def _rollback_all(conn: sqlite3.Connection) -> bool:
    """``_rollback_savepoint`` for a function alone in its transaction: False if SQLite
    had aborted the transaction already or the rollback fails."""
    if not conn.in_transaction:
        return False
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        return False
    return True


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
