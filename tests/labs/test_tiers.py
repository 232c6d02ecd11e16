"""Lab URLs and tiers: each lab parses; a lab that cannot run skips with one line,
and fails when its tier was asked for explicitly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.labs import LabURLError, parse_lab_url
from harness.pytest_plugin import asked_lab, require_lab


@pytest.mark.parametrize(
    ("url", "tier", "target"),
    [
        ("fake://", "fake", ""),
        ("netns://", "netns", ""),
        ("vm://", "vm", ""),
        ("sriov://inventories/lab.yml", "sriov", "inventories/lab.yml"),
    ],
)
def test_lab_urls_parse(url: str, tier: str, target: str) -> None:
    spec = parse_lab_url(url)
    assert (spec.tier, spec.target) == (tier, target)


@pytest.mark.parametrize("url", ["ftp://x", "sriov://", "fake://somewhere", "vm"])
def test_bad_lab_urls_are_refused(url: str) -> None:
    with pytest.raises(LabURLError, match="lab URL"):
        parse_lab_url(url)


@pytest.mark.parametrize(
    ("url", "kernel"),
    [("vm://", "6.1"), ("vm://?kernel=6.1", "6.1"), ("vm://?kernel=6.12", "6.12")],
)
def test_vm_urls_name_their_kernel(url: str, kernel: str) -> None:
    assert parse_lab_url(url).kernel == kernel


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("vm://?kernel=5.10", "6.1, 6.12"),
        ("vm://?cpus=4", "unknown option cpus"),
        ("vm://?kernel=6.1&kernel=6.12", "6.1, 6.12"),
        ("netns://?kernel=6.1", "takes no options"),
    ],
)
def test_bad_vm_options_name_the_valid_ones(url: str, named: str) -> None:
    with pytest.raises(LabURLError, match=named):
        parse_lab_url(url)


def test_a_bad_lab_option_is_a_usage_error_naming_it() -> None:
    """``pytest --lab URL`` parses the URL before collecting anything."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--lab", "vm://?kernel=5.10", "--collect-only", "-q"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "5.10" in done.stderr
    assert "6.1, 6.12" in done.stderr


def test_the_fake_lab_runs_anywhere() -> None:
    assert parse_lab_url("fake://").missing() is None


@pytest.mark.vm
def test_vm_lab(request: pytest.FixtureRequest) -> None:
    require_lab(request.config, "vm", parse_lab_url("vm://").missing())


@pytest.mark.sriov
def test_sriov_lab(request: pytest.FixtureRequest) -> None:
    """The run's ``--lab sriov://`` inventory, else one that does not exist."""
    spec = asked_lab(request.config)
    if spec is None or spec.tier != "sriov":
        spec = parse_lab_url("sriov://inventories/lab.yml")
    require_lab(request.config, "sriov", spec.missing())


def test_an_sriov_lab_names_what_it_lacks(tmp_path: Path) -> None:
    assert parse_lab_url(f"sriov://{tmp_path}/none.yml").missing() == (
        f"inventory '{tmp_path}/none.yml' does not exist"
    )
    bad = tmp_path / "bad.yml"
    bad.write_text("all: {children: {sriov_hosts: {hosts: {h: {}}}}}\n")
    problem = parse_lab_url(f"sriov://{bad}").missing()
    assert problem is not None
    assert str(bad) in problem
    assert "sriov_pfs" in problem
