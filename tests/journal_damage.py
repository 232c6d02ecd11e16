"""Ways the tests damage a journal on disk, as a restore script, an operator or a disk would."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def sqlite_backup(db: Path, dest: Path) -> None:
    """A consistent copy of a live journal, as a backup job takes it (SQLite's backup API)."""
    source = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    target = sqlite3.connect(dest)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()


def replace_once(path: Path, needle: str, replacement: str) -> None:
    """Overwrite the one occurrence of ``needle`` in ``path`` with a same-length text."""
    data = path.read_bytes()
    assert data.count(needle.encode()) == 1, f"{needle!r} must occur once in {path.name}"
    assert len(needle) == len(replacement)
    path.write_bytes(data.replace(needle.encode(), replacement.encode()))


def flip_first(path: Path, needle: str) -> None:
    """Alter the first byte of the first occurrence of ``needle`` in ``path``."""
    data = path.read_bytes()
    at = data.find(needle.encode())
    assert at >= 0, f"{needle} is not in {path.name}"
    path.write_bytes(data[:at] + b"X" + data[at + 1 :])
