"""The database image of a brand-new journal: migrated once per process, stamped per journal.

Every fresh journal of one format has the same schema and the same rows; only its
journal id differs. Building each one through its migrations (one transaction per
schema step on the staging file, every DDL statement parsed and executed, a sync at
every COMMIT) was half the CPU of opening a fresh journal, and every in-process crash
run of the fake tier opens four. So the migrations run once per process and format,
in memory, and a fresh journal is a copy of that image carrying its own id
(``_journal._initialise`` writes it to the staging file in one write and syncs it).

The image is made by the very code that upgrades an existing journal (``bootstrap``
then ``migrate`` from version 0), so a fresh journal cannot differ from a migrated
one, and it is checked before the first journal is made from it: SQLite's
``quick_check``, the meta table of this format at its newest version (and effect
format) with a commit count, every sealed row's checksum, and the placeholder id stored
exactly once (so stamping the id changes nothing else, and a fresh journal has no
damaged record).
What the image and its per-process cache buy, and the tests that pin them:
docs/benchmarks.md, "Tricks kept and removed".
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Final

from ._errors import StoreError
from ._integrity import damaged_records
from ._schema import EFFECT_FORMATS_KEY, JournalFormat, bootstrap, migrate, read_meta

PLACEHOLDER_ID: Final = "00000000-0000-0000-0000-000000000000"
"""The journal id the image is migrated with, replaced by each journal's own."""


class _Template:
    """The migrated in-memory database of one format; ``stamp`` sets its id and copies it.

    Kept open, so its schema is parsed once: a fresh in-memory copy per journal
    (``deserialize``, then the UPDATE) parsed it every time, 0.1 ms of a fresh open.
    An id of the same length is overwritten in place; ``secure_delete`` makes sure no
    freed space keeps one either, so an image carries no trace of the journal stamped
    before it.
    """

    def __init__(self, fmt: JournalFormat) -> None:
        self.format = fmt
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        try:
            self._conn.execute("PRAGMA secure_delete=ON")
            bootstrap(self._conn, PLACEHOLDER_ID, fmt)
            migrate(self._conn, 0, fmt)
            problems = _problems(self._conn, fmt)
        except BaseException:
            self._conn.close()
            raise
        if problems:
            self._conn.close()
            raise StoreError(f"a fresh {fmt.name} journal would be invalid: {'; '.join(problems)}")

    def stamp(self, journal_id: str) -> bytes:
        with self._lock:
            self._conn.execute("UPDATE meta SET value = ? WHERE key = 'journal_id'", (journal_id,))
            return self._conn.serialize()


_lock = threading.Lock()
_templates: dict[int, _Template] = {}  # by id(): formats are unhashable (``tables`` is a dict)


def fresh_image(fmt: JournalFormat, journal_id: str) -> bytes:
    """The bytes of a new journal of ``fmt`` with ``journal_id``, in rollback-journal mode."""
    with _lock:
        template = _templates.get(id(fmt))
        if template is None or template.format is not fmt:
            template = _templates[id(fmt)] = _Template(fmt)
    return template.stamp(journal_id)


def _problems(conn: sqlite3.Connection, fmt: JournalFormat) -> list[str]:
    problems: list[str] = []
    check = conn.execute("PRAGMA quick_check").fetchall()
    if check != [("ok",)]:
        problems.append(f"quick_check says {check[:3]}")
    meta = read_meta(conn) or {}
    expected = {"format": fmt.name, "journal_id": PLACEHOLDER_ID}
    expected["schema_version"] = str(fmt.version)
    if fmt.effect_formats:
        expected[EFFECT_FORMATS_KEY] = str(fmt.effect_format)
    for key, value in expected.items():
        if meta.get(key) != value:
            problems.append(f"meta {key} is {meta.get(key)!r}, not {value!r}")
    if not meta.get("commits", "").isdigit():
        problems.append("meta has no commit count")
    if damaged_records(conn, fmt.tables):
        problems.append("its migrations leave rows that fail their checksum")
    if conn.serialize().count(PLACEHOLDER_ID.encode("ascii")) != 1:
        problems.append("the journal id is not stored exactly once")
    return problems
