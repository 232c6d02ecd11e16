"""The NIC labs' crash samples (``harness.remote_rig``): a tenth of the points at least,
another sample for another seed, every point in full mode, and a VF's move into the pod
always among vf-bond's SIGKILL runs. On the fake lab's reference points (the same
lifecycles as on a host: only the count of points differs)."""

from __future__ import annotations

import math

import pytest

from harness.remote_rig import FULL_ENV, moves_a_vf, seeded_sample
from plugins.sdk.runner import CrashPoint
from tests.rig.conftest import References


@pytest.fixture(scope="module", params=["vf-bond", "macvlan"])
def points(request: pytest.FixtureRequest, references: References) -> tuple[str, list[CrashPoint]]:
    topology = str(request.param)
    return topology, references.plugin(topology).points


def test_a_sample_covers_a_tenth_and_rotates_with_the_seed(
    points: tuple[str, list[CrashPoint]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FULL_ENV, raising=False)
    topology, reference = points
    samples = [tuple(seeded_sample(topology, reference, 3, str(seed))) for seed in range(8)]
    for sample in samples:
        assert len(sample) >= math.ceil(len(reference) / 10), "under a tenth of the points"
        assert len(set(sample)) == len(sample)
        assert list(sample) == sorted(sample, key=reference.index), "not in lifecycle order"
    assert len(set(samples)) > 1, "every seed drew the same sample"
    assert seeded_sample(topology, reference, 3, "7") == list(samples[7]), "not reproducible"


def test_vf_bond_samples_always_kill_a_vf_moving_into_the_pod(
    references: References, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FULL_ENV, raising=False)
    reference = references.plugin("vf-bond").points
    moves = [p for p in reference if moves_a_vf("vf-bond", p)]
    assert {p.hook for p in moves} == {"ConnectNetwork", "RemoveNetwork"}, "no VF moves"
    for seed in range(20):
        sample = seeded_sample("vf-bond", reference, 3, str(seed))
        assert any(p.hook == "ConnectNetwork" and moves_a_vf("vf-bond", p) for p in sample)


def test_full_mode_crashes_every_point(
    points: tuple[str, list[CrashPoint]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FULL_ENV, "1")
    topology, reference = points
    assert seeded_sample(topology, reference, 3, "1") == reference
