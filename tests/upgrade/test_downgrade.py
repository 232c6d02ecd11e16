"""The reverse of an upgrade: a build meeting a journal a newer build wrote.

This tree refuses it: exit status 2, one line naming the file and both versions, every
byte of ``journal.db``, ``-wal``, ``-shm`` and ``journal.id`` as the newer build left
them when SIGKILLed (its format bumped here: a made-up next store format, one more
column, or a next effect format). The refusal path going forward.

The previous release (v0.1.0) predates that refusal, and this file records what it
really does (docs/installing.md, "Upgrading"):

- a journal of this tree (store format 2, effect format 1): it serves it, a rollback;
- a newer store format: it does not exit; it logs one line naming both versions but
  calls the journal damaged ("restore it or reconcile the node"), stays unready and
  answers every call DATA_LOSS; and reading the SIGKILLed newer build's WAL rewrites
  the ``-shm`` (the WAL index; ``journal.db`` and ``-wal`` keep their bytes);
- a newer effect format: it cannot see it (the ``effect_formats`` key came after it) and
  serves the journal, recovering its records as if they were format 1.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.upgrade import (
    LINKS,
    SERVICE,
    SOCKET,
    Release,
    ReleaseKernelLab,
    ReleaseServiceProcess,
    ReleaseUnavailable,
    journal_bytes,
    previous_release,
)
from labs import FakeServerLab, ServiceProcess
from plugins.sdk.host import PluginCallError
from plugins.sdk.service import EXIT_REFUSED
from plugins.sdk.store import EFFECT_FORMAT, PLUGIN_JOURNAL, SCHEMA_VERSION

pytestmark = pytest.mark.timeout(300)  # the first run on a machine builds v0.1.0's venv

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "journals" / "v0.1.0" / SERVICE
SUCCEEDED_CONNECT = ("att-1:secondary:ConnectNetwork:g1", "att-1")

NEWER_STORE = SCHEMA_VERSION + 1
NEWER_EFFECT = EFFECT_FORMAT + 1
# What the newer build is: this tree with one of its formats bumped, opening the journal
# (a store format's migration runs then; a new effect format is listed then) and dying
# by SIGKILL before it closes it, its commit in the WAL only.
NEWER_BUILD = """
import dataclasses, os, sys
from plugins.sdk.store import PLUGIN_JOURNAL, Migration, Store
state, bumped = sys.argv[1], sys.argv[2]
if bumped == "store":
    step = Migration(PLUGIN_JOURNAL.version + 1, "ALTER TABLE operations ADD COLUMN next TEXT")
    newer = dataclasses.replace(PLUGIN_JOURNAL, migrations=(*PLUGIN_JOURNAL.migrations, step))
else:
    following = PLUGIN_JOURNAL.effect_formats[-1] + 1
    newer = dataclasses.replace(
        PLUGIN_JOURNAL, effect_formats=(*PLUGIN_JOURNAL.effect_formats, following)
    )
store = Store.open(state, journal_format=newer)
os._exit(0)
"""
REASONS = {
    "store": f"store format {NEWER_STORE} (newer than this build; this build reads store "
    f"format {', '.join(map(str, PLUGIN_JOURNAL.readable))})",
    "effect": f"records of effect format {NEWER_EFFECT} (this build executes and undoes "
    f"effect format {', '.join(map(str, PLUGIN_JOURNAL.effect_formats))})",
}


def golden_state(root: Path) -> Path:
    """A copy of the v0.1.0 golden journal (records in flight) as a service's state."""
    state = root / "state"
    shutil.copytree(GOLDEN, state)
    state.chmod(0o700)
    return state


def newer_build_wrote(state: Path, bumped: str) -> None:
    subprocess.run([sys.executable, "-c", NEWER_BUILD, str(state), bumped], check=True, timeout=60)
    assert (state / "journal.db-wal").stat().st_size > 0
    assert (state / "journal.db-shm").exists()


@pytest.fixture
def sockets() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="downgrade-", dir="/tmp"))  # short socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


# -- this tree ------------------------------------------------------------------------------


@pytest.mark.parametrize("bumped", ["store", "effect"])
def test_this_build_refuses_a_journal_of_a_newer_build_unchanged(
    tmp_path: Path, sockets: Path, bumped: str
) -> None:
    root = tmp_path / SERVICE
    state = golden_state(root)
    newer_build_wrote(state, bumped)
    before = journal_bytes(state)
    lab = FakeServerLab()
    spec = LINKS[0]
    service = ServiceProcess(spec.name, spec.command, root, sockets, lab.kernel_url, spec.sockets)
    try:
        with pytest.raises(RuntimeError, match="exited with status"):
            service.start(timeout=60)
        assert service.wait_exit() == EXIT_REFUSED
    finally:
        service.kill()
        lab.close()
    assert service.log.read_text().splitlines() == [
        f"{SERVICE}: journal {state / 'journal.db'}: {REASONS[bumped]}; refused, the journal "
        "was left unchanged (serve it with the release that wrote it or a later one)"
    ]
    assert journal_bytes(state) == before


# -- the previous release -------------------------------------------------------------------


@pytest.fixture(scope="module")
def release() -> Release:
    try:
        return previous_release()
    except ReleaseUnavailable as exc:
        pytest.skip(f"downgrade test: {exc}")


def old_links_on(lab: ReleaseKernelLab, root: Path, sockets: Path) -> ReleaseServiceProcess:
    """The previous release's networkplugin-links on ``root`` (its config written now)."""
    spec = LINKS[0]
    return ReleaseServiceProcess(
        lab.release, spec.name, spec.command, root, sockets, lab.release_kernel_url, spec.sockets
    )


@pytest.fixture
def old_lab(release: Release) -> Iterator[ReleaseKernelLab]:
    lab = ReleaseKernelLab(release)
    yield lab
    lab.close()


@pytest.fixture
def old_links(
    old_lab: ReleaseKernelLab, tmp_path: Path, sockets: Path
) -> Iterator[ReleaseServiceProcess]:
    """The previous release's networkplugin-links over a golden-journal copy (not started)."""
    root = tmp_path / SERVICE
    golden_state(root)
    service = old_links_on(old_lab, root, sockets)
    yield service
    service.kill()


def test_the_previous_release_serves_a_journal_this_build_wrote(
    old_lab: ReleaseKernelLab, tmp_path: Path, sockets: Path
) -> None:
    """A rollback before any newer format: this build opened the journal (recovered it,
    listed its effect format), and the previous release serves it again."""
    root = tmp_path / SERVICE
    golden_state(root)
    lab = FakeServerLab()
    spec = LINKS[0]
    this = ServiceProcess(spec.name, spec.command, root, sockets, lab.kernel_url, spec.sockets)
    try:
        this.start()
        assert this.stop() == 0
    finally:
        this.kill()
        lab.close()
    old = old_links_on(old_lab, root, sockets)
    try:
        old.launch()  # ready: it serves
        with old.client(SOCKET) as client:
            assert client.inspect(*SUCCEEDED_CONNECT).found
    finally:
        old.kill()


def test_the_previous_release_takes_a_newer_store_format_for_damage(
    old_links: ReleaseServiceProcess,
) -> None:
    state = old_links.root / "state"
    newer_build_wrote(state, "store")
    before = journal_bytes(state)
    old_links.launch(wait_ready=False)
    assert old_links.running()  # it does not exit: it stays unready
    with old_links.client(SOCKET) as client:
        assert not client.get_info().ready
        with pytest.raises(PluginCallError) as refused:
            client.inspect(*SUCCEEDED_CONNECT)
    assert refused.value.code == "DATA_LOSS"
    old_links.kill()
    said = old_links.log.read_text().splitlines()
    assert said == [
        f"{SERVICE} ERROR plugins.sdk.service: journal in {state} is damaged: journal.db was "
        f"written by a newer store format (version {NEWER_STORE}; this code knows up to "
        f"{SCHEMA_VERSION}); it was not recreated (restore it or reconcile the node before "
        "serving)"
    ]
    after = journal_bytes(state)
    changed = sorted(name for name in before if after.get(name) != before[name])
    assert changed == ["journal.db-shm"]  # the WAL index, rewritten by its read


def test_the_previous_release_cannot_see_a_newer_effect_format(
    old_links: ReleaseServiceProcess,
) -> None:
    state = old_links.root / "state"
    newer_build_wrote(state, "effect")
    old_links.launch()  # ready: it serves the journal
    with old_links.client(SOCKET) as client:
        assert client.inspect(*SUCCEEDED_CONNECT).found
    assert old_links.running()
    assert "effect_formats" not in old_links.log.read_text()
