"""Differential tests: every scenario on the fake kernel and on the running kernel.

``test_fake_matches_real`` (netns tier) demands the same outcome log (every call's
result or errno) and the same normalized observation from both backends.
``test_scenario_runs_on_fake`` (fake tier) runs each scenario on the fake alone and
checks it is deterministic. ``test_fake_matches_vm`` (vm tier) runs every scenario in
the VM lab's guest (Debian's 6.1 or 6.12, ``DRANP_VM_KERNEL``) and on a fake of the
same node (its igb PFs, ``fakekernel/labs/vm-igb.yaml``), counts the agreement into
``rig_stats``, and fails on any divergence ``KNOWN_DIVERGENCES`` does not explain; a
listed divergence that no longer diverges fails too, so the list cannot rot.
"""

from __future__ import annotations

import difflib
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from harness.pytest_plugin import RigStats
from labs import VmLab
from labs.vm import BOOT_DEADLINE_S

from . import regressions  # noqa: F401  (registers the generated runs' regression scenarios)
from .conftest import RealKernel, Stats
from .known_divergences import KNOWN_DIVERGENCES, kernel_series
from .scenarios import SCENARIOS, Scenario
from .world import (
    FakeWorld,
    GuestBaseline,
    LinuxWorld,
    VmWorld,
    World,
    dumps,
    running_kernel_has_live_rename,
    vm_like_model,
)


def run(world: World, sc: Scenario) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    try:
        sc.run(world)
        return world.log, world.observe()
    finally:
        world.close()


def run_on_fake(
    sc: Scenario, *, guest: GuestBaseline | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """On a fresh fake: of the VM lab's ``guest`` (its igb PFs, its release) when
    given; else of this machine's kernel, and of a 6.1 guest for a scenario using
    SR-IOV PFs (kind "device")."""
    if guest is not None:
        return run(guest.fake_world(), sc)
    rename = running_kernel_has_live_rename()
    model = vm_like_model(live_rename=rename) if "device" in sc.kinds else None
    return run(FakeWorld(live_rename=rename, model=model), sc)


def differences(name: str, fake: Any, real: Any) -> str:
    lines = difflib.unified_diff(
        dumps(fake).splitlines(), dumps(real).splitlines(), "fake", "linux", lineterm="", n=4
    )
    return f"{name} differs (- fake, + linux):\n" + "\n".join(lines)


# A directory to write each vm scenario's two runs to (``<release>/<scenario>.json``),
# e.g. to attach to a report or to compare another version of the fake with offline.
RECORD_ENV = "DRANP_DIFFERENTIAL_RECORD"


def record(sc: Scenario, release: str, runs: dict[str, Any]) -> None:
    directory = os.environ.get(RECORD_ENV)
    if not directory:
        return
    path = Path(directory) / release / f"{sc.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(runs))


def test_the_corpus_is_big_enough_and_names_are_unique() -> None:
    assert len(SCENARIOS) >= 100
    assert len({s.name for s in SCENARIOS}) == len(SCENARIOS)


def test_known_divergences_name_scenarios_kernels_and_aspects() -> None:
    names = {s.name for s in SCENARIOS}
    for (series, name), known in KNOWN_DIVERGENCES.items():
        assert name in names, f"KNOWN_DIVERGENCES names no scenario {name!r}"
        assert series in ("6.1", "6.12"), f"{name}: kernel series {series!r}"
        assert known.aspects, f"{name}: diverges in nothing?"
        assert known.aspects <= {"outcome", "state"}, f"{name}: {sorted(known.aspects)}"
        assert known.reason, f"{name}: a divergence needs its reason"
    assert kernel_series("6.12.57+deb12-amd64") == "6.12"
    assert kernel_series("6.1.0-57-amd64") == "6.1"


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


# Whichever scenario runs first boots the guest in its setup, under the per-test timeout.
@pytest.mark.vm
@pytest.mark.timeout(BOOT_DEADLINE_S + 120)
@pytest.mark.parametrize("sc", SCENARIOS, ids=str)
def test_fake_matches_vm(
    sc: Scenario, vm_lab: VmLab, guest: GuestBaseline, stats: Stats, rig_stats: RigStats
) -> None:
    stats.vm_release = guest.release
    series = kernel_series(guest.release)
    fake_log, fake_view = run_on_fake(sc, guest=guest)
    real_log, real_view = run(VmWorld(vm_lab.kernel, guest, sriov="device" in sc.kinds), sc)
    outcome_agrees, state_agrees = fake_log == real_log, fake_view == real_view
    record(sc, guest.release, {"fake": [fake_log, fake_view], "linux": [real_log, real_view]})
    for key, agreed in (
        ("scenarios", True),
        ("outcome_agree", outcome_agrees),
        ("state_agree", state_agrees),
    ):
        stats.vm[key] += int(agreed)
        rig_stats.add(f"differential_{key}", int(agreed))
    known = KNOWN_DIVERGENCES.get((series, sc.name))
    if known is not None:
        stats.vm["known"] += 1
        assert known.may_agree or not (outcome_agrees and state_agrees), (
            f"{sc.name} no longer diverges on {series}: remove it from KNOWN_DIVERGENCES "
            f"({known.reason})"
        )
        diverging = {"outcome"} if not outcome_agrees else set()
        diverging |= {"state"} if not state_agrees else set()
        assert diverging <= known.aspects, (
            f"{sc.name} diverges in {sorted(diverging - known.aspects)} beyond what "
            f"KNOWN_DIVERGENCES explains: "
            + differences("the outcome log", fake_log, real_log)
            + "\n"
            + differences("the observation", fake_view, real_view)
        )
        return
    assert fake_log == real_log, differences("the outcome log", fake_log, real_log)
    assert fake_view == real_view, differences("the observation", fake_view, real_view)
