"""The project's own macvlan plugin (networkplugin-links, on the SDK) through the wire
suite, on this machine's kernel: the checks that run in process run over the wire too,
and the wire driver's ``linux://`` kernel (a netns lab per check) is exercised.

``conformance/targets/macvlan.yaml`` names ``fake://``; here its kernel is ``linux://``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import allure
import pytest

from conformance import WIRE_CHECKS, WireLabs, WireTarget, load_wire_target, run_check
from harness.pytest_plugin import require_lab
from labs.netns import missing

pytestmark = pytest.mark.netns

TARGET = Path(__file__).resolve().parents[2] / "conformance" / "targets" / "macvlan.yaml"


@pytest.fixture(scope="module")
def run(request: pytest.FixtureRequest) -> Iterator[tuple[WireTarget, WireLabs]]:
    require_lab(request.config, "netns", missing())
    target = dataclasses.replace(load_wire_target(TARGET), kernel_url="linux://", lab=None)
    with WireLabs(target) as labs:
        yield target, labs


@pytest.mark.timeout(300)
@pytest.mark.parametrize("check", list(WIRE_CHECKS))
def test_project_macvlan_over_the_wire(check: str, run: tuple[WireTarget, WireLabs]) -> None:
    target, labs = run
    verdict = run_check(target, check, labs)
    print(verdict.line())
    # The report shows each variant's verdict per check, the failure's detail included.
    allure.dynamic.title(f"wire {target.name} ({target.source.rsplit('/', 1)[-1]}): {check}")
    allure.attach(verdict.line(), "verdict", allure.attachment_type.TEXT)
    if verdict.outcome == "not applicable":
        pytest.skip(f"{check} does not apply to {target.name}: {verdict.detail}")
    assert verdict.outcome == "passed", verdict.line()
