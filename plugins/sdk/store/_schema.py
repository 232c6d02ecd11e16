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

    Two versions are kept apart (docs/file-formats.md, "Versions"): the **store
    format** (``version``: tables, columns, record encoding; meta ``schema_version``)
    and, for a journal of effect records, the **effect format** (``effect_formats``:
    the encoding of plans, before-images and outputs a build must still execute and
    undo; meta ``effect_formats``).
    """

    name: str
    migrations: tuple[Migration, ...]
    tables: Tables
    effect_formats: tuple[int, ...] = ()
    """The effect formats whose records this build executes and undoes, oldest first;
    the last is the one it writes. Empty: the journal holds no effect records (the
    coordinator's), and its meta table has no ``effect_formats`` key."""

    @property
    def version(self) -> int:
        """The newest schema version (store format) this code reads and writes."""
        return self.migrations[-1].version

    @property
    def effect_format(self) -> int:
        """The effect format this build writes its records in (0: none)."""
        return self.effect_formats[-1] if self.effect_formats else 0

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
    effect_formats=(1,),
)
"""A plugin service's journal (operations, effects, scopes)."""

SCHEMA_VERSION: Final = PLUGIN_JOURNAL.version
"""The newest plugin store format this code reads and writes."""

EFFECT_FORMAT: Final = PLUGIN_JOURNAL.effect_format
"""The effect format this build writes: plans (``Plan.to_json``), before-images and
observed outputs as canonical JSON, each effect's payload under its versioned kind."""

EFFECT_FORMATS_KEY: Final = "effect_formats"
"""The meta key listing the effect formats of the records a journal holds ("1", "1,2")."""

LEGACY_EFFECT_FORMATS: Final = (1,)
"""What a plugin journal without ``effect_formats`` holds: it was written before the key
existed, when effect format 1 was the only one."""

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


# SQLite's page cache per connection, in KiB (its default is 2 MiB). The store keeps a
# writer and up to MAX_IDLE_READERS readers open, and each cache fills with the journal's
# pages as hooks read them: 4,000 hooks grew an idle links service by 6.8 % with the
# default, 2.5 % with this, in the same time (docs/benchmarks.md, P8). A page not cached
# here is one pread from the kernel's page cache.
PAGE_CACHE_KIB: Final = 256


def configure_writer(conn: sqlite3.Connection) -> None:
    """WAL, synchronous=FULL, busy timeout, foreign keys, the inline checkpoint's
    backstop, the page cache's size; verified, not assumed."""
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
    _expect(conn, f"cache_size=-{PAGE_CACHE_KIB}", "cache_size", -PAGE_CACHE_KIB)


def configure_reader(conn: sqlite3.Connection) -> None:
    _expect(conn, f"busy_timeout={BUSY_TIMEOUT_MS}", "busy_timeout", BUSY_TIMEOUT_MS)
    _expect(conn, "foreign_keys=ON", "foreign_keys", 1)
    _expect(conn, "query_only=ON", "query_only", 1)
    _expect(conn, f"cache_size=-{PAGE_CACHE_KIB}", "cache_size", -PAGE_CACHE_KIB)


def bootstrap(conn: sqlite3.Connection, journal_id: str, fmt: JournalFormat) -> None:
    """Create the meta table of a brand-new journal (schema version 0), with the effect
    format it will write its records in (a journal of effect records)."""
    rows = [("format", fmt.name), ("journal_id", journal_id), ("schema_version", "0")]
    if fmt.effect_formats:
        rows.append((EFFECT_FORMATS_KEY, str(fmt.effect_format)))
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_BOOTSTRAP)
        conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", rows)
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


def held_effect_formats(meta: dict[str, str], fmt: JournalFormat) -> tuple[int, ...] | None:
    """The effect formats a journal's meta says its records are in; None if the value is
    not a list of formats (damage). () for a journal kind without effect records."""
    if not fmt.effect_formats:
        return ()
    raw = meta.get(EFFECT_FORMATS_KEY)
    if raw is None:
        return LEGACY_EFFECT_FORMATS
    parts = raw.split(",")
    if not all(part.isdigit() and part == str(int(part)) for part in parts):
        return None
    formats = tuple(sorted({int(part) for part in parts}))
    return formats if 0 not in formats else None


def record_effect_format(
    conn: sqlite3.Connection, fmt: JournalFormat, held: tuple[int, ...]
) -> tuple[int, ...]:
    """Add the effect format this build writes to a journal that does not list it yet
    (opened by this build for the first time after an upgrade): from now on its records
    may be in it, so an older build that cannot execute them refuses the journal. One
    transaction; a journal already listing it is not written."""
    if not fmt.effect_formats or fmt.effect_format in held:
        return held
    formats = tuple(sorted({*held, fmt.effect_format}))
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (EFFECT_FORMATS_KEY, ",".join(map(str, formats))),
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return formats
