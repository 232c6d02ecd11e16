"""A plugin author's view: the test kit's wheel (and the product's) in a fresh venv, a third-party plugin outside this
repository (no conftest), its conformance suite under ``--lab fake://`` and
``--lab netns://``, and the pin tool from the installed package. The product's wheel
holds ``plugins`` alone: a node installs nothing of the test kit.

The third-party repository is ``examples/bridge-plugin`` copied out of the tree (the
test file docs/writing-a-plugin.md shows). The module pays a wheel build, a venv and an
install from the uv cache (PyPI for what it lacks), so it is in the ``netns`` tier,
which CI's test step runs and ``-m fake`` does not; its last case needs root for
``netns://`` and, where the lab cannot run, checks that the run fails saying why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from conformance import CHECKS
from labs.netns import missing as netns_missing

pytestmark = [pytest.mark.netns, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "bridge-plugin"
# What the outer run must not hand the author's pytest: its venv, its path, its options,
# and the rig's counters and metrics directories (the inner run would write into them).
KEPT_ENV = ("PATH", "HOME", "LANG", "TMPDIR", "RIG_SEED", "UV_CACHE_DIR")
CONTRACTS = "bridge_plugin/contracts"
PINS = f"{CONTRACTS}/pins.json"
RESULT = re.compile(r"^test_bridge_plugin\.py::test_conformance\[(\w+)-([\w-]+)\] (\w+)", re.M)


@dataclass
class Installed:
    venv: Path
    project: Path
    seconds: float

    def env(self) -> dict[str, str]:
        kept = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
        return {**kept, "PATH": f"{self.venv / 'bin'}:{kept.get('PATH', '/usr/bin:/bin')}"}

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            cwd=self.project,
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )

    def pytest(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.venv / "bin" / "python"), "-m", "pytest", "-v", *args)


def uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    assert found, "uv is not on PATH (scripts/test installs it: scripts/_bootstrap.sh)"
    return found


def checked(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The test kit's wheel of this tree and the product's it depends on, installed in a
    fresh venv at the locked versions, and the example's repository beside it, pinned by
    the installed ``networkplugin-pin`` (its committed pins.json removed first), as an
    author would."""
    root = tmp_path_factory.mktemp("installed")
    assert not root.is_relative_to(REPO)
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    checked(
        [uv(), "build", "--all-packages", "--wheel", "--out-dir", str(root / "dist"), "-q"],
        env, cwd=REPO,
    )  # fmt: skip
    (product,) = (root / "dist").glob("dra_networkplugins-*.whl")
    (kit,) = (root / "dist").glob("dra_networkplugins_testkit-*.whl")
    assert {name.split("/")[0] for name in zipfile.ZipFile(product).namelist()} == {
        "plugins",
        product.name.split("-py3")[0] + ".dist-info",
    }
    locked = root / "locked.txt"
    checked(
        [uv(), "export", "--frozen", "--no-dev", "--package", "dra-networkplugins-testkit",
         "--no-emit-workspace", "--no-hashes", "-q", "-o", str(locked)],
        env, cwd=REPO,
    )  # fmt: skip
    venv = root / "venv"
    checked([uv(), "venv", "-q", "--python", sys.executable, str(venv)], env)
    checked(
        [uv(), "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
         "-c", str(locked), str(kit), str(product)],
        env,
    )  # fmt: skip
    project = root / "bridge-plugin"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
    here = project
    while here != here.parent:
        assert not (here / "conftest.py").exists(), f"{here}/conftest.py"
        here = here.parent
    seconds = time.monotonic() - started
    print(f"\nwheel, venv and install in {seconds:.1f} s under {root}")
    made = Installed(venv, project, seconds)
    (project / PINS).unlink()
    pinned = made.run("networkplugin-pin", CONTRACTS)
    assert pinned.returncode == 0, pinned.stderr
    return made


def outcomes(stdout: str) -> dict[str, tuple[str, str]]:
    return {check: (lab, outcome) for lab, check, outcome in RESULT.findall(stdout)}


def expected(lab: str) -> dict[str, tuple[str, str]]:
    """Every check passes on the lab but external-change, which needs a ``tamper``."""
    return {check: (lab, "SKIPPED" if check == "external-change" else "PASSED") for check in CHECKS}


def test_the_pin_tool_runs_from_the_installed_package(installed: Installed) -> None:
    """The fixture pinned with the console script; ``python -m`` checks, and says what to
    run when the pins are missing."""
    assert (installed.project / PINS).read_text() == (EXAMPLE / PINS).read_text()
    current = installed.run("python", "-m", "plugins.sdk.pin", "--check", CONTRACTS)
    assert current.returncode == 0, current.stderr
    unpinned = installed.project.parent / "unpinned"
    shutil.copytree(installed.project / CONTRACTS, unpinned, dirs_exist_ok=True)
    (unpinned / "pins.json").unlink()
    stale = installed.run("python", "-m", "plugins.sdk.pin", "--check", str(unpinned))
    assert stale.returncode == 1, stale.stderr
    assert f"pins.json is missing; run: networkplugin-pin {unpinned}" in stale.stderr


def test_the_suite_is_the_installed_one(installed: Installed) -> None:
    where = installed.run(
        "python", "-c", "import conformance, plugins; print(conformance.__file__)"
    )
    assert where.stdout.startswith(str(installed.venv)), where.stdout + where.stderr


def test_a_third_party_plugin_passes_on_lab_fake(installed: Installed) -> None:
    started = time.monotonic()
    result = installed.pytest("-p", "no:cacheprovider", "--lab", "fake://")
    print(f"\n--lab fake:// in {time.monotonic() - started:.1f} s")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "lab: fake://, start-state seed" in result.stdout
    assert outcomes(result.stdout) == expected("fake"), result.stdout


def test_lab_netns_runs_on_the_real_kernel_or_fails_saying_why(installed: Installed) -> None:
    started = time.monotonic()
    result = installed.pytest("-p", "no:cacheprovider", "--lab", "netns://")
    print(f"\n--lab netns:// in {time.monotonic() - started:.1f} s")
    missing = netns_missing()
    if missing is None:
        assert result.returncode == 0, result.stdout + result.stderr
        assert outcomes(result.stdout) == expected("netns"), result.stdout
    else:
        assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
        assert result.stderr.strip() == (
            f"ERROR: --lab netns://: this machine cannot run it: {missing}"
        ), result.stderr
