"""Three versions kept apart: the journal's store format, its records' effect format, the
topology config a plugin reads (docs/file-formats.md, "Versions").

Written when a journal is created, reported by GetInfo over the real socket, and a
journal this build cannot serve (a newer or unknown store format, records of an effect
format it cannot execute) refused in one line naming the file and both versions, every
byte of it as it was: ``journal.db``, ``journal.id`` and, after a crash, its ``-wal`` and
``-shm`` (no sidecar created either). Doctor's line: tests/ctl/test_doctor_versions.py.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from plugins.coordinator import CoordinatorJournal
from plugins.sdk.host import Host, PluginClient
from plugins.sdk.service import EXIT_REFUSED
from plugins.sdk.store import (
    EFFECT_FORMAT,
    PLUGIN_JOURNAL,
    SCHEMA_VERSION,
    JournalFormatUnsupported,
    JournalUnavailable,
    Store,
)

from ..runner import node as n
from ..runner.node import ToyNode
from ..runner.test_journal_loss_service import ToyDeployment

JOURNAL_FILES = ("journal.db", "journal.db-wal", "journal.db-shm", "journal.id")


def meta(db: Path) -> dict[str, str]:
    """The meta table as the file holds it, read without touching its WAL or index (a
    copy), so the reading cannot be what changed or kept anything."""
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in ("", "-wal"):
            source = db.with_name(db.name + suffix)
            if source.exists():
                (Path(tmp) / f"copy.db{suffix}").write_bytes(source.read_bytes())
        conn = sqlite3.connect(Path(tmp) / "copy.db")
        try:
            return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        finally:
            conn.close()


def journal_bytes(state_dir: Path) -> dict[str, bytes]:
    return {
        name: (state_dir / name).read_bytes()
        for name in JOURNAL_FILES
        if (state_dir / name).exists()
    }


def a_newer_build_wrote(db: Path, key: str, value: str) -> None:
    """What a newer build leaves when SIGKILLed right after a commit: its change in the
    ``-wal`` only (never checkpointed into ``journal.db``), and the ``-shm`` it indexed it
    with. A separate process, so nothing of it stays open or mapped in this one."""
    code = (
        "import os, sqlite3, sys\n"
        "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "conn.execute('PRAGMA wal_autocheckpoint=0')\n"
        "conn.execute('INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) "
        "DO UPDATE SET value = excluded.value', (sys.argv[2], sys.argv[3]))\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(db), key, value], check=True, timeout=60)
    assert (db.with_name(db.name + "-wal")).stat().st_size > 0
    assert (db.with_name(db.name + "-shm")).exists()


def journal_with_operations(state_dir: Path) -> None:
    """A journal holding a prepare and a connect (``a_newer_build_wrote`` leaves the crash)."""
    toy = ToyNode(state_dir.parent)
    toy.endpoint.node_prepare(n.prepare())
    toy.endpoint.connect_network(n.connect())
    toy.close()


# -- written on create ---------------------------------------------------------------------


def test_a_new_plugin_journal_records_its_store_and_effect_format(tmp_path: Path) -> None:
    with Store.open(tmp_path / "state") as store:
        assert store.store_format == SCHEMA_VERSION == PLUGIN_JOURNAL.version
        assert store.effect_formats == (EFFECT_FORMAT,) == PLUGIN_JOURNAL.effect_formats[-1:]
        assert store.found_formats == (SCHEMA_VERSION, (EFFECT_FORMAT,))
    written = meta(tmp_path / "state" / "journal.db")
    assert (written["schema_version"], written["effect_formats"]) == (
        str(SCHEMA_VERSION),
        str(EFFECT_FORMAT),
    )


def test_a_journal_from_before_the_effect_format_key_holds_format_1(tmp_path: Path) -> None:
    """Journals written before the key existed (tests/unit/journals/plugin-v2.sql) hold
    only effect format 1 records; opening one does not need to write it."""
    state = tmp_path / "state"
    with Store.open(state):
        pass
    conn = sqlite3.connect(state / "journal.db")
    conn.execute("DELETE FROM meta WHERE key = 'effect_formats'")
    conn.commit()
    conn.close()
    with Store.open(state) as store:
        assert store.effect_formats == (1,)
    assert "effect_formats" not in meta(state / "journal.db")


def test_a_build_of_a_newer_effect_format_marks_the_journal_and_the_older_refuses_it(
    tmp_path: Path,
) -> None:
    """The upgrade: a made-up next build executes format 1 and writes 2; at its first
    open the journal lists both, so this build, which cannot execute 2, refuses it."""
    following = EFFECT_FORMAT + 1
    newer = dataclasses.replace(
        PLUGIN_JOURNAL, effect_formats=(*PLUGIN_JOURNAL.effect_formats, following)
    )
    state = tmp_path / "state"
    with Store.open(state):
        pass
    with Store.open(state, journal_format=newer) as store:
        assert store.found_formats == (SCHEMA_VERSION, (EFFECT_FORMAT,))
        assert store.effect_formats == (EFFECT_FORMAT, following)
    assert meta(state / "journal.db")["effect_formats"] == f"{EFFECT_FORMAT},{following}"
    with Store.open(state, journal_format=newer) as store:  # already listed: not written again
        assert store.found_formats == (SCHEMA_VERSION, (EFFECT_FORMAT, following))
    with pytest.raises(JournalFormatUnsupported, match=f"records of effect format {following} "):
        Store.open(state)


def test_the_coordinator_journal_has_a_store_format_and_no_effect_format(tmp_path: Path) -> None:
    journal = CoordinatorJournal(tmp_path / "state")
    try:
        assert journal.store.effect_formats == ()
        fmt = journal.store.journal_format
    finally:
        journal.close()
    written = meta(tmp_path / "state" / "journal.db")
    assert written["schema_version"] == str(fmt.version)
    assert "effect_formats" not in written


# -- reported by GetInfo -------------------------------------------------------------------


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A short directory for the sockets (a Unix socket path has 107 bytes)."""
    directory = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp"))
    yield directory / "sock"
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def served(tmp_path: Path, sockets: Path) -> Iterator[tuple[ToyNode, Host]]:
    toy = ToyNode(tmp_path / "node")
    host = Host(sockets, "secret-token")
    host.start(toy.runner.endpoints())
    yield toy, host
    host.stop(5)
    toy.close()


def test_getinfo_reports_the_three_versions(served: tuple[ToyNode, Host]) -> None:
    _, host = served
    with PluginClient(host.socket_paths["toy.sock"], "secret-token") as client:
        info = client.get_info()
    assert info.store_format == SCHEMA_VERSION
    assert info.readable_store_formats == PLUGIN_JOURNAL.readable
    assert info.effect_format == EFFECT_FORMAT
    assert info.executable_effect_formats == PLUGIN_JOURNAL.effect_formats
    assert info.journal_effect_formats == (EFFECT_FORMAT,)
    assert info.topology_config_version == "toy/v1alpha1"  # the toy's config schema id
    assert info.contract_version == "v1alpha1"


def test_getinfo_without_a_journal_reports_no_store_format(tmp_path: Path, sockets: Path) -> None:
    """A damaged journal is served without a store: no journal versions to report, the
    build's own still are."""
    state = tmp_path / "node" / "state"
    with Store.open(state):
        pass
    (state / "journal.id").unlink()
    toy = ToyNode(tmp_path / "node")
    host = Host(sockets, "secret-token")
    host.start(toy.runner.endpoints())
    try:
        with PluginClient(host.socket_paths["toy.sock"], "secret-token") as client:
            info = client.get_info()
    finally:
        host.stop(5)
        toy.close()
    assert (info.store_format, info.journal_effect_formats) == (0, ())
    assert (info.readable_store_formats, info.executable_effect_formats) == (
        PLUGIN_JOURNAL.readable,
        PLUGIN_JOURNAL.effect_formats,
    )


# -- refused, unchanged --------------------------------------------------------------------


REFUSALS = {
    "newer-store": (
        "schema_version",
        str(SCHEMA_VERSION + 1),
        f"store format {SCHEMA_VERSION + 1} (newer than this build; this build reads store "
        f"format {', '.join(map(str, PLUGIN_JOURNAL.readable))})",
    ),
    "unknown-store": (
        "schema_version",
        "1",  # never released
        f"store format 1 (not a released one; this build reads store format "
        f"{', '.join(map(str, PLUGIN_JOURNAL.readable))})",
    ),
    "unknown-effect": (
        "effect_formats",
        f"{EFFECT_FORMAT},7",
        f"records of effect format 7 (this build executes and undoes effect format "
        f"{', '.join(map(str, PLUGIN_JOURNAL.effect_formats))})",
    ),
}


@pytest.mark.parametrize("case", REFUSALS, ids=list(REFUSALS))
def test_a_journal_this_build_cannot_serve_is_refused_and_unchanged_after_a_crash(
    tmp_path: Path, case: str
) -> None:
    key, value, reason = REFUSALS[case]
    state = tmp_path / "state"
    journal_with_operations(state)
    db = state / "journal.db"
    a_newer_build_wrote(db, key, value)
    before = journal_bytes(state)
    assert set(before) == set(JOURNAL_FILES)
    with pytest.raises(JournalFormatUnsupported) as refused:
        Store.open(state, runtime_dir=tmp_path / "run")
    assert str(refused.value) == (
        f"journal {db}: {reason}; refused, the journal was left unchanged (serve it with the "
        "release that wrote it or a later one)"
    )
    assert not isinstance(refused.value, JournalUnavailable)  # not damage: not DATA_LOSS
    assert journal_bytes(state) == before
    assert meta(db)[key] == value  # the refusal read the WAL: the change is only there


@pytest.mark.parametrize("case", REFUSALS, ids=list(REFUSALS))
def test_a_refused_closed_journal_gets_no_wal_or_shm(tmp_path: Path, case: str) -> None:
    key, value, reason = REFUSALS[case]
    state = tmp_path / "state"
    with Store.open(state):
        pass
    conn = sqlite3.connect(state / "journal.db")
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )
    conn.commit()
    conn.close()  # the last connection: checkpointed, -wal and -shm deleted
    before = journal_bytes(state)
    assert set(before) == {"journal.db", "journal.id"}
    with pytest.raises(
        JournalFormatUnsupported, match=reason.replace("(", r"\(").replace(")", r"\)")
    ):
        Store.open(state)
    assert journal_bytes(state) == before


def test_the_coordinator_refuses_a_newer_journal_unchanged(tmp_path: Path) -> None:
    state = tmp_path / "state"
    CoordinatorJournal(state).close()
    conn = sqlite3.connect(state / "journal.db")
    (version,) = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(int(version) + 1),))
    conn.commit()
    conn.close()
    before = journal_bytes(state)
    with pytest.raises(JournalFormatUnsupported, match=f"store format {int(version) + 1} "):
        CoordinatorJournal(state)
    assert journal_bytes(state) == before


def test_the_service_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    """A real service process: exit status 2, one line on stderr naming the file, the
    version found and the versions it reads; the journal as the crash left it."""
    lab = ToyDeployment(tmp_path)
    try:
        lab.acknowledge_then_sigkill()
        db = lab.state / "journal.db"
        a_newer_build_wrote(db, "schema_version", str(SCHEMA_VERSION + 1))
        before = journal_bytes(lab.state)
        logged = lab.service.log.stat().st_size
        with pytest.raises(RuntimeError, match="exited with status"):
            lab.service.start(timeout=60)
        assert lab.service.wait_exit() == EXIT_REFUSED
        said = lab.service.log.read_bytes()[logged:].decode()
    finally:
        lab.close()
    assert said.splitlines() == [
        f"toy-service: journal {db}: store format {SCHEMA_VERSION + 1} (newer than this build; "
        f"this build reads store format {SCHEMA_VERSION}); refused, the journal was left "
        "unchanged (serve it with the release that wrote it or a later one)"
    ]
    assert journal_bytes(lab.state) == before
    assert not os.path.exists(lab.sockets / "sock" / "toy.sock")
