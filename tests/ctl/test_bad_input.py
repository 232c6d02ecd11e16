"""Bad input: a missing or damaged journal, a wrong socket, a service that is down.

One line on stderr each, a non-zero exit, and nothing changed: every file of every
state directory is byte-identical afterwards. The journals are copies (``clone``) of
one module-wide node's, left by a crash mid-connect and one restart (the connect is
Failed and its macvlan child is still in the pod), so each test damages its own.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.scenarios import Lifecycle
from labs import FakeServerLab, Node
from plugins.ctl import Exit
from plugins.sdk.runner import CrashPoints, SimulatedCrash
from plugins.sdk.store import DB_NAME, ID_NAME, LOCK_NAME, ScopeRecord, Store
from tests.journal_damage import flip_first

from .kit import LINKS, ctl, files_of
from .test_reconcile_e2e import MARKED

SERVICES = ("networkplugin-bond", LINKS, "networkplugin-vf")


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """The services in this process over the fake kernel server (no processes to start):
    crashed mid-connect, restarted once (recovery marks the connect Failed), closed."""
    root = tmp_path_factory.mktemp("crashed")
    with Node(FakeServerLab(), root, crash=CrashPoints(armed=MARKED)) as node:
        life = Lifecycle("macvlan", node)
        life.run(0, 1)
        with pytest.raises(SimulatedCrash):
            life.phase("connect")()
        node.services.crash(CrashPoints())  # abandoned, then started from the journals
        node.services.close()
        yield node


def clone(node: Node, dest: Path) -> Path:
    """Copies of every service's journal, a token, configs naming them, a node config.

    Sockets go in a directory that does not exist: every service is down. It is under
    /tmp, not ``dest``: a socket path must fit in 107 bytes, and pytest's temporary paths
    under xdist can be longer (the ctl then failed on the path, not on the absent
    service). Each keeps its lease in ``run`` beside its state (none yet: no process of
    this boot opened the copy).
    """
    sockets = Path("/tmp") / f"np-absent-{uuid.uuid4().hex[:12]}"
    assert not sockets.exists()
    services = {}
    for name in SERVICES:
        root = dest / name
        shutil.copytree(node.services.state_dir(name), root / "state")
        token = root / "token"
        token.write_text("a-token\n")
        token.chmod(0o600)
        config = root / "service.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "socketDir": str(sockets / name),
                    "stateDir": str(root / "state"),
                    "tokenFile": str(token),
                    "kernel": node.lab.kernel_url,
                    "runtimeDir": str(root / "run"),
                }
            )
        )
        services[name] = str(config)
    node_config = dest / "node.yaml"
    node_config.write_text(yaml.safe_dump({"services": services}))
    return node_config


def state_files(dest: Path) -> dict[str, dict[str, bytes]]:
    return {name: files_of(dest / name / "state") for name in SERVICES}


def one_line(err: str) -> str:
    assert err.count("\n") == 1, err
    assert err.startswith("networkplugin-ctl: "), err
    return err


def test_read_commands_on_stopped_services_change_nothing(
    crashed: Node, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = clone(crashed, tmp_path)
    before = state_files(tmp_path)
    ops = ctl(config, ["ops", "-o", "json"], capsys)
    assert ops.code == Exit.OK, ops
    connect = next(o for o in ops.json()["operations"] if o["hook"] == "ConnectNetwork")
    assert (connect["service"], connect["state"]) == (LINKS, "Failed")
    table = ctl(config, ["ops"], capsys)
    assert table.out.splitlines()[0].split() == [
        "SERVICE", "PLUGIN", "SCOPE", "STEP", "OPERATION", "HOOK", "STATE", "CLEANUP", "EFFECTS",
        "AGE",
    ]  # fmt: skip
    shown = ctl(config, ["show", connect["operation"], "-o", "json"], capsys)
    assert shown.code == Exit.OK
    (record,) = shown.json()["operations"]
    assert [e["state"] for e in record["effects"]] == ["Applying", "Planned"]
    assert record["effects"][0]["beforeImage"] == {"existed": False}
    assert record["plan"]["effects"]
    described = ctl(config, ["show", connect["operation"]], capsys)
    assert "Before-image of create-child:" in described.out
    assert ctl(config, ["quarantine", "-o", "json"], capsys).json() == {"scopes": []}
    dry = ctl(config, ["reconcile", "--dry-run", "-o", "json"], capsys)
    assert [f["category"] for f in dry.json()["findings"]] == ["leak"]
    assert state_files(tmp_path) == before


def _remove_journal(state: Path) -> None:
    (state / DB_NAME).unlink()
    (state / ID_NAME).unlink()


def _checkpointed(state: Path) -> None:
    """Move every commit into journal.db (as a clean close does), so a record is in it."""
    conn = sqlite3.connect(state / DB_NAME)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    for suffix in ("-wal", "-shm"):
        Path(str(state / DB_NAME) + suffix).unlink(missing_ok=True)


def _flip_record(state: Path) -> None:
    _checkpointed(state)
    flip_first(state / DB_NAME, '"existed":false')


def _truncate(state: Path) -> None:
    _checkpointed(state)
    with open(state / DB_NAME, "r+b") as f:
        f.truncate(60)


def _garble_id(state: Path) -> None:
    (state / ID_NAME).write_text("not-a-journal-id\n")


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (_remove_journal, "no journal here"),
        (_flip_record, "fails its checksum"),
        (_truncate, "truncated"),
        (_garble_id, "does not hold a journal id"),
    ],
    ids=["missing", "record-flipped", "truncated", "id-garbled"],
)
@pytest.mark.parametrize("command", [["ops"], ["quarantine"], ["reconcile", "--dry-run"]])
def test_missing_or_damaged_journal(
    damage: object,
    said: str,
    command: list[str],
    crashed: Node,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = clone(crashed, tmp_path)
    assert callable(damage)
    damage(tmp_path / LINKS / "state")
    before = state_files(tmp_path)
    run = ctl(config, command, capsys)
    assert run.code == Exit.JOURNAL, run
    line = one_line(run.err)
    assert LINKS in line
    assert said in line
    assert state_files(tmp_path) == before


def test_unknown_operation(
    crashed: Node, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = clone(crashed, tmp_path)
    run = ctl(config, ["show", "no-such-op"], capsys)
    assert run.code == Exit.USAGE
    assert "no-such-op is in no journal" in one_line(run.err)


def test_bad_node_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "node.yaml"
    config.write_text("services:\n  networkplugin-nope: x.yaml\n")
    run = ctl(config, ["ops"], capsys)
    assert run.code == Exit.USAGE
    assert "networkplugin-nope" in one_line(run.err)


def test_doctor_service_down_and_wrong_socket(
    crashed: Node, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = clone(crashed, tmp_path)
    links_config = yaml.safe_load((tmp_path / LINKS / "service.yaml").read_text())
    socket_dir = Path(links_config["socketDir"])
    socket_dir.mkdir(mode=0o700, parents=True)
    (socket_dir / "vlan.sock").write_text("a regular file where a socket should be")
    before = state_files(tmp_path)
    run = ctl(config, ["doctor", "-o", "json"], capsys)
    assert run.code == Exit.FINDINGS, run
    checks = {(c["service"], c["check"], c["subject"]): c for c in run.json()["checks"]}
    wrong = checks[(LINKS, "socket", str(socket_dir / "vlan.sock"))]
    assert (wrong["status"], wrong["detail"]) == ("fail", "not a Unix socket")
    down = checks[(LINKS, "socket", str(socket_dir / "macvlan.sock"))]
    assert down["status"] == "fail"
    assert "service down?" in down["detail"]
    for service in SERVICES:
        journal = checks[(service, "journal", str(tmp_path / service / "state"))]
        assert journal["status"] == "ok"
        assert "service down" in journal["detail"]
        assert checks[(service, "token", str(tmp_path / service / "token"))]["status"] == "ok"
    assert state_files(tmp_path) == before


def test_apply_when_the_journal_holder_does_not_answer(
    crashed: Node, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A process holds the journal's lock (a hung service) and no socket answers."""
    config = clone(crashed, tmp_path)
    dry = ctl(config, ["reconcile", "--dry-run", "-o", "json"], capsys)
    assert dry.code == Exit.FINDINGS
    fd = os.open(tmp_path / LINKS / "state" / LOCK_NAME, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        before = state_files(tmp_path)
        run = ctl(config, ["reconcile", "--apply", "--digest", dry.json()["digest"]], capsys)
        assert run.code == Exit.UNREACHABLE, run
        assert "does not answer" in one_line(run.err)
        assert state_files(tmp_path) == before
    finally:
        os.close(fd)
    again = ctl(config, ["reconcile", "--dry-run", "-o", "json"], capsys)
    assert again.json()["findings"] == dry.json()["findings"]


def test_the_console_script(tmp_path: Path) -> None:
    """The installed ``networkplugin-ctl``: a real process, one line, exit 2."""
    script = Path(sys.executable).parent / "networkplugin-ctl"
    assert script.exists(), f"{script}: the project's console script is not installed"
    missing = tmp_path / "node.yaml"
    run = subprocess.run(
        [str(script), "--node", str(missing), "ops"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == Exit.USAGE, run
    assert (
        one_line(run.stderr)
        == f"networkplugin-ctl: node config {missing}: No such file or directory\n"
    )
    assert run.stdout == ""


def test_rolled_back_journal(
    crashed: Node, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """journal.db replaced by an older copy in the same boot: the lease, copied with the
    journal, says more commits were acknowledged than it holds."""
    config = clone(crashed, tmp_path)
    state, run = tmp_path / LINKS / "state", tmp_path / LINKS / "run"
    _checkpointed(state)
    older = (state / DB_NAME).read_bytes()
    with Store.open(state, runtime_dir=run) as store:  # one more commit, and its lease
        store.write(
            lambda t: t.put_scope(ScopeRecord(partition="x/v1", scope="s", generation=1, epoch=1))
        )
    _checkpointed(state)
    (state / DB_NAME).write_bytes(older)
    before = state_files(tmp_path)
    lease = files_of(run)
    result = ctl(config, ["ops"], capsys)
    assert result.code == Exit.JOURNAL, result
    assert "were acknowledged in this boot" in one_line(result.err)
    assert state_files(tmp_path) == before
    assert files_of(run) == lease
