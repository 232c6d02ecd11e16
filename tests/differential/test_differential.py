"""Differential tests: every scenario on the fake kernel and on the running kernel.

``test_fake_matches_real`` (netns tier) demands the same outcome log (every call's
result or errno) and the same normalized observation from both backends.
``test_scenario_runs_on_fake`` (fake tier) runs each scenario on the fake alone and
checks it is deterministic.
"""

from __future__ import annotations

import difflib
import uuid
from typing import Any

import pytest

from .conftest import RealKernel, Stats
from .scenarios import SCENARIOS, Scenario
from .world import FakeWorld, LinuxWorld, World, dumps, running_kernel_has_live_rename


def run(world: World, sc: Scenario) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    try:
        sc.run(world)
        return world.log, world.observe()
    finally:
        world.close()


def run_on_fake(sc: Scenario) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return run(FakeWorld(live_rename=running_kernel_has_live_rename()), sc)


def differences(name: str, fake: Any, real: Any) -> str:
    lines = difflib.unified_diff(
        dumps(fake).splitlines(), dumps(real).splitlines(), "fake", "linux", lineterm="", n=4
    )
    return f"{name} differs (- fake, + linux):\n" + "\n".join(lines)


def test_the_corpus_is_big_enough_and_names_are_unique() -> None:
    assert len(SCENARIOS) >= 25
    assert len({s.name for s in SCENARIOS}) == len(SCENARIOS)


@pytest.mark.parametrize("sc", SCENARIOS, ids=str)
def test_scenario_runs_on_fake(sc: Scenario) -> None:
    first = run_on_fake(sc)
    second = run_on_fake(sc)
    assert first[0], "a scenario makes at least one recorded call"
    assert first == second, differences("a second run on the fake", first, second)


@pytest.mark.netns
@pytest.mark.parametrize("sc", SCENARIOS, ids=str)
def test_fake_matches_real(sc: Scenario, real_kernel: RealKernel, stats: Stats) -> None:
    stats.scenarios.add(sc.name)
    why_not = real_kernel.why_not(sc.kinds)
    if why_not is not None:
        stats.skipped[why_not] += 1
        pytest.skip(why_not)
    assert real_kernel.directory is not None
    directory = real_kernel.directory / f"{sc.name[:40]}-{uuid.uuid4().hex[:6]}"
    fake_log, fake_view = run_on_fake(sc)
    real_log, real_view = run(LinuxWorld(directory), sc)
    stats.ran.add(sc.name)
    assert fake_log == real_log, differences("the outcome log", fake_log, real_log)
    assert fake_view == real_view, differences("the observation", fake_view, real_view)
