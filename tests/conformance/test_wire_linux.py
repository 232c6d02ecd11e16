"""The wire suite on this machine's kernel (``linux://``: a netns lab per check), against
the independent plugin (its pyroute2 backend) and the project's own macvlan plugin
(networkplugin-links, on the SDK): the same checks as on the fake kernel.

Both target files name ``fake://``; here their kernel is ``linux://``.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import allure
import pytest

from conformance import WIRE_CHECKS, WireLabs, WireTarget, load_wire_target, run_check
from harness.pytest_plugin import require_lab
from labs.netns import missing

pytestmark = pytest.mark.netns

REPO = Path(__file__).resolve().parents[2]
TARGETS = {
    "independent": REPO / "examples" / "independent-plugin" / "target.yaml",
    "project-macvlan": REPO / "conformance" / "targets" / "macvlan.yaml",
}


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest) -> Iterator[dict[str, tuple[WireTarget, WireLabs]]]:
    require_lab(request.config, "netns", missing())
    opened: dict[str, tuple[WireTarget, WireLabs]] = {}
    try:
        for name, path in TARGETS.items():
            target = dataclasses.replace(load_wire_target(path), kernel_url="linux://", lab=None)
            opened[name] = (target, WireLabs(target))
        yield opened
    finally:
        for _, labs in opened.values():
            labs.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("check", list(WIRE_CHECKS))
@pytest.mark.parametrize("plugin", list(TARGETS))
def test_wire_check_on_linux(
    plugin: str, check: str, runs: dict[str, tuple[WireTarget, WireLabs]]
) -> None:
    target, labs = runs[plugin]
    verdict = run_check(target, check, labs)
    print(verdict.line())
    allure.dynamic.title(f"wire {target.name} on linux://: {check}")
    allure.attach(verdict.line(), "verdict", allure.attachment_type.TEXT)
    if verdict.outcome == "not applicable":
        pytest.skip(f"{check} does not apply to {target.name}: {verdict.detail}")
    assert verdict.outcome == "passed", verdict.line()


@pytest.mark.timeout(300)
def test_command_line_observes_the_kernel_it_is_given(request: pytest.FixtureRequest) -> None:
    require_lab(request.config, "netns", missing())
    argv = ["-m", "conformance", "--target", str(TARGETS["independent"])]
    argv += ["--kernel", "linux://", "--check", "getinfo-identity"]
    done = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kernel linux://" in done.stdout
    assert "PASS  getinfo-identity" in done.stdout
