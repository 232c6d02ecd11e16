"""The durable core serves any journal format: sealed rows, its own marker, never mixed up."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from plugins.sdk.store import (
    JournalFormat,
    JournalUnavailable,
    Migration,
    Store,
    StoreError,
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
