"""The rig's pytest plugin reaches any repository that installs the kit (pytest11)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path


def test_the_plugin_is_a_pytest11_entry_point() -> None:
    (ours,) = [e for e in entry_points(group="pytest11") if e.name == "dra-networkplugins"]
    assert ours.value == "harness.pytest_plugin"


def test_a_repository_without_conftest_gets_markers_tiers_and_counters(tmp_path: Path) -> None:
    (tmp_path / "test_outside.py").write_text(
        "import pytest\n"
        "from harness.pytest_plugin import RigStats\n\n"
        "def test_counts(rig_stats: RigStats, request: pytest.FixtureRequest) -> None:\n"
        "    rig_stats.add('outside', 1)\n"
        "    assert request.node.get_closest_marker('fake') is not None\n\n"
        "@pytest.mark.vm\n"
        "def test_a_lab_tier() -> None:\n"
        "    pass\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--strict-markers",
            "-p",
            "no:cacheprovider",
            "-m",
            "fake",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 1 deselected" in result.stdout
