"""The rig runs the fake tier on every core and the machine-sharing tiers in one process."""

from __future__ import annotations

import pytest

from harness.rig import parallel_args


@pytest.mark.parametrize(
    ("tier", "given", "added"),
    [
        ("fake", [], ["-n", "auto"]),
        ("fake", ["-k", "bond"], ["-n", "auto"]),
        ("fake", ["-n", "0"], []),  # the caller's choice stands: one process
        ("fake", ["-n3"], []),
        ("fake", ["--numprocesses=1"], []),
        ("netns", [], []),  # one machine's kernel: the lab's names are shared
        ("vm", [], []),  # one guest
        ("sriov", [], []),  # the inventory's hosts
    ],
)
def test_only_the_fake_tier_is_spread_over_workers(
    tier: str, given: list[str], added: list[str]
) -> None:
    assert parallel_args(tier, given) == added
