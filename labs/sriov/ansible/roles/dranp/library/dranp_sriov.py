#!/usr/bin/python3
"""dranp_sriov: a lab host's PFs: check them, record their state, set and restore VFs.

An Ansible module (run on the host, by the host's python3, standard library only) so
each step reports ``changed`` honestly and a failure is one message naming its cause:

* ``check`` (the preflight, before anything changes): every PF exists, is bound to its
  driver, has its netdev and enough VFs, and its ``sriov_numvfs`` takes a write; every
  problem of the host in one message;
* ``record``: write the PFs' state before the lab touches them (``sriov_numvfs`` and
  ``ip -j -d link show`` of each PF: its VF table) to ``path``, unless already there
  (a second run must not record the provisioned state as the "before");
* ``numvfs``: set each PF's ``sriov_numvfs`` (through 0, as the kernel requires) and
  wait until every VF is bound to its driver;
* ``restore``: put back ``sriov_numvfs`` and every VF setting recorded in ``path``
  (nothing to do without a record).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

PCI = Path("/sys/bus/pci/devices")
BIND_DEADLINE_S = 60.0  # VF drivers probe in well under a second on hardware; TCG is slow
POLL_S = 0.2


class HostError(Exception):
    """A cause worth one line: which PF, what is wrong."""


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise HostError(f"{path}: {exc.strerror}") from None


def _netdev(pci: str) -> str:
    names = sorted(p.name for p in (PCI / pci / "net").glob("*"))
    if not names:
        raise HostError(f"PF {pci}: has no netdev (is its driver bound?)")
    return names[0]


def _driver(device: Path) -> str | None:
    link = device / "driver"
    return os.path.basename(os.readlink(link)) if link.is_symlink() else None


def _vf_table(netdev: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        ["ip", "-j", "-d", "link", "show", "dev", netdev],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (link,) = json.loads(out)
    return list(link.get("vfinfo_list", []))


def _probe_write(pci: str, device: Path) -> None:
    """Write ``sriov_numvfs`` the count it holds: the kernel returns at once for that count
    (no VF is made or removed), so this changes nothing, yet a host that refuses the
    write (a read-only /sys, a confined root) refuses it here, before any change."""
    target = device / "sriov_numvfs"
    try:
        target.write_text(_read(target))
    except OSError as exc:
        raise HostError(f"PF {pci}: sriov_numvfs cannot be written: {exc.strerror}") from None


def _check_pf(pf: dict[str, Any]) -> None:
    pci = pf["pci"]
    device = PCI / pci
    if not device.exists():
        raise HostError(f"PF {pci}: absent (no {device})")
    driver = _driver(device)
    if driver != pf["driver"]:
        raise HostError(f"PF {pci}: bound to {driver or 'no driver'}, not {pf['driver']}")
    total = device / "sriov_totalvfs"
    if not total.exists():
        raise HostError(f"PF {pci}: not SR-IOV capable (no {total})")
    if int(_read(total)) < pf["vfs"]:
        raise HostError(f"PF {pci}: sriov_totalvfs is {_read(total)}, {pf['vfs']} asked")
    netdev = _netdev(pci)
    if pf.get("netdev") and pf["netdev"] != netdev:
        raise HostError(f"PF {pci}: its netdev is {netdev}, not {pf['netdev']}")
    _probe_write(pci, device)


def check(pfs: list[dict[str, Any]]) -> None:
    """Every PF's first problem, all in one message: one run shows the engineer the
    whole of what to fix on this host."""
    problems = []
    for pf in pfs:
        try:
            _check_pf(pf)
        except HostError as exc:
            problems.append(str(exc))
    if problems:
        raise HostError("; ".join(problems))


def record(pfs: list[dict[str, Any]], path: Path) -> bool:
    if path.exists():
        return False
    state = []
    for pf in pfs:
        netdev = _netdev(pf["pci"])
        state.append(
            {
                "pci": pf["pci"],
                "netdev": netdev,
                "sriov_numvfs": int(_read(PCI / pf["pci"] / "sriov_numvfs")),
                "vfs": _vf_table(netdev),
            }
        )
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps({"pfs": state}, indent=1, sort_keys=True))
    os.replace(staging, path)  # whole or absent: teardown trusts what it finds
    return True


def _write_numvfs(pci: str, count: int) -> None:
    target = PCI / pci / "sriov_numvfs"
    try:
        if int(_read(target)) != 0:
            target.write_text("0")
        if count:
            target.write_text(str(count))
    except OSError as exc:
        raise HostError(f"PF {pci}: cannot set sriov_numvfs to {count}: {exc.strerror}") from None


def _unbound_vfs(pci: str, count: int, vf_driver: str | None) -> list[str]:
    device = PCI / pci
    waiting = []
    for i in range(count):
        vf = device / f"virtfn{i}"
        driver = _driver(vf) if vf.exists() else None
        if driver is None or (vf_driver and driver != vf_driver):
            waiting.append(f"VF {i} ({driver or 'no driver'})")
    return waiting


def _wait_bound(pci: str, count: int, vf_driver: str | None) -> None:
    deadline = time.monotonic() + BIND_DEADLINE_S
    while waiting := _unbound_vfs(pci, count, vf_driver):
        if time.monotonic() > deadline:
            raise HostError(
                f"PF {pci}: not bound to {vf_driver or 'a driver'} after "
                f"{BIND_DEADLINE_S:.0f} s: {', '.join(waiting)}"
            )
        time.sleep(POLL_S)  # polling sysfs: a bind has no event we could wait on here


def set_numvfs(pfs: list[dict[str, Any]]) -> bool:
    changed = False
    for pf in pfs:
        if int(_read(PCI / pf["pci"] / "sriov_numvfs")) != pf["vfs"]:
            _write_numvfs(pf["pci"], pf["vfs"])
            changed = True
        _wait_bound(pf["pci"], pf["vfs"], pf["vf_driver"])
    return changed


def _vlan(vf: dict[str, Any]) -> tuple[int, int]:
    entry = (vf.get("vlan_list") or [vf])[0]
    return int(entry.get("vlan", 0)), int(entry.get("qos", 0))


def _settings(vf: dict[str, Any]) -> dict[str, list[str]]:
    """``ip link set dev PF vf N`` arguments for each setting the VF table shows."""
    vlan, qos = _vlan(vf)
    rate = vf.get("rate", {})
    settings = {
        "mac": ["mac", vf.get("address", vf.get("mac", ""))],
        "vlan": ["vlan", str(vlan), "qos", str(qos)],
        "max_tx_rate": ["max_tx_rate", str(rate.get("max_tx", 0))],
        "min_tx_rate": ["min_tx_rate", str(rate.get("min_tx", 0))],
    }
    for key in ("spoofchk", "trust"):
        if key in vf:
            settings[key] = [key, "on" if vf[key] else "off"]
    if "link_state" in vf:
        settings["link_state"] = ["state", str(vf["link_state"])]
    return settings


def restore(path: Path) -> bool:
    if not path.exists():
        return False
    changed = False
    for pf in json.loads(path.read_text())["pfs"]:
        pci, count = pf["pci"], pf["sriov_numvfs"]
        if int(_read(PCI / pci / "sriov_numvfs")) != count:
            _write_numvfs(pci, count)
            _wait_bound(pci, count, None)
            changed = True
        netdev = _netdev(pci)
        now = {vf["vf"]: _settings(vf) for vf in _vf_table(netdev)}
        for vf in pf["vfs"]:
            for key, args in _settings(vf).items():
                if now.get(vf["vf"], {}).get(key) == args:
                    continue
                command = ["ip", "link", "set", "dev", netdev, "vf", str(vf["vf"]), *args]
                done = subprocess.run(command, capture_output=True, text=True, check=False)
                if done.returncode:
                    raise HostError(
                        f"PF {pci}: cannot restore VF {vf['vf']}'s {key}: {done.stderr.strip()}"
                    )
                changed = True
    return changed


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "action": {
                "type": "str",
                "required": True,
                "choices": ["check", "record", "numvfs", "restore"],
            },
            "pfs": {"type": "list", "elements": "dict", "default": []},
            "path": {"type": "path"},
        },
        required_if=[("action", "record", ["path"]), ("action", "restore", ["path"])],
    )
    action, pfs = module.params["action"], module.params["pfs"]
    path = Path(module.params["path"]) if module.params["path"] else None
    try:
        if action == "check":
            check(pfs)
            changed = False
        elif action == "record":
            assert path is not None
            changed = record(pfs, path)
        elif action == "numvfs":
            changed = set_numvfs(pfs)
        else:
            assert path is not None
            changed = restore(path)
    except HostError as exc:
        module.fail_json(msg=str(exc))
    except (OSError, subprocess.CalledProcessError, ValueError) as exc:
        module.fail_json(msg=f"{action}: {exc}")
    module.exit_json(changed=changed)


if __name__ == "__main__":
    main()
