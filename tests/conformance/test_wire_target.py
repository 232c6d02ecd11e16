"""The wire target file: the example loads; each mistake is one line naming its path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conformance import (
    WireDriverError,
    WireLabs,
    WireSession,
    WireTargetError,
    load_wire_target,
    run_check,
)
from plugins.sdk import DocumentError, Sharing, YAMLLoadError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "independent-plugin"


def _example() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((EXAMPLE / "target.yaml").read_text())
    data["kernel"].pop("lab")  # relative to the example's directory, not the test's
    return data


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "target.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_example_loads() -> None:
    target = load_wire_target(EXAMPLE / "target.yaml")
    assert target.name == "independent-macvlan"
    assert target.kernel_url == "fake://"
    assert target.lab is not None
    assert target.lab.is_file()
    assert target.allocation is not None
    assert target.allocation.sharing is Sharing.SHARED
    assert target.interface == "net9"
    assert target.commands.stop is None
    assert target.commands.start[:2] == ("{python}", "plugin.py")


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (lambda d: d["kernel"].update(url="vm://"), "kernel.url: "),
        (lambda d: d.pop("socket"), "socket"),
        (lambda d: d["commands"].update(start=[]), "commands.start: "),
        (lambda d: d["requests"]["connect"].update(extra=1), "requests.connect.extra: "),
        (
            lambda d: d["requests"]["connect"]["interfaceNames"].update(interface="a/b"),
            "requests.connect.interfaceNames.interface: ",
        ),
    ],
)
def test_a_schema_mistake_names_its_path_and_rule(tmp_path: Path, change: Any, line: str) -> None:
    data = _example()
    change(data)
    with pytest.raises(DocumentError) as caught:
        load_wire_target(_write(tmp_path, data))
    assert str(tmp_path / "target.yaml") in str(caught.value)
    assert len(caught.value.lines) == 1, caught.value.lines
    assert line in caught.value.lines[0]
    assert caught.value.lines[0].endswith("]")  # the rule


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda d: d["commands"]["start"].append("{nope}"),
            "$.commands.start[10]: unknown placeholder {nope}",
        ),
        (lambda d: d.update(socket="{socket}/x"), "$.socket: unknown placeholder {socket}"),
        (
            lambda d: d["requests"].pop("prepare"),
            "$.requests.prepare: required for an Allocation root",
        ),
        (
            lambda d: d.update(stepKind="Operation"),
            "$.requests.prepare: an Operation step has no NodePrepare",
        ),
        (
            lambda d: d["kernel"].update(url="linux://", lab="x.yaml"),
            "$.kernel.lab: only a fake:// kernel starts from a lab file",
        ),
        (
            lambda d: d.update(tamper={"link": "enp3s0f2", "set": {"trust": False}}),
            "$.tamper.set.trust: not a field of LinkChanges",
        ),
        (
            lambda d: d.update(stateFiles=["{state}/journal.db"]),
            "$.stateFiles[0]: unknown placeholder {state}",
        ),
    ],
)
def test_a_mistake_the_schema_cannot_see_is_named(
    tmp_path: Path, change: Any, problem: str
) -> None:
    data = _example()
    change(data)
    with pytest.raises(WireTargetError) as caught:
        load_wire_target(_write(tmp_path, data))
    assert len(caught.value.problems) == 1, caught.value.problems
    assert caught.value.problems[0].startswith(problem)
    assert str(tmp_path / "target.yaml") in str(caught.value)


def test_a_repeated_key_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "target.yaml"
    path.write_text("plugin: a\nplugin: b\n")
    with pytest.raises(YAMLLoadError, match=r"target\.yaml:2"):
        load_wire_target(path)


def test_the_suite_never_overwrites_a_token_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("a real registration's\n")
    with pytest.raises(WireDriverError, match="exists"):
        WireSession._mint_token(token)
    assert token.read_text() == "a real registration's\n"


def test_a_bad_target_file_exits_2_with_one_line(tmp_path: Path) -> None:
    data = _example()
    data["kernel"]["url"] = "vm://"
    done = subprocess.run(
        [sys.executable, "-m", "conformance", "--target", str(_write(tmp_path, data))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "kernel.url: " in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1  # the file and its one problem


def test_every_check_is_written_once_and_runs_over_both_drivers() -> None:
    from conformance import CHECKS, MODES, SUITE, WIRE_CHECKS

    assert set(MODES) == set(SUITE) == set(CHECKS) == set(WIRE_CHECKS)
    for name in SUITE:
        written = SUITE[name].__name__
        assert getattr(CHECKS[name], "__name__", None) == written
        assert getattr(WIRE_CHECKS[name], "__name__", None) == written


def test_a_plugin_that_does_not_start_fails_the_check_with_its_output(tmp_path: Path) -> None:
    data = _example()
    data["commands"]["start"] = ["sh", "-c", "echo no such plugin >&2; exit 3"]
    target = load_wire_target(_write(tmp_path, data))
    with WireLabs(target) as labs:
        verdict = run_check(target, "getinfo-identity", labs)
    assert verdict.failed
    assert "exited while starting" in verdict.detail
    assert "no such plugin" in verdict.detail
