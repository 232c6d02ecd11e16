"""``--lab`` in a plugin author's repository (no conftest; the kit's pytest11 plugin).

A test taking ``lab_factory`` builds its labs on the lab ``--lab`` names and carries that
tier's marker; a run naming a lab that no selected test runs on, or one this machine
cannot run, fails before any test with one line (exit 4) instead of passing on the
fake kernel.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.pytest_plugin import require_lab
from labs.netns import missing as netns_missing

ON_A_LAB = """\
import pytest

def test_on_the_lab(lab_factory, request: pytest.FixtureRequest) -> None:
    lab = lab_factory()
    assert lab.tier == {tier!r}, lab
    assert request.node.get_closest_marker({tier!r}) is not None
    lab.kernel.snapshot()
"""
NO_LAB = "def test_plain() -> None:\n    pass\n"


def run_pytest(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *args, str(directory)],
        cwd=directory,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]


@pytest.mark.parametrize("url", ["netns://", "vm://", "sriov://inventories/lab.yml"])
def test_a_lab_no_test_runs_on_fails_the_run(tmp_path: Path, url: str) -> None:
    (tmp_path / "test_plain.py").write_text(NO_LAB)
    result = run_pytest(tmp_path, f"--lab={url}")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert error_lines(result) == [
        f"ERROR: --lab {url}: no selected test runs on it (none takes the lab_factory fixture "
        f"or is marked {url.partition(':')[0]}); they would run on the fake kernel instead"
    ], result.stderr
    assert "passed" not in result.stdout


def test_a_lab_deselected_by_marker_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / "test_lab.py").write_text(ON_A_LAB.format(tier="netns") + NO_LAB)
    result = run_pytest(tmp_path, "--lab=netns://", "-m", "fake")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "no selected test runs on it" in result.stderr


def test_a_lab_this_machine_cannot_run_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / "test_lab.py").write_text(ON_A_LAB.format(tier="sriov"))
    inventory = tmp_path / "none.yml"
    result = run_pytest(tmp_path, f"--lab=sriov://{inventory}")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert error_lines(result) == [
        f"ERROR: --lab sriov://{inventory}: this machine cannot run it: "
        f"inventory '{inventory}' does not exist"
    ], result.stderr


@pytest.mark.parametrize("lab", [[], ["--lab=fake://"]], ids=["no-lab", "fake"])
def test_lab_factory_is_the_fake_lab_by_default(tmp_path: Path, lab: list[str]) -> None:
    (tmp_path / "test_lab.py").write_text(ON_A_LAB.format(tier="fake") + NO_LAB)
    result = run_pytest(tmp_path, *lab, "-m", "fake")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "test_lab.py::test_on_the_lab[fake] PASSED" in result.stdout
    assert "2 passed" in result.stdout


@pytest.mark.netns
def test_lab_factory_builds_netns_labs_under_lab_netns(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    require_lab(request.config, "netns", netns_missing())
    (tmp_path / "test_lab.py").write_text(
        ON_A_LAB.format(tier="netns")
        + "    assert str(lab.kernel_url).startswith('linux://'), lab.kernel_url\n"
    )
    result = run_pytest(tmp_path, "--lab=netns://", "-m", "netns")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "test_lab.py::test_on_the_lab[netns] PASSED" in result.stdout
    assert "lab: netns://, start-state seed" in result.stdout
