"""The rig runs the fake tier on every core, its temporary files in memory, and the
machine-sharing tiers in one process with theirs where pytest puts them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from harness.rig import MEMORY_FS, MEMORY_FS_MIN_FREE, parallel_args, scratch, scratch_root


@pytest.mark.parametrize(
    ("tier", "given", "added"),
    [
        ("fake", [], ["-n", "auto", "--dist", "worksteal"]),
        ("fake", ["-k", "bond"], ["-n", "auto", "--dist", "worksteal"]),
        ("fake", ["--dist", "loadfile"], ["-n", "auto"]),  # the caller's split stands
        ("fake", ["-n", "0"], []),  # the caller's choice stands: one process
        ("fake", ["-n3"], []),
        ("fake", ["--numprocesses=1"], []),
        ("netns", [], []),  # one machine's kernel: the lab's names are shared
        ("vm", [], []),  # one guest
        ("sriov", [], []),  # an inventory of one group of hosts (tests/rig/test_sriov_groups.py)
    ],
)
def test_only_the_fake_tier_is_spread_over_workers(
    tier: str, given: list[str], added: list[str]
) -> None:
    assert parallel_args(tier, given) == added


MOUNTS = "proc /proc proc rw 0 0\ntmpfs /dev/shm tmpfs rw,relatime 0 0\n"


@pytest.mark.parametrize(
    ("tier", "given", "table", "root"),
    [
        ("fake", [], MOUNTS, MEMORY_FS),
        ("fake", ["--basetemp=/var/tmp/mine"], MOUNTS, None),  # the caller's choice stands
        ("fake", [], "proc /proc proc rw 0 0\n", None),  # no tmpfs: where pytest puts them
        ("fake", [], "/dev/vda /dev/shm ext4 rw 0 0\n", None),  # not a RAM file system
        ("netns", [], MOUNTS, None),
        ("vm", [], MOUNTS, None),
    ],
)
def test_only_the_fake_tier_keeps_its_journals_in_memory(
    tier: str, given: list[str], table: str, root: Path | None, tmp_path: Path
) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(table)
    assert scratch_root(tier, given, mounts, lambda _: MEMORY_FS_MIN_FREE) == root


def test_a_small_ram_file_system_is_not_used(tmp_path: Path) -> None:
    # A container's /dev/shm of 64 MiB would fill up in the middle of the tier.
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)
    assert scratch_root("fake", [], mounts, lambda _: 64 << 20) is None


def test_scratch_moves_tempfile_for_the_run_and_puts_it_back(tmp_path: Path) -> None:
    before = tempfile.gettempdir()
    with scratch(tmp_path) as args:
        (directory,) = {Path(a.removeprefix("--basetemp=")).parent for a in args}
        assert directory.parent == tmp_path
        assert Path(tempfile.mkdtemp()).parent == directory
        assert os.environ["TMPDIR"] == str(directory)
    assert not directory.exists()
    assert tempfile.gettempdir() == before
    with scratch(None) as args:
        assert args == []
