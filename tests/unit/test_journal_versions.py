"""The plugin journal's format is versioned: every released version opens, nothing else does.

``tests/unit/journals/plugin-v<N>.sql`` is a journal as format version N wrote it (an
SQLite dump), beside the records it holds (``plugin-v<N>.json``). A format change
appends a ``Migration`` to ``PLUGIN_JOURNAL`` and adds its own journal here
(``python -m tests.unit.test_journal_versions`` writes the current version's); the
journals of the earlier versions stay and must still open, migrated, with their records:
that is the migration test of the change. ``test_the_pattern_of_a_migration_test`` shows
it on a made-up next version.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from plugins.sdk import EffectState, Hook, OperationState
from plugins.sdk.store import (
    PLUGIN_JOURNAL,
    EffectRecord,
    JournalFormat,
    JournalFormatUnsupported,
    Migration,
    OperationRecord,
    ScopeRecord,
    Store,
)

JOURNALS = Path(__file__).with_name("journals")
P = "links/vlan"


def _fill(store: Store) -> None:
    """A little of everything a journal holds: a scope, finished and unfinished
    operations, effects in several states, a response, an error."""
    done = OperationRecord(
        partition=P,
        operation_id="op-1",
        hook=Hook.CONNECT_NETWORK,
        scope="att-1",
        step="vlan0",
        semantic_digest="sem-1",
        artifact_digest="sha256:artifact",
        contract_digest="sha256:contract",
        generation=1,
        epoch=1,
        request_json='{"op": 1}',
        plan_json='{"effects": []}',
        state=OperationState.RUNNING,
    )
    effects = tuple(
        EffectRecord(
            partition=P,
            operation_id="op-1",
            effect_id=f"e{i}",
            position=i,
            kind="linux/create-vlan/v1",
        )
        for i in range(3)
    )

    def write(t: Any) -> None:
        t.put_scope(ScopeRecord(partition=P, scope="att-1", generation=1, epoch=1))
        inserted = t.insert_operation(done, effects)
        t.update_effect(
            dataclasses.replace(
                effects[0],
                state=EffectState.APPLIED,
                before_json="{}",
                outputs_json='{"x": 1}',
                attempts=1,
            )
        )
        t.update_effect(
            dataclasses.replace(
                effects[1],
                state=EffectState.APPLYING,
                before_json='{"a": 2}',
                attempts=2,
                detail="seen",
            )
        )
        t.update_operation(
            dataclasses.replace(inserted, state=OperationState.FAILED, error_json='{"m": "x"}')
        )
        other = dataclasses.replace(
            done, operation_id="op-2", scope="att-2", semantic_digest="sem-2"
        )
        t.update_operation(
            dataclasses.replace(
                t.insert_operation(other, ()),
                state=OperationState.SUCCEEDED,
                response_json='{"r": 1}',
            )
        )

    store.write(write)


def _records(store: Store) -> dict[str, list[dict[str, Any]]]:
    def read(r: Any) -> dict[str, list[Any]]:
        ops = [r.operation(P, "op-1"), r.operation(P, "op-2")]
        return {
            "scopes": [r.scope(P, "att-1")],
            "operations": ops,
            "effects": [e for o in ops for e in r.effects(P, o.operation_id)],
        }

    return {
        table: [json.loads(json.dumps(dataclasses.asdict(rec))) for rec in recs]
        for table, recs in store.read(read).items()
    }


def _restore(dump: Path, state_dir: Path) -> None:
    state_dir.mkdir(mode=0o700)
    conn = sqlite3.connect(state_dir / "journal.db")
    try:
        conn.executescript(dump.read_text())
        (journal_id,) = conn.execute("SELECT value FROM meta WHERE key = 'journal_id'").fetchone()
    finally:
        conn.close()
    (state_dir / "journal.id").write_text(f"{journal_id}\n")


def _version(conn_path: Path) -> int:
    conn = sqlite3.connect(conn_path)
    try:
        (value,) = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    finally:
        conn.close()
    return int(value)


def test_every_released_version_has_a_journal_here() -> None:
    kept = sorted(int(p.stem.removeprefix("plugin-v")) for p in JOURNALS.glob("plugin-v*.sql"))
    assert kept == list(PLUGIN_JOURNAL.readable), (
        "a format version without its journal here has no migration test: run "
        "python -m tests.unit.test_journal_versions"
    )


@pytest.mark.parametrize("version", PLUGIN_JOURNAL.readable)
def test_a_journal_of_each_released_version_opens_with_its_records(
    tmp_path: Path, version: int
) -> None:
    state = tmp_path / "state"
    _restore(JOURNALS / f"plugin-v{version}.sql", state)
    expected = json.loads((JOURNALS / f"plugin-v{version}.json").read_text())
    with Store.open(state) as store:
        assert store.damaged == ()
        found = _records(store)
    # A later version may add fields; the ones this version wrote keep their values.
    assert {
        table: [{k: rec[k] for k in want} for rec, want in zip(found[table], rows, strict=True)]
        for table, rows in expected.items()
    } == expected
    assert _version(state / "journal.db") == PLUGIN_JOURNAL.version


def test_the_pattern_of_a_migration_test(tmp_path: Path) -> None:
    """A journal of today under a made-up next version: migrated once, its records and
    checksums intact; then today's code refuses it, naming both versions."""
    following = PLUGIN_JOURNAL.version + 1
    upgraded = JournalFormat(
        PLUGIN_JOURNAL.name,
        (
            *PLUGIN_JOURNAL.migrations,
            Migration(following, "ALTER TABLE effects ADD COLUMN note TEXT NOT NULL DEFAULT ''"),
        ),
        PLUGIN_JOURNAL.tables,
    )
    state = tmp_path / "state"
    with Store.open(state) as store:
        _fill(store)
        before = _records(store)
    with Store.open(state, journal_format=upgraded) as store:
        assert store.damaged == ()
        assert _records(store) == before
    assert _version(state / "journal.db") == following
    with pytest.raises(JournalFormatUnsupported) as refused:
        Store.open(state)
    assert (
        f"store format {following} (newer than this build; this build reads store format "
        f"{PLUGIN_JOURNAL.version})"
    ) in str(refused.value)


def test_an_unreleased_older_version_is_refused_naming_both(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with Store.open(state) as store:
        _fill(store)
    conn = sqlite3.connect(state / "journal.db")
    try:
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        conn.commit()
    finally:
        conn.close()
    with pytest.raises(JournalFormatUnsupported) as refused:
        Store.open(state)
    assert (
        f"store format 1 (not a released one; this build reads store format "
        f"{PLUGIN_JOURNAL.version})"
    ) in str(refused.value)
    assert _version(state / "journal.db") == 1  # refused before anything was written


def write_current(directory: Path = JOURNALS) -> Path:
    """Write the current version's journal and its records (a new format version's step)."""
    import tempfile

    directory.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        with Store.open(Path(tmp) / "state") as store:
            _fill(store)
            records = _records(store)
        conn = sqlite3.connect(Path(tmp) / "state" / "journal.db")
        try:
            dump = "\n".join(conn.iterdump()) + "\n"
        finally:
            conn.close()
    target = directory / f"plugin-v{PLUGIN_JOURNAL.version}.sql"
    target.write_text(dump)
    target.with_suffix(".json").write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    return target


if __name__ == "__main__":
    print(write_current())
