"""The journal's SQL schema, its ordered migrations and connection setup."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from ._errors import StoreError
from ._integrity import TABLES, Tables

FORMAT: Final = "dra-networkplugins/journal"
"""Value of the ``format`` meta key: marks a database as one of our journals."""

BUSY_TIMEOUT_MS: Final = 5000

_V2: Final = """
CREATE TABLE scopes (
    partition TEXT NOT NULL,
    scope TEXT NOT NULL,
    generation INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    fence_operation_id TEXT NOT NULL DEFAULT '',
    checksum TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (partition, scope)
);

CREATE TABLE operations (
    partition TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    seq INTEGER NOT NULL UNIQUE,
    hook TEXT NOT NULL,
    scope TEXT NOT NULL,
    step TEXT NOT NULL,
    semantic_digest TEXT NOT NULL,
    artifact_digest TEXT NOT NULL,
    contract_digest TEXT NOT NULL,
    generation INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    request_json TEXT NOT NULL,
    plan_json TEXT,
    state TEXT NOT NULL,
    response_json TEXT,
    error_json TEXT,
    target_operation_id TEXT NOT NULL DEFAULT '',
    cleanup_status TEXT,
    checksum TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (partition, operation_id)
);
CREATE INDEX operations_by_scope ON operations (partition, scope, seq);
CREATE INDEX operations_by_state ON operations (state, seq);

CREATE TABLE effects (
    partition TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    effect_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    before_json TEXT,
    outputs_json TEXT,
    detail TEXT NOT NULL DEFAULT '',
    attempts INTEGER NOT NULL DEFAULT 0,
    checksum TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (partition, operation_id, effect_id),
    UNIQUE (partition, operation_id, position),
    FOREIGN KEY (partition, operation_id) REFERENCES operations (partition, operation_id)
);

INSERT INTO meta (key, value) VALUES ('last_seq', '0');
INSERT INTO meta (key, value) VALUES ('commits', '0')
"""
"""The first released plugin journal (version 2: version 1, without checksums, was never
released, and a journal at it is refused)."""


@dataclass(frozen=True)
class Migration:
    """One schema step, applied in its own transaction: ``sql`` then ``then(conn)``."""

    version: int
    sql: str
    then: Callable[[sqlite3.Connection], None] | None = None


@dataclass(frozen=True)
class JournalFormat:
    """What makes a database one kind of journal: its marker, migrations, sealed tables.

    Every journal kind (a plugin service's, the coordinator's) shares the durable core:
    identity file, staging, lease, writer lock, group commit, checksums, faults.
    Every table in ``tables`` has a ``checksum`` column over the listed columns, and
    the ``meta`` table holds a ``commits`` counter from the first migration that
    makes the journal usable (the lease compares against it).
    """

    name: str
    migrations: tuple[Migration, ...]
    tables: Tables

    @property
    def version(self) -> int:
        """The newest schema version this code reads and writes."""
        return self.migrations[-1].version

    @property
    def readable(self) -> tuple[int, ...]:
        """The versions a journal may be at to be opened: each migration's (the first
        builds the oldest released format from nothing; every later one upgrades the
        version before it). Any other version is refused, never guessed at.

        A format change appends a ``Migration`` with the next version and leaves the
        earlier ones as released; its test opens a journal of every earlier version
        (``tests/unit/journals``, ``tests/unit/test_journal_versions.py``).
        """
        return tuple(step.version for step in self.migrations)


PLUGIN_JOURNAL: Final = JournalFormat(
    FORMAT,
    (Migration(2, _V2),),
    TABLES,
)
"""A plugin service's journal (operations, effects, scopes)."""

SCHEMA_VERSION: Final = PLUGIN_JOURNAL.version
"""The newest plugin store format this code reads and writes."""

_BOOTSTRAP: Final = "CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)"


def connect(path: Path, mode: Literal["ro", "rw", "rwc"]) -> sqlite3.Connection:
    """Open ``path`` without implicit transactions; only ``rwc`` may create the file.

    ``check_same_thread`` is off because the store hands connections between
    threads (never using one from two threads at once).
    """
    uri = f"{path.absolute().as_uri()}?mode={mode}"
    return sqlite3.connect(
        uri,
        uri=True,
        isolation_level=None,
        check_same_thread=False,
        timeout=BUSY_TIMEOUT_MS / 1000,
    )


def _pragma(conn: sqlite3.Connection, statement: str) -> object:
    row = conn.execute(f"PRAGMA {statement}").fetchone()
    return None if row is None else row[0]


def _expect(conn: sqlite3.Connection, setting: str, query: str, expected: object) -> None:
    _pragma(conn, setting)
    actual = _pragma(conn, query)
    if actual != expected:
        raise StoreError(f"sqlite refused PRAGMA {setting}: {query} is {actual!r}")


# Pages in the WAL at which a COMMIT checkpoints inline (SQLite's own automatic
# checkpoint, default 1,000): only a backstop. The store's writer checkpoints when the
# journal is idle (``Store``), so a burst's commits do not wait for one.
AUTOCHECKPOINT_PAGES: Final = 10_000


def configure_writer(conn: sqlite3.Connection) -> None:
    """WAL, synchronous=FULL, busy timeout, foreign keys, the inline checkpoint's
    backstop; verified, not assumed."""
    mode = _pragma(conn, "journal_mode=WAL")
    if str(mode).lower() != "wal":
        raise StoreError(f"sqlite could not enable WAL on the journal (journal_mode is {mode!r})")
    _expect(conn, "synchronous=FULL", "synchronous", 2)
    _expect(
        conn,
        f"wal_autocheckpoint={AUTOCHECKPOINT_PAGES}",
        "wal_autocheckpoint",
        AUTOCHECKPOINT_PAGES,
    )
    _expect(conn, f"busy_timeout={BUSY_TIMEOUT_MS}", "busy_timeout", BUSY_TIMEOUT_MS)
    _expect(conn, "foreign_keys=ON", "foreign_keys", 1)


def configure_reader(conn: sqlite3.Connection) -> None:
    _expect(conn, f"busy_timeout={BUSY_TIMEOUT_MS}", "busy_timeout", BUSY_TIMEOUT_MS)
    _expect(conn, "foreign_keys=ON", "foreign_keys", 1)
    _expect(conn, "query_only=ON", "query_only", 1)


def bootstrap(conn: sqlite3.Connection, journal_id: str, fmt: JournalFormat) -> None:
    """Create the meta table of a brand-new journal (schema version 0)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_BOOTSTRAP)
        conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            [("format", fmt.name), ("journal_id", journal_id), ("schema_version", "0")],
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def read_meta(conn: sqlite3.Connection) -> dict[str, str] | None:
    """The meta table as a dict, or None when there is no meta table."""
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if found is None:
        return None
    return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}


def migrate(conn: sqlite3.Connection, current: int, fmt: JournalFormat) -> int:
    """Apply every migration newer than ``current``, one transaction each."""
    for step in fmt.migrations:
        if step.version <= current:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Statement by statement: executescript() would commit the open transaction.
            for statement in filter(str.strip, step.sql.split(";")):
                conn.execute(statement)
            if step.then is not None:
                step.then(conn)
            conn.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(step.version),)
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        current = step.version
    return current
