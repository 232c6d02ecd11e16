"""The rig's per-lab summaries, their names, the combined summary and the report's
environment when one report holds several labs."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

from harness.labs import lab_slug, summary_path
from harness.report import write_environment
from harness.summaries import combine, main


@pytest.mark.parametrize(
    ("url", "slug"),
    [
        ("fake://", "fake"),
        ("netns://", "netns"),
        ("vm://", "vm"),
        ("vm://?kernel=6.12", "vm-6.12"),
        ("sriov://inventories/emulated.yml", "sriov-inventories_emulated.yml"),
    ],
)
def test_each_lab_has_its_own_summary_file(url: str, slug: str) -> None:
    assert lab_slug(url) == slug
    assert summary_path(Path("reports"), url) == Path(f"reports/summary-{slug}.json")


def test_one_lab_is_its_own_summary_and_several_are_totalled() -> None:
    vm = {"tier": "vm", "invariant_violations": 0, "tests_failed": 1, "seconds": 10.0}
    fake = {"tier": "fake", "invariant_violations": 2, "tests_passed": 5, "seconds": 2.5}
    assert combine([vm]) == vm
    both = combine([vm, fake])
    assert both["labs"] == [vm, fake]
    assert (both["invariant_violations"], both["tests_failed"], both["tests_passed"]) == (2, 1, 5)
    assert both["seconds"] == 12.5


def test_a_lab_without_a_summary_fails_the_combination(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary_path(tmp_path, "fake://").write_text(json.dumps({"tier": "fake"}))
    assert main([str(tmp_path), "fake://", "vm://"]) == 1
    assert "summary-vm.json" in capsys.readouterr().err
    assert json.loads((tmp_path / "summary.json").read_text()) == {"tier": "fake"}


def test_the_environment_keeps_every_labs_keys(tmp_path: Path) -> None:
    write_environment(tmp_path, "vm://")
    write_environment(tmp_path, "vm://", {"kernel_release": "6.1.0-57-amd64", "boot_seconds": 70})
    write_environment(tmp_path, "vm://?kernel=6.12", {"kernel_release": "6.12.117+deb12-amd64"})
    lines = (tmp_path / "environment.properties").read_text().splitlines()
    props = dict(line.split("=", 1) for line in lines)
    assert len(props) == len(lines), "a key written twice"
    assert props["vm.kernel"].startswith("Linux 6.1.0-57-amd64 (guest")
    assert props["vm.boot_seconds"] == "70"
    assert props["vm-6.12.kernel"].startswith("Linux 6.12.117+deb12-amd64 (guest")
    assert "igb" in props["vm-6.12.nic.model"]


def test_an_sriov_labs_environment_names_each_hosts_testbed(tmp_path: Path) -> None:
    pf = {
        "pci": "0000:01:00.0",
        "netdev": "enp1s0",
        "model": "Intel 82576 (QEMU igb)",
        "driver": "igb",
        "driver_version": "6.1.0-50-amd64",
        "firmware": "",
        "vfs": 4,
    }
    bed = {"kernel": "6.1.0-50-amd64", "emulated": True, "pfs": [pf]}
    write_environment(tmp_path, "sriov://inventories/emulated.yml", {"hosts": {"emu": bed}})
    lines = (tmp_path / "environment.properties").read_text().splitlines()
    props = dict(line.split("=", 1) for line in lines)
    assert all(":" not in key for key in props), "a colon separates a properties key"
    slug = next(k for k in props if k.endswith(".lab")).removesuffix(".lab")
    assert props[f"{slug}.emu.kernel"] == "Linux 6.1.0-50-amd64"
    assert props[f"{slug}.emu.emulated"] == "true"
    described = props[f"{slug}.emu.pf.enp1s0"]
    assert "Intel 82576 (QEMU igb) at PCI 0000:01:00.0" in described
    assert "driver igb 6.1.0-50-amd64" in described
    assert "firmware none" in described
    assert "4 VFs" in described


def test_the_fake_labs_kernel_is_the_model_and_the_counters_are_listed(tmp_path: Path) -> None:
    """The report's overview lists the environment: on the fake lab no Linux kernel ran
    the plugins (it named this machine's), and the run's counters sit beside the lab."""
    summary = {
        "crash_points_enumerated": 218,
        "crash_runs_inprocess": 436,
        "compound_crash_runs": 98,
        "coordinator_crash_runs": 276,
        "crash_runs_sigkill": 31,
        "invariant_violations": 0,
        "io_faults_injected": 192,
        "io_fault_violations": 0,
    }
    write_environment(tmp_path, "fake://", {}, summary)
    write_environment(tmp_path, "netns://")
    lines = (tmp_path / "environment.properties").read_text().splitlines()
    props = dict(line.split("=", 1) for line in lines)
    assert platform.release() not in props["fake.kernel"]
    assert "fakekernel model" in props["fake.kernel"]
    assert props["netns.kernel"] == f"Linux {platform.release()} (this machine)"
    assert props["fake.crash_points"] == "218"
    assert (
        props["fake.crash_runs"] == "841 (436 in-process, 98 compound, 276 coordinator, 31 SIGKILL)"
    )
    assert props["fake.invariant_violations"] == "0"
    assert props["fake.io_faults"] == "192 injected, 0 violations"
    keys = [line.split("=", 1)[0] for line in lines]
    assert keys[:5] == [
        f"fake.{k}" for k in ("lab", "kernel", "crash_points", "crash_runs", "invariant_violations")
    ], "the overview shows the first five"
