"""Bad input: a missing or damaged journal, a wrong socket, a service that is down.

One line on stderr each, a non-zero exit, and nothing changed: every file of every
state directory is byte-identical afterwards. The journals are copies (``clone``) of
the ``crashed`` node's (conftest.py), left by a crash mid-connect and one restart (the
connect is Failed and its macvlan child is still in the pod), so each test damages its own.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from labs import Node
from plugins.ctl import Exit
from plugins.sdk.store import DB_NAME, ID_NAME, LOCK_NAME, ScopeRecord, Store
from tests.journal_damage import flip_first

from .kit import (
    LINKS,
    SERVICES,
    clone,
    coordinator_config,
    ctl,
    files_of,
    one_line,
    state_files,
    with_coordinator,
)


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


def _stale_socket(path: Path) -> None:
    """A socket file nobody listens on (what a SIGKILLed server leaves)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
    path.chmod(0o600)


def test_doctor_says_in_words_why_a_socket_does_not_answer(
    crashed: Node, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not gRPC's own text (``failed to connect to all addresses; last error: ...``)."""
    config = clone(crashed, tmp_path)
    socket_dir = Path(yaml.safe_load((tmp_path / LINKS / "service.yaml").read_text())["socketDir"])
    stale = socket_dir / "macvlan.sock"
    try:
        _stale_socket(stale)
        run = ctl(config, ["doctor", "-o", "json"], capsys)
    finally:
        shutil.rmtree(socket_dir.parent)
    assert run.code == Exit.FINDINGS, run
    (check,) = [c for c in run.json()["checks"] if c["subject"] == str(stale)]
    assert (check["status"], check["detail"]) == (
        "fail",
        "GetInfo: nothing answers (service down?)",
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["ops", "-o", "table"], "argument -o/--output: invalid choice: 'table'"),
        (["ops", "--limit", "0"], "argument --limit: '0' is not a whole number of 1 or more"),
        (["ops", "--limit", "many"], "argument --limit: 'many' is not a whole number"),
        (["ops", "--state", "Done"], "argument --state: 'Done' is not an operation state"),
        (["ops", "--service", "networkplugin-x"], "argument --service: invalid choice"),
        (["ops", "--service", "networkplugin-vf"], "--service networkplugin-vf: the node config"),
        (["reconcile", "--dry-run", "--limit", "1"], "unrecognized arguments: --limit 1"),
        (["coordinator"], "the following arguments are required: action"),
        (["coordinator", "show"], "the following arguments are required: application"),
    ],
    ids=[
        "output", "limit-zero", "limit-word", "state", "service-unknown", "service-not-on-node",
        "option-of-another-command", "coordinator-action", "coordinator-application",
    ],
)  # fmt: skip
def test_bad_arguments(
    args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line naming the argument, exit 2, nothing created; a node naming only links."""
    node = tmp_path / "node.yaml"
    node.write_text(yaml.safe_dump({"services": {LINKS: "links.yaml"}}))
    (tmp_path / "links.yaml").write_text(
        yaml.safe_dump(
            {
                "socketDir": "/tmp/np-absent-bad-arguments",
                "stateDir": str(tmp_path / "state"),
                "tokenFile": str(tmp_path / "token"),
                "kernel": "kernel+unix:///unused",
            }
        )
    )
    before = sorted(tmp_path.rglob("*"))
    run = ctl(node, args, capsys)
    assert (run.code, run.out) == (Exit.USAGE, ""), run
    assert said in one_line(run.err), run.err
    assert sorted(tmp_path.rglob("*")) == before


def _no_coordinator_key(node: Path, tmp: Path) -> list[str]:
    return []


def _coordinator_not_a_string(node: Path, tmp: Path) -> list[str]:
    with_coordinator(node, "x")
    node.write_text(node.read_text().replace("coordinator: x", "coordinator: 5"))
    return []


def _coordinator_config_incomplete(node: Path, tmp: Path) -> list[str]:
    config = coordinator_config(tmp, tmp / "absent" / "coordinator.sock")
    document = yaml.safe_load(config.read_text())
    del document["inventory"]
    config.write_text(yaml.safe_dump(document))
    with_coordinator(node, config)
    return []


def _coordinator_token_readable_by_all(node: Path, tmp: Path) -> list[str]:
    with_coordinator(node, coordinator_config(tmp, tmp / "absent" / "coordinator.sock"))
    (tmp / "coordinator.token").chmod(0o644)
    return []


def _coordinator_socket_missing(node: Path, tmp: Path) -> list[str]:
    with_coordinator(node, coordinator_config(tmp, tmp / "absent" / "coordinator.sock"))
    return []


def _coordinator_socket_a_file(node: Path, tmp: Path) -> list[str]:
    (tmp / "plain.sock").write_text("a regular file where a socket should be")
    with_coordinator(node, coordinator_config(tmp, tmp / "plain.sock"))
    return []


def _coordinator_socket_stale(node: Path, tmp: Path) -> list[str]:
    with_coordinator(node, coordinator_config(tmp, tmp / "absent" / "coordinator.sock"))
    stale = Path("/tmp") / f"np-stale-{uuid.uuid4().hex[:12]}" / "coordinator.sock"
    _stale_socket(stale)  # removed by the test; --coordinator-socket overrides the config's
    return ["--coordinator-socket", str(stale)]


@pytest.mark.parametrize(
    ("setup", "code", "said"),
    [
        (_no_coordinator_key, Exit.USAGE, "no 'coordinator' key naming the coordinator's config"),
        (_coordinator_not_a_string, Exit.USAGE, "$.coordinator"),
        (_coordinator_config_incomplete, Exit.USAGE, "inventory"),
        (_coordinator_token_readable_by_all, Exit.USAGE, "coordinator.token"),
        (_coordinator_socket_missing, Exit.UNREACHABLE, "No such file or directory (coordinator down?)"),
        (_coordinator_socket_a_file, Exit.USAGE, "plain.sock: not a Unix socket"),
        (_coordinator_socket_stale, Exit.UNREACHABLE, "coordinator.sock: nothing answers (coordinator down?)"),
    ],
    ids=[
        "no-key", "key-not-a-string", "config-incomplete", "token-too-open", "socket-missing",
        "socket-a-file", "socket-stale",
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", [["apps"], ["show", "att-1"], ["remove", "att-1"]])
def test_coordinator_unreachable_or_misconfigured(
    setup: Callable[[Path, Path], list[str]],
    code: Exit,
    said: str,
    command: list[str],
    crashed: Node,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One line naming the file, key or socket and what is wrong; nothing created."""
    node = clone(crashed, tmp_path / "node")
    extra = setup(node, tmp_path)
    before = sorted(tmp_path.rglob("*"))
    try:
        run = ctl(node, ["coordinator", *command, *extra], capsys)
    finally:
        if extra:
            shutil.rmtree(Path(extra[-1]).parent)
    assert (run.code, run.out) == (code, ""), run
    line = one_line(run.err)
    assert said in line, line
    assert "failed to connect" not in line  # gRPC's own words never reach a person
    assert sorted(tmp_path.rglob("*")) == before
