"""The durable core serves any journal format: sealed rows, its own marker, never mixed up."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from plugins.sdk.store import (
    PLUGIN_JOURNAL,
    JournalFormat,
    JournalUnavailable,
    Migration,
    Store,
    StoreError,
    _schema,
)

NOTES = JournalFormat(
    "dra-networkplugins/test-notes",
    (
        Migration(
            1,
            "CREATE TABLE notes (name TEXT PRIMARY KEY, body TEXT, n INTEGER, "
            "checksum TEXT NOT NULL);"
            "INSERT INTO meta (key, value) VALUES ('commits', '0')",
        ),
    ),
    {"notes": ("name", "body", "n")},
)


def test_rows_are_sealed_replaced_by_key_and_deleted(tmp_path: Path) -> None:
    with Store.open(tmp_path, journal_format=NOTES, runtime_dir=tmp_path / "run") as store:
        store.write(lambda t: t.put("notes", {"name": "a", "body": "x", "n": 1}, key=["name"]))
        store.write(lambda t: t.put("notes", {"name": "a", "body": "y", "n": 2}, key=["name"]))
        store.write(lambda t: t.put("notes", {"name": "b", "body": None, "n": 3}, key=["name"]))
        assert store.read(lambda r: r.select("notes", {"name": "a"})) == [
            {"name": "a", "body": "y", "n": 2}
        ]
        assert store.write(lambda t: t.delete("notes", {"name": "b"})) == 1
        assert [r["name"] for r in store.read(lambda r: r.select("notes"))] == ["a"]
        with pytest.raises(StoreError, match="not a sealed table"):
            store.read(lambda r: r.select("operations"))
        with pytest.raises(StoreError, match="unknown columns"):
            store.write(lambda t: t.put("notes", {"name": "c", "nope": 1}, key=["name"]))


def test_an_altered_row_is_never_returned(tmp_path: Path) -> None:
    with Store.open(tmp_path, journal_format=NOTES) as store:
        store.write(lambda t: t.put("notes", {"name": "a", "body": "x", "n": 1}, key=["name"]))
    conn = sqlite3.connect(tmp_path / "journal.db")
    conn.execute("UPDATE notes SET n = 9")
    conn.commit()
    conn.close()
    with Store.open(tmp_path, journal_format=NOTES) as store:
        assert [d.describe() for d in store.damaged] == ["notes record a/x"]
        with pytest.raises(JournalUnavailable, match="notes record a/x fails its checksum"):
            store.read(lambda r: r.select("notes"))


def test_one_format_never_opens_another(tmp_path: Path) -> None:
    Store.open(tmp_path / "plugin").close()
    with pytest.raises(JournalUnavailable, match="not a journal of this store"):
        Store.open(tmp_path / "plugin", journal_format=NOTES)
    Store.open(tmp_path / "notes", journal_format=NOTES).close()
    with pytest.raises(JournalUnavailable, match="not a journal of this store"):
        Store.open(tmp_path / "notes")


def _schema_of(conn: sqlite3.Connection, fmt: JournalFormat) -> dict[str, object]:
    return {
        "master": conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"
        ).fetchall(),
        "meta": conn.execute("SELECT key, value FROM meta WHERE key != 'journal_id'").fetchall(),
        "rows": {t: conn.execute(f"SELECT * FROM {t}").fetchall() for t in fmt.tables},
        "pragmas": [
            conn.execute(f"PRAGMA {p}").fetchone()
            for p in ("page_size", "encoding", "user_version", "auto_vacuum", "quick_check")
        ],
    }


@pytest.mark.parametrize("fmt", [PLUGIN_JOURNAL, NOTES], ids=["plugin", "notes"])
def test_a_fresh_journal_is_what_its_migrations_build(tmp_path: Path, fmt: JournalFormat) -> None:
    """Fresh journals are copies of one image migrated in memory, stamped with their id."""
    migrated = sqlite3.connect(tmp_path / "migrated.db", isolation_level=None)
    try:
        _schema.bootstrap(migrated, "the-id", fmt)
        _schema.migrate(migrated, 0, fmt)
        expected = _schema_of(migrated, fmt)
    finally:
        migrated.close()
    ids = []
    for name in ("first", "second"):
        with Store.open(tmp_path / name, journal_format=fmt) as store:
            ids.append(store.journal_id)
        conn = sqlite3.connect(tmp_path / name / "journal.db")
        try:
            assert _schema_of(conn, fmt) == expected
            assert conn.execute("SELECT value FROM meta WHERE key = 'journal_id'").fetchone() == (
                ids[-1],
            )
        finally:
            conn.close()
    assert ids[0] != ids[1]
    second = (tmp_path / "second" / "journal.db").read_bytes()
    assert ids[0].encode() not in second, "an image carries no trace of the journal before it"


def test_a_format_without_a_commit_count_is_refused_before_any_file_exists(
    tmp_path: Path,
) -> None:
    uncounted = JournalFormat(
        "dra-networkplugins/test-uncounted",
        (Migration(1, "CREATE TABLE notes (name TEXT PRIMARY KEY, checksum TEXT NOT NULL)"),),
        {"notes": ("name",)},
    )
    with pytest.raises(StoreError, match="meta has no commit count"):
        Store.open(tmp_path / "state", journal_format=uncounted)
    assert {p.name for p in (tmp_path / "state").iterdir()} == {"writer.lock"}
