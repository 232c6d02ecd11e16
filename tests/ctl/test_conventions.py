"""kubectl's conventions (issue 26, item 10): ``-o json|yaml|wide``, ``--no-headers``,
``ops``' filters and ``--limit``, ``--version``, the node config from the environment,
structured effects, camelCase keys, a line for an empty table, the epilogs.

On copies of the ``crashed`` node's journals (conftest.py): the links service holds a
Succeeded NodePrepare and a Failed ConnectNetwork; the other two journals are empty.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from labs import Node
from plugins.ctl import DEFAULT_NODE_CONFIG, NODE_ENV, PROG, Exit, main
from plugins.ctl._node import node_config_path
from plugins.ctl._output import Output

from .kit import LINKS, camel_case_problems, clone, ctl, one_line, state_files


@pytest.fixture
def node(crashed: Node, tmp_path: Path) -> Path:
    return clone(crashed, tmp_path)


def _connect(node: Path, capsys: pytest.CaptureFixture[str]) -> str:
    ops = ctl(node, ["ops", "-o", "json"], capsys).json()["operations"]
    return str(next(o["operation"] for o in ops if o["hook"] == "ConnectNetwork"))


def test_yaml_is_the_json_document_and_every_key_is_camel_case(
    node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    commands = [
        ["ops"],
        ["show", _connect(node, capsys)],
        ["quarantine"],
        ["reconcile", "--dry-run"],
        ["doctor"],
    ]
    for command in commands:
        as_json = ctl(node, [*command, "-o", "json"], capsys)
        as_yaml = ctl(node, [*command, "-o", "yaml"], capsys)
        assert as_yaml.code == as_json.code, (command, as_yaml)
        assert as_json.err == as_yaml.err == "", (command, as_json.err)
        assert yaml.safe_load(as_yaml.out) == as_json.json(), command
        assert camel_case_problems(as_json.json()) == [], command


def test_ops_effects_are_structured(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    connect = _connect(node, capsys)
    rows = ctl(node, ["ops", "-o", "json"], capsys).json()["operations"]
    row = next(r for r in rows if r["operation"] == connect)
    (shown,) = ctl(node, ["show", connect, "-o", "json"], capsys).json()["operations"]
    assert row["effects"] == [
        {"id": e["id"], "kind": e["kind"], "state": e["state"]} for e in shown["effects"]
    ]
    assert [e["state"] for e in row["effects"]] == ["Applying", "Planned"]
    # The table still counts them by state.
    table = ctl(node, ["ops"], capsys).out
    assert "1 Applying,1 Planned" in table


def test_wide_and_no_headers(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = ctl(node, ["ops", "-o", "json"], capsys).json()["operations"]
    narrow = ctl(node, ["ops"], capsys).out.splitlines()
    wide = ctl(node, ["ops", "-o", "wide"], capsys).out.splitlines()
    assert wide[0].split() == [
        "SERVICE", "PLUGIN", "SCOPE", "STEP", "OPERATION", "HOOK", "STATE", "CLEANUP", "EFFECTS",
        "PARTITION", "GENERATION", "EPOCH", "SEQ", "AGE",
    ]  # fmt: skip
    assert len(narrow) == len(wide) == len(rows) + 1
    bare = ctl(node, ["ops", "--no-headers"], capsys).out.splitlines()
    assert [line.split() for line in bare] == [line.split() for line in narrow[1:]]
    # Options may come before the command too.
    bare_wide = ctl(node, ["--no-headers", "-o", "wide", "ops"], capsys).out.splitlines()
    assert [line.split() for line in bare_wide] == [line.split() for line in wide[1:]]
    dry = ctl(node, ["reconcile", "--dry-run", "-o", "wide"], capsys)
    header = dry.out.splitlines()[0].split()
    assert header[-3:] == ["MARKER", "WHY", "OBJECT"]
    assert dry.code == Exit.FINDINGS
    doctor = ctl(node, ["doctor", "--no-headers", "-o", "wide"], capsys).out.splitlines()
    assert doctor
    assert not doctor[0].startswith("SERVICE")


def test_ops_filters_and_limit(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    every = ctl(node, ["ops", "-o", "json"], capsys).json()["operations"]
    assert len(every) == 2  # the links service's prepare and its failed connect

    def ops(*args: str) -> list[str]:
        run = ctl(node, ["ops", "-o", "json", *args], capsys)
        assert (run.code, run.err) == (Exit.OK, ""), run
        return [r["operation"] for r in run.json()["operations"]]

    by_id = {r["operation"]: r for r in every}
    connect = next(op for op, r in by_id.items() if r["hook"] == "ConnectNetwork")
    prepare = next(op for op, r in by_id.items() if r["hook"] == "NodePrepare")
    assert ops("--state", "Failed") == [connect]
    assert ops("--state", "failed") == [connect]  # as kubectl's: states in any case
    assert ops("--state", "Failed", "--state", "Succeeded") == [prepare, connect]
    assert ops("--service", LINKS) == [prepare, connect]
    assert ops("--service", "networkplugin-bond") == []
    assert ops("--scope", by_id[connect]["scope"]) == [connect]
    assert ops("--scope", by_id[prepare]["scope"], "--state", "Failed") == []
    assert ops("--limit", "1") == [connect]  # the newest: age 0
    assert ops("--limit", "5") == [prepare, connect]
    assert ops("--state", "Succeeded", "--limit", "1") == [prepare]


def test_an_empty_table_says_so(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    none = ctl(node, ["ops", "--state", "Quarantined"], capsys)
    assert (none.code, none.out, none.err) == (Exit.OK, "no operations\n", "")
    bare = ctl(node, ["ops", "--state", "Quarantined", "--no-headers"], capsys)
    assert (bare.code, bare.out) == (Exit.OK, "")  # a script reading rows reads none
    assert ctl(node, ["ops", "--state", "Quarantined", "-o", "json"], capsys).json() == {
        "operations": []
    }
    quarantine = ctl(node, ["quarantine"], capsys)
    assert quarantine.out == "no cleanups pending or quarantined\n"


def test_empty_output_table_prints_nothing_else() -> None:
    out = io.StringIO()
    Output(out).table([("A", "a")], [], empty="no rows")
    assert out.getvalue() == "no rows\n"
    out = io.StringIO()
    Output(out, "wide").table([("A", "a")], [{"a": 1}], wide=[("A", "a"), ("B", "b")])
    assert out.getvalue().splitlines() == ["A  B", "1  -"]


def test_node_config_from_the_environment(
    node: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from_env = ctl(None, ["ops", "-o", "json"], capsys, environ={NODE_ENV: str(node)})
    assert from_env.code == Exit.OK, from_env
    assert from_env.json() == ctl(node, ["ops", "-o", "json"], capsys).json()
    # --node wins over the environment.
    missing = tmp_path / "elsewhere.yaml"
    flag_wins = ctl(node, ["ops"], capsys, environ={NODE_ENV: str(missing)})
    assert flag_wins.code == Exit.OK, flag_wins
    # A missing file named by the environment says so, in one line, creating nothing.
    before = sorted(tmp_path.rglob("*"))
    run = ctl(None, ["ops"], capsys, environ={NODE_ENV: str(missing)})
    assert run.code == Exit.USAGE
    assert one_line(run.err) == (
        f"{PROG}: node config {missing}: No such file or directory (named by ${NODE_ENV})\n"
    )
    assert sorted(tmp_path.rglob("*")) == before
    # An empty variable is no name at all, as an empty KUBECONFIG.
    assert node_config_path(None, {NODE_ENV: ""}) == (DEFAULT_NODE_CONFIG, "")
    assert node_config_path(None, {}) == (DEFAULT_NODE_CONFIG, "")


def test_version_of_the_console_script() -> None:
    script = Path(sys.executable).parent / PROG
    for command in ([str(script)], [sys.executable, "-m", "plugins.ctl"]):
        run = subprocess.run(
            [*command, "--version"], check=False, capture_output=True, text=True, timeout=60
        )
        assert (run.returncode, run.stderr) == (0, ""), run
        assert re.fullmatch(rf"{PROG} \d+\.\d+\.\d+\S*\n", run.stdout), run.stdout


@pytest.mark.parametrize(
    ("command", "example"),
    [
        (["ops"], f"{PROG} ops --service"),
        (["show"], f"{PROG} show att-1:"),
        (["quarantine"], f"{PROG} quarantine"),
        (["reconcile"], f"{PROG} reconcile --dry-run"),
        (["doctor"], f"{PROG} doctor"),
        (["coordinator"], f"{PROG} coordinator apps"),
        (["coordinator", "apps"], f"{PROG} coordinator apps"),
        (["coordinator", "show"], f"{PROG} coordinator show att-1"),
        (["coordinator", "remove"], f"{PROG} coordinator remove att-1"),
        ([], f"{PROG} ops"),
    ],
)
def test_every_help_has_an_example_and_the_exit_codes(
    command: list[str], example: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert re.search(r"^examples?:$", text, re.MULTILINE), text
    assert f"  {example}" in text
    codes = text[text.index("exit codes") :]
    for code in Exit:
        assert re.search(rf"^  {int(code)}  \S", codes, re.MULTILINE), (code, codes)


def test_a_stale_dry_run_is_refused_without_a_digest_to_paste(
    node: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dry = ctl(node, ["reconcile", "--dry-run", "-o", "json"], capsys)
    before = state_files(tmp_path)
    stale = "sha256:" + "0" * 64
    run = ctl(node, ["reconcile", "--apply", "--digest", stale], capsys)
    assert run.code == Exit.REFUSED, run
    line = one_line(run.err)
    assert "changed since that dry-run" in line
    assert f"'{PROG} reconcile --dry-run' again" in line
    # Neither the stale digest nor the current one: the current one is printed only
    # beside the findings it stands for, by a dry-run someone reads.
    assert "sha256:" not in line
    assert dry.json()["digest"] not in line
    missing = ctl(node, ["reconcile", "--apply"], capsys)
    assert missing.code == Exit.REFUSED
    assert "--dry-run" in one_line(missing.err)
    assert state_files(tmp_path) == before
