"""The public API boundary is enforced by the linter, and the rule can fail."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _ruff(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--config",
            str(REPO / "pyproject.toml"),
            "--select",
            "TID251",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_private_sdk_import_outside_the_sdk_is_refused(tmp_path: Path) -> None:
    planted = tmp_path / "plugin.py"
    planted.write_text("from plugins.sdk._requests import CleanupStatus\n\nprint(CleanupStatus)\n")
    result = _ruff(planted)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "TID251" in result.stdout
    assert "import request and response types from plugins.sdk" in result.stdout


def test_the_public_import_is_accepted(tmp_path: Path) -> None:
    clean = tmp_path / "plugin.py"
    clean.write_text("from plugins.sdk import CleanupStatus\n\nprint(CleanupStatus)\n")
    result = _ruff(clean)
    assert result.returncode == 0, result.stdout + result.stderr
