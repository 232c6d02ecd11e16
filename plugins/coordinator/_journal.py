"""The coordinator's own journal: what it authorized and requested, and who owns what.

It shares operation identities with the plugin journals (the coordinator mints
every operation id), so after a crash on either side the two can be compared.
SQLite with WAL and synchronous=FULL, one writer per state directory, explicit
BEGIN IMMEDIATE transactions, like the plugin store.

A call is *open* while the coordinator still owes it something (an outcome, a retry, a
cleanup or an operator) and *closed* once nothing more will happen to it; docs/coordinator.md
has the transitions.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plugins.sdk import NetworkPluginError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    operation_id TEXT PRIMARY KEY,
    unit TEXT NOT NULL,          -- preparation or attachment id
    step TEXT NOT NULL,
    plugin TEXT NOT NULL,
    hook TEXT NOT NULL,
    generation INTEGER NOT NULL,
    request_json TEXT NOT NULL,
    state TEXT NOT NULL,         -- OPEN_CALL_STATES or CLOSED_CALL_STATES
    response_json TEXT,
    error TEXT,
    seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS calls_by_unit ON calls (unit, step);
CREATE TABLE IF NOT EXISTS units (
    unit TEXT PRIMARY KEY,
    kind TEXT NOT NULL,          -- preparation or attachment
    topology TEXT NOT NULL,
    state TEXT NOT NULL,         -- preparing, prepared, connecting, ready, failed, removing, removed, unprepared
    detail_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS claims (
    resource TEXT NOT NULL,      -- physical resource or domain key, e.g. pci:0000:03:10.0
    holder TEXT NOT NULL,        -- the preparation that holds it
    mode TEXT NOT NULL,          -- exclusive or shared
    grp TEXT NOT NULL,           -- compatibility group for shared claims ('' for exclusive)
    PRIMARY KEY (resource, holder)
);
"""


OPEN_CALL_STATES = ("requested", "failed", "pending", "quarantined")
"""``requested``: journaled before the RPC, outcome unknown. ``failed``: the plugin refused a
create (effects it attempted wait for a retry or a cleanup). ``pending`` / ``quarantined``:
a cleanup receipt that is not CLEANED (retry later / an operator must reconcile)."""

CLOSED_CALL_STATES = ("succeeded", "cleaned", "abandoned")
"""``succeeded``: a create's response. ``cleaned``: a cleanup's CLEANED receipt.
``abandoned``: a call that never succeeded, closed by the CLEANED receipt of its step's
cleanup (the evidence is stored as its response)."""


class JournalError(NetworkPluginError):
    pass


@dataclass(frozen=True)
class Call:
    operation_id: str
    unit: str
    step: str
    plugin: str
    hook: str
    generation: int
    request: dict[str, Any]
    state: str
    response: dict[str, Any] | None
    error: str | None


@dataclass(frozen=True)
class Claim:
    resource: str
    holder: str
    mode: str
    group: str


_OPEN = ", ".join(f"'{state}'" for state in OPEN_CALL_STATES)


class CoordinatorJournal:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_fd = os.open(state_dir / "writer.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(self._lock_fd)
            raise JournalError(f"coordinator journal {state_dir} has another writer") from exc
        self._db = sqlite3.connect(
            state_dir / "coordinator.db", isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)
        self._mutex = threading.RLock()

    def close(self) -> None:
        with self._mutex:
            self._db.close()
            os.close(self._lock_fd)

    def abandon(self) -> None:
        """Simulate a crash of the coordinator: drop the connection and the writer lock.

        Nothing is committed on the way out (SQLite discards an open transaction), so a
        new journal on the same directory sees exactly what a restarted process would.
        """
        self._db.close()
        os.close(self._lock_fd)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._mutex:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- calls ------------------------------------------------------------------------------

    def record_call(self, call: Call) -> None:
        """Record the intent to call a plugin, before the RPC leaves this process.

        A re-send keeps the existing record (same operation id, same seq). A re-send of an
        open call is ``requested`` again: until its response arrives nobody knows its
        outcome. A re-send of a closed call stays closed: the plugin replays it.
        """
        with self.transaction() as db:
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM calls").fetchone()[0]
            db.execute(
                "INSERT INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(operation_id) "
                f"DO UPDATE SET state = 'requested' WHERE state IN ({_OPEN})",
                (
                    call.operation_id,
                    call.unit,
                    call.step,
                    call.plugin,
                    call.hook,
                    call.generation,
                    json.dumps(call.request, sort_keys=True),
                    call.state,
                    None,
                    None,
                    seq,
                ),
            )

    def finish_call(
        self, operation_id: str, state: str, response: Any = None, error: str | None = None
    ) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE calls SET state = ?, response_json = ?, error = ? WHERE operation_id = ?",
                (
                    state,
                    None if response is None else json.dumps(response, sort_keys=True),
                    error,
                    operation_id,
                ),
            )

    def finish_cleanup(self, operation_id: str, receipt: Any) -> list[str]:
        """Record a CLEANED cleanup receipt and close every open call of its unit and step.

        One transaction: a restart never sees the receipt without the calls it closes.
        Each closed call becomes ``abandoned`` with the evidence (its previous state, the
        cleanup's operation id and receipt) as its response; its error text is kept.
        Returns the operation ids it closed.
        """
        with self.transaction() as db:
            row = db.execute(
                "SELECT unit, step FROM calls WHERE operation_id = ?", (operation_id,)
            ).fetchone()
            if row is None:
                raise JournalError(f"cleanup {operation_id} was never recorded")
            db.execute(
                "UPDATE calls SET state = 'cleaned', response_json = ?, error = NULL "
                "WHERE operation_id = ?",
                (json.dumps(receipt, sort_keys=True), operation_id),
            )
            open_calls = db.execute(
                "SELECT operation_id, state FROM calls WHERE unit = ? AND step = ? "
                f"AND operation_id != ? AND state IN ({_OPEN}) ORDER BY seq",
                (row[0], row[1], operation_id),
            ).fetchall()
            for closed, was in open_calls:
                evidence = {"was": was, "cleanup": operation_id, "receipt": receipt}
                db.execute(
                    "UPDATE calls SET state = 'abandoned', response_json = ? WHERE operation_id = ?",
                    (json.dumps(evidence, sort_keys=True), closed),
                )
        return [closed for closed, _ in open_calls]

    def calls(self, unit: str | None = None) -> list[Call]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT * FROM calls WHERE (? IS NULL OR unit = ?) ORDER BY seq", (unit, unit)
            ).fetchall()
        return [
            Call(
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                json.loads(r[6]),
                r[7],
                json.loads(r[8]) if r[8] else None,
                r[9],
            )
            for r in rows
        ]

    def call(self, operation_id: str) -> Call | None:
        return next((c for c in self.calls() if c.operation_id == operation_id), None)

    # -- units ------------------------------------------------------------------------------

    def set_unit(
        self, unit: str, kind: str, topology: str, state: str, detail: dict[str, Any] | None = None
    ) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO units VALUES (?,?,?,?,?) ON CONFLICT(unit) DO UPDATE SET state = excluded.state, "
                "detail_json = excluded.detail_json",
                (unit, kind, topology, state, json.dumps(detail or {}, sort_keys=True)),
            )

    def unit(self, unit: str) -> tuple[str, dict[str, Any]] | None:
        with self._mutex:
            row = self._db.execute(
                "SELECT state, detail_json FROM units WHERE unit = ?", (unit,)
            ).fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    # -- claims -----------------------------------------------------------------------------

    def claims(self, resource: str | None = None) -> list[Claim]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT resource, holder, mode, grp FROM claims WHERE (? IS NULL OR resource = ?) "
                "ORDER BY resource, holder",
                (resource, resource),
            ).fetchall()
        return [Claim(*r) for r in rows]
