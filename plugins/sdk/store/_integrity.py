"""Record checksums: an altered record is detected, never replayed.

SQLite checks the structure of its pages, not their contents: a byte flipped
inside a record's text (a bad sector, a stray write, an edit with the sqlite3
shell) reads back as a valid, different record. Every row of ``scopes``,
``operations`` and ``effects`` therefore carries a checksum over its canonical
bytes (the table name and every column, in the order below, as JSON), written
with the row and verified on every read. WAL frames carry SQLite's own
checksums; a frame that fails them ends the log there, which the lease's
commit count then reports as lost commits.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

SCOPE_COLUMNS: Final = ("partition", "scope", "generation", "epoch", "fence_operation_id")
OPERATION_COLUMNS: Final = (
    "partition",
    "operation_id",
    "hook",
    "scope",
    "step",
    "semantic_digest",
    "artifact_digest",
    "contract_digest",
    "generation",
    "epoch",
    "request_json",
    "state",
    "plan_json",
    "response_json",
    "error_json",
    "target_operation_id",
    "cleanup_status",
    "seq",
)
EFFECT_COLUMNS: Final = (
    "partition",
    "operation_id",
    "effect_id",
    "position",
    "kind",
    "state",
    "before_json",
    "outputs_json",
    "detail",
    "attempts",
)
TABLES: Final = {
    "scopes": SCOPE_COLUMNS,
    "operations": OPERATION_COLUMNS,
    "effects": EFFECT_COLUMNS,
}
"""The plugin journal's checksummed tables and their columns, in checksum order."""

Tables = Mapping[str, tuple[str, ...]]


_CANONICAL: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)
"""The encoder ``json.dumps(..., separators=(",", ":"), ensure_ascii=True)`` builds on
every call; it keeps no state between calls, so one serves every thread."""


def checksum(table: str, values: Sequence[object]) -> str:
    """The checksum of one row: SHA-256 of its canonical JSON, 128 bits in hex."""
    body = _CANONICAL.encode((table, *values))  # a tuple is a JSON array, as the list it was
    return hashlib.sha256(body.encode("ascii")).hexdigest()[:32]


@dataclass(frozen=True)
class DamagedRecord:
    """A row whose checksum does not match; its partition and scope as stored (may be wrong).

    ``partition`` and ``scope`` are empty for journals without scopes (the coordinator's).
    """

    table: str
    partition: str
    scope: str
    key: str

    def describe(self) -> str:
        where = f" (scope {self.partition}/{self.scope})" if self.scope else ""
        return f"{self.table} record {self.key}{where}"


def damaged_records(conn: sqlite3.Connection, tables: Tables = TABLES) -> list[DamagedRecord]:
    """Every row of the journal whose checksum fails (a full scan, run once at open)."""
    found: list[DamagedRecord] = []
    for table, columns in tables.items():
        rows = conn.execute(f"SELECT {', '.join(columns)}, checksum FROM {table}").fetchall()
        for row in rows:
            if checksum(table, row[:-1]) == row[-1]:
                continue
            found.append(_damaged(conn, table, row, tables is TABLES))
    return found


def _damaged(
    conn: sqlite3.Connection, table: str, row: Sequence[object], scoped: bool
) -> DamagedRecord:
    if not scoped:
        return DamagedRecord(table, "", "", "/".join(str(v) for v in row[:2]))
    partition = str(row[0])
    if table == "scopes":
        return DamagedRecord(table, partition, str(row[1]), f"{partition}/{row[1]}")
    if table == "operations":
        return DamagedRecord(table, partition, str(row[3]), f"{partition}/{row[1]}")
    scope = conn.execute(
        "SELECT scope FROM operations WHERE partition = ? AND operation_id = ?", (row[0], row[1])
    ).fetchone()
    return DamagedRecord(
        table, partition, "?" if scope is None else str(scope[0]), f"{partition}/{row[1]}/{row[2]}"
    )
