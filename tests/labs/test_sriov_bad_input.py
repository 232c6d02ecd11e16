"""Bad input for provisioning (issue 12): each case is one line naming the host and the
cause, and the host is left exactly as it was.

An absent PF, more VFs than the PF offers and a ``sriov_numvfs`` the host refuses to
write are caught by the preflight (``roles/dranp/tasks/preflight.yml``), which runs on
every host before any host changes: the run ends there, no teardown is needed, and a
provisioned host stays provisioned. The ``sriov`` test makes all three mistakes in one
run on the session's provisioned host (so it costs one preflight, not three provisions)
and checks with testinfra that nothing changed. A NIC lacking what a topology needs is
one line from the inventory (``labs.sriov.lacking``), checked here; the NIC labs' suites
then expect the kernel's refusal (tests/e2e/test_nic_lab_topologies.py).
"""

from __future__ import annotations

import errno
import importlib.util
import json
import shlex
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from labs.sriov import (
    ANSIBLE_DIR,
    ProvisionError,
    SriovLab,
    changes_since,
    check_provisioned,
    lacking,
    load_inventory,
    provision,
    snapshot,
)
from labs.sriov._checks import footprint, footprint_changes
from labs.sriov._provision import _cause

ROLE = ANSIBLE_DIR / "roles" / "dranp"
PREFLIGHT = "Check the PFs the inventory names"
# A PCI address no host of the lab has (the test checks it is absent before relying on it).
ABSENT_PCI = "0000:7f:1f.7"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "dranp_sriov", ROLE / "library" / "dranp_sriov.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Path]:
    """The role's module with its PCI root a directory of this test."""
    module = _module()
    root = tmp_path / "devices"
    root.mkdir()
    monkeypatch.setattr(module, "PCI", root)
    return module, root


def _pf(root: Path, pci: str, *, driver: str = "igb", total: int = 7, numvfs: int = 4) -> None:
    device = root / pci
    (device / "net" / f"eth{len(list(root.iterdir()))}").mkdir(parents=True)
    bound = root.parent / "drivers" / driver
    bound.mkdir(parents=True, exist_ok=True)
    (device / "driver").symlink_to(bound)
    (device / "sriov_totalvfs").write_text(f"{total}\n")
    (device / "sriov_numvfs").write_text(f"{numvfs}\n")


def _asked(pci: str, vfs: int = 4, driver: str = "igb") -> dict[str, Any]:
    return {"pci": pci, "vfs": vfs, "driver": driver, "vf_driver": "igbvf"}


def test_the_preflight_names_every_bad_pf_of_a_host_in_one_line(
    sysfs: tuple[ModuleType, Path],
) -> None:
    module, root = sysfs
    for pci in ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0"):
        _pf(root, pci)
    asked = [
        _asked("0000:01:00.0"),
        _asked("0000:09:00.0"),
        _asked("0000:02:00.0", vfs=8),
        _asked("0000:03:00.0", driver="ice"),
    ]
    with pytest.raises(module.HostError) as refused:
        module.check(asked)
    assert str(refused.value) == (
        f"PF 0000:09:00.0: absent (no {root}/0000:09:00.0); "
        "PF 0000:02:00.0: sriov_totalvfs is 7, 8 asked; "
        "PF 0000:03:00.0: bound to igb, not ice"
    )
    # The good PF was probed with the count it holds, and holds it still.
    assert (root / "0000:01:00.0" / "sriov_numvfs").read_text().strip() == "4"


def test_a_pf_whose_sriov_numvfs_is_refused_a_write_fails_the_preflight(
    sysfs: tuple[ModuleType, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    module, root = sysfs
    _pf(root, "0000:01:00.0")
    module.check([_asked("0000:01:00.0")])  # a host that takes the write passes

    def refuse(path: Path, data: str, *args: object, **kwargs: object) -> int:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(Path, "write_text", refuse)
    with pytest.raises(module.HostError) as refused:
        module.check([_asked("0000:01:00.0")])
    assert str(refused.value) == (
        "PF 0000:01:00.0: sriov_numvfs cannot be written: Read-only file system"
    )


def test_the_preflight_runs_on_every_host_before_the_first_change() -> None:
    (preflight, provisioning) = yaml.safe_load((ANSIBLE_DIR / "provision.yml").read_text())
    # One host's failure ends the run for all, before the provisioning play.
    assert preflight["any_errors_fatal"] is True
    assert [t["ansible.builtin.include_role"]["tasks_from"] for t in preflight["tasks"]] == [
        "preflight"
    ]
    checks = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
    assert [(t["name"], t["dranp_sriov"]["action"]) for t in checks] == [(PREFLIGHT, "check")]
    steps = yaml.safe_load((ROLE / "tasks" / "provision.yml").read_text())
    assert "check" not in [t.get("dranp_sriov", {}).get("action") for t in steps]
    assert "rescue" in provisioning["tasks"][0]


def test_a_pf_lacking_a_capability_is_one_line_naming_host_pf_and_capability(
    tmp_path: Path,
) -> None:
    pfs = [
        {"pci": "0000:3b:00.0", "capabilities": ["vf_mac", "bond_of_vfs", "vlan_on_bond"]},
        {"pci": "0000:3b:00.1", "capabilities": ["vf_mac", "bond_of_vfs"]},
    ]
    common = {"vfs": 2, "model": "E810", "driver": "ice", "vf_driver": "iavf"}
    host = {
        "ansible_host": "192.0.2.1",
        "ansible_user": "root",
        "ansible_ssh_private_key_file": "key",
        "sriov_pfs": [{**pf, **common} for pf in pfs],
    }
    path = tmp_path / "lab.yml"
    path.write_text(
        yaml.safe_dump({"all": {"children": {"sriov_hosts": {"hosts": {"e810": host}}}}})
    )
    missing = lacking(load_inventory(path).host("e810"))
    assert missing["vlan_on_bond"] == (
        "e810: E810 (ice) at 0000:3b:00.1 does not list vlan_on_bond among its "
        "capabilities (inventory)"
    )
    assert "vf_mac" not in missing
    assert "bond_of_vfs" not in missing
    assert set(missing) >= {"vf_vlan", "vf_trust", "vf_link_state", "vlan_on_vf"}


# -- on the run's SR-IOV lab ----------------------------------------------------------------


def _bad_inventory(sriov_lab: SriovLab, path: Path, total: int) -> dict[str, str]:
    """An inventory of three hosts, each the session's first host (at the address and
    port the session reaches it on) with one mistake; -> each host's expected line."""
    host = next(iter(sriov_lab.inventory))
    variables = {
        **{k: v for k, v in host.variables.items() if k not in ("sriov_pfs", "sriov_emulated")},
        "ansible_port": host.port,
    }
    first, last = host.variables["sriov_pfs"][0], host.variables["sriov_pfs"][-1]
    bad = {
        f"{host.name}-absent-pf": (
            {**first, "pci": ABSENT_PCI},
            f"PF {ABSENT_PCI}: absent (no /sys/bus/pci/devices/{ABSENT_PCI})",
        ),
        f"{host.name}-too-many-vfs": (
            {**first, "vfs": total + 1},
            f"PF {first['pci']}: sriov_totalvfs is {total}, {total + 1} asked",
        ),
        f"{host.name}-read-only": (
            last,
            f"PF {last['pci']}: sriov_numvfs cannot be written: Read-only file system",
        ),
    }
    hosts = {name: {**variables, "sriov_pfs": [pf]} for name, (pf, _) in bad.items()}
    # JSON is YAML without the anchors a YAML dumper makes of shared values (which the
    # loader refuses in a config file).
    path.write_text(json.dumps({"all": {"children": {"sriov_hosts": {"hosts": hosts}}}}))
    return {name: f"{name}: {PREFLIGHT}: {why}" for name, (_, why) in bad.items()}


@pytest.mark.sriov
# The first sriov test of a session also waits for the lab: a boot and a provisioning
# under TCG (the budget test_sriov_provisioning gives it).
@pytest.mark.timeout(1800)
def test_bad_pfs_fail_the_preflight_one_line_each_and_change_nothing(
    sriov_lab: SriovLab, tmp_path: Path
) -> None:
    host = next(iter(sriov_lab.inventory))
    remote = sriov_lab.remote[host.name]
    first, last = host.pfs[0], host.pfs[-1]
    assert not remote.file(f"/sys/bus/pci/devices/{ABSENT_PCI}").exists
    total = int(remote.file(f"/sys/bus/pci/devices/{first.pci}/sriov_totalvfs").content_string)
    expected = _bad_inventory(sriov_lab, tmp_path / "bad.yml", total)
    inventory = load_inventory(tmp_path / "bad.yml")
    # A sriov_numvfs the host refuses to write: a read-only bind mount over the file, as
    # on a host whose /sys is read-only (a container, a confined root).
    numvfs = shlex.quote(f"/sys/bus/pci/devices/{last.pci}/sriov_numvfs")
    before = (snapshot(host, remote), footprint(host, remote))
    try:
        remote.check_output(f"mount --bind {numvfs} {numvfs}")
        remote.check_output(f"mount -o remount,bind,ro {numvfs}")
        refused = remote.run(f"echo {last.vfs} > {numvfs}")
        assert "Read-only file system" in refused.stderr, refused
        result = provision(inventory, builds=sriov_lab.builds)
    finally:
        remote.run(f"umount {numvfs}")
    assert remote.run(f"findmnt {numvfs}").rc == 1, "the read-only mount is still there"
    assert sorted(result.failures) == sorted(expected.values())
    with pytest.raises(ProvisionError) as failed:
        result.check()
    assert failed.value.lines == result.failures
    assert result.changed == 0
    # The session's host is exactly as provisioned: VFs, files, services.
    assert changes_since(before[0], snapshot(host, remote)) == []
    assert footprint_changes(before[1], footprint(host, remote)) == []
    assert check_provisioned(host, remote) == []


def test_a_failure_line_names_the_task_once() -> None:
    module = {"task": PREFLIGHT, "task_action": "dranp_sriov", "res": {"msg": "PF x: absent"}}
    assert _cause(module) == f"{PREFLIGHT}: PF x: absent"
    # The rescue's own fail composed its message from the first failure's task.
    rescue = {"task": "Fail", "task_action": "ansible.builtin.fail", "res": {"msg": "Install: x"}}
    assert _cause(rescue) == "Install: x"
    several = {"task": "Copy", "task_action": "copy", "res": {"msg": "first\nsecond"}}
    assert _cause(several) == "Copy: first"
