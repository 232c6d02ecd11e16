"""Host checks with pytest-testinfra: what a lab host must look like, before and after.

Each check returns its problems, one line each naming the host (an empty list: the host
is as it must be), so a test asserts ``== []`` and a failure lists everything at once.

* :func:`check_provisioned`: the services are active, every socket is 0600 in a 0700
  directory, each PF has its VFs bound to the inventory's VF driver, and no link
  carries the project's ownership evidence (nothing is attached between runs).
* :func:`snapshot` and :func:`changes_since`: every PF's ``sriov_numvfs`` and VF table
  (``ip -j -d link show``), compared with an earlier snapshot: a run leaves no setting
  behind.
* :func:`check_no_trace`: after teardown, no unit, config, journal, socket, venv or
  record, no ownership evidence, and every PF as its snapshot before provisioning.
* :func:`footprint` and :func:`footprint_changes`: what the lab has put on a host (its
  files, the services' processes), compared with an earlier footprint: an attempt that
  failed before any change left the host exactly as it was, provisioned or not.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import testinfra

from plugins.sdk.runner import scope_evidence

from ._inventory import LabHost
from ._role import role_defaults

__all__ = [
    "Footprint",
    "HostState",
    "PfState",
    "changes_since",
    "check_no_trace",
    "check_provisioned",
    "connect",
    "footprint",
    "footprint_changes",
    "ownership_evidence",
    "snapshot",
]

# What provisioning installs (the role's defaults).
_ROLE = role_defaults()
SERVICES = {s["name"]: tuple(s["sockets"]) for s in _ROLE["dranp_services"]}
UNIT = str(_ROLE["dranp_unit"]).replace("@.", "@{}.")  # dra-networkplugin@{}.service
RUN_ROOT = str(_ROLE["dranp_run_root"])
TRACES = (
    f"{_ROLE['dranp_unit_dir']}/{_ROLE['dranp_unit']}",
    str(_ROLE["dranp_config_dir"]),
    str(_ROLE["dranp_prefix"]),
    str(_ROLE["dranp_state_root"]),
    RUN_ROOT,
    str(Path(_ROLE["dranp_record"]).parent),
)
# Every marker (ownership evidence, an ifalias) starts with what any scope's does: "dranp:".
MARKER_PREFIX = scope_evidence("", "").partition(":")[0] + ":"
# A link the effects create is born under "np" + 13 hex digits (plugins/effects/linux).
TEMP_NAME = re.compile(r"^np[0-9a-f]{13}$")


def connect(host: LabHost) -> Any:
    """A testinfra host over SSH, with the inventory's address, user, key and SSH options."""
    return testinfra.get_host(
        f"ssh://{host.user}@{host.address}:{host.port}",
        ssh_identity_file=str(host.key_file),
        ssh_extra_args=host.ssh_args or None,
        sudo=host.user != "root",
    )


@dataclass(frozen=True)
class PfState:
    pci: str
    numvfs: int
    vfs: tuple[dict[str, Any], ...]  # the PF's vfinfo_list, as ip -j -d shows it


@dataclass(frozen=True)
class HostState:
    host: str
    pfs: tuple[PfState, ...]


def _json(remote: Any, command: str) -> Any:
    return json.loads(remote.check_output(command) or "null")


def snapshot(host: LabHost, remote: Any) -> HostState:
    pfs = []
    for pf in host.pfs:
        device = f"/sys/bus/pci/devices/{pf.pci}"
        numvfs = int(remote.file(f"{device}/sriov_numvfs").content_string.strip())
        netdev = remote.check_output(f"ls {shlex.quote(device)}/net").split()[0]
        (link,) = _json(remote, f"ip -j -d link show dev {shlex.quote(netdev)}")
        pfs.append(PfState(pf.pci, numvfs, tuple(link.get("vfinfo_list", []))))
    return HostState(host.name, tuple(pfs))


NO_MAC = "00:00:00:00:00:00"


def _learned(key: str, was: Any, now: Any) -> bool:
    """igb lists a VF's own address once the VF driver tells the PF (at a VF reset with
    the PF up, whenever the driver gets to it): the NIC's doing, neither a provisioning's
    nor a plugin's, so it is no change of the host's (``AgentLab.changes_since``)."""
    return key == "address" and NO_MAC in (was, now)


def changes_since(before: HostState, after: HostState) -> list[str]:
    problems = []
    for old, new in zip(before.pfs, after.pfs, strict=True):
        if old.numvfs != new.numvfs:
            problems.append(
                f"{after.host}: PF {new.pci}: sriov_numvfs {new.numvfs}, was {old.numvfs}"
            )
            continue
        for was, now in zip(old.vfs, new.vfs, strict=True):
            changed = sorted(
                k
                for k in was.keys() | now.keys()
                if was.get(k) != now.get(k) and not _learned(k, was.get(k), now.get(k))
            )
            for key in changed:
                problems.append(
                    f"{after.host}: PF {new.pci} VF {was.get('vf')}: {key} is "
                    f"{now.get(key)!r}, was {was.get(key)!r}"
                )
    return problems


def ownership_evidence(host: LabHost, remote: Any) -> list[str]:
    """Links anywhere on the host carrying the project's marker or temporary name."""
    namespaces = [None, *remote.check_output("ip netns list | cut -d' ' -f1").split()]
    problems = []
    for ns in namespaces:
        where = f"netns {ns}" if ns else "the host netns"
        prefix = f"ip -n {shlex.quote(ns)} " if ns else "ip "
        for link in _json(remote, prefix + "-j link show") or []:
            alias = link.get("ifalias", "")
            if alias.startswith(MARKER_PREFIX) or TEMP_NAME.match(link.get("ifname", "")):
                problems.append(
                    f"{host.name}: {where}: link {link['ifname']} is ours (alias {alias!r})"
                )
    return problems


def _service_problems(host: LabHost, remote: Any) -> list[str]:
    problems = []
    for service, sockets in SERVICES.items():
        unit = UNIT.format(service)
        if not remote.service(unit).is_running:
            problems.append(f"{host.name}: {unit} is not active")
        directory = remote.file(f"{RUN_ROOT}/{service}")
        if not directory.is_directory or directory.mode != 0o700 or directory.user != "root":
            problems.append(f"{host.name}: {directory.path} is not a root-owned 0700 directory")
        for name in sockets:
            socket = remote.file(f"{directory.path}/{name}")
            if not socket.is_socket or socket.mode != 0o600:
                problems.append(f"{host.name}: {socket.path} is not a 0600 socket")
    return problems


def _vf_problems(host: LabHost, remote: Any) -> list[str]:
    problems = []
    for pf in host.pfs:
        device = f"/sys/bus/pci/devices/{pf.pci}"
        numvfs = int(remote.file(f"{device}/sriov_numvfs").content_string.strip())
        if numvfs != pf.vfs:
            problems.append(f"{host.name}: PF {pf.pci}: sriov_numvfs {numvfs}, not {pf.vfs}")
            continue
        for i in range(pf.vfs):
            driver = remote.file(f"{device}/virtfn{i}/driver")
            bound = driver.linked_to.rsplit("/", 1)[-1] if driver.exists else "no driver"
            if bound != pf.vf_driver:
                problems.append(
                    f"{host.name}: PF {pf.pci} VF {i}: bound to {bound}, not {pf.vf_driver}"
                )
    return problems


def check_provisioned(host: LabHost, remote: Any) -> list[str]:
    return (
        _service_problems(host, remote)
        + _vf_problems(host, remote)
        + ownership_evidence(host, remote)
    )


def check_no_trace(host: LabHost, remote: Any, before: HostState) -> list[str]:
    """After teardown: nothing of the lab left, every PF as in ``before`` (pre-provisioning)."""
    problems = [
        f"{host.name}: {path} is still there" for path in TRACES if remote.file(path).exists
    ]
    units = remote.check_output(
        "systemctl list-units --all --plain --no-legend 'dra-networkplugin@*'"
    )
    problems += [
        f"{host.name}: systemd still lists {line.split()[0]}"
        for line in units.splitlines()
        if line.strip()
    ]
    return (
        problems + ownership_evidence(host, remote) + changes_since(before, snapshot(host, remote))
    )


@dataclass(frozen=True)
class Footprint:
    host: str
    entries: dict[str, str]  # a path the lab owns, or a service's unit -> what it is now


def footprint(host: LabHost, remote: Any) -> Footprint:
    """Every path the lab owns and what lies two levels below it (type, mode, size,
    mtime), and each service's main PID, start time and restart count: a write, a
    removal, a reinstall (the venv is made anew) or a restart shows. An absent path is
    simply not listed, so a fresh host's footprint is its services' zeros."""
    paths = " ".join(shlex.quote(path) for path in TRACES)
    # find complains of each absent path and exits 1: what it lists is the answer.
    listed = remote.run(f"find {paths} -maxdepth 2 -printf '%p %y %m %s %T@\\n'").stdout
    entries = {}
    for line in listed.splitlines():
        path, _, what = line.partition(" ")
        entries[path] = what
    for service in SERVICES:
        unit = UNIT.format(service)
        shown = remote.check_output(
            f"systemctl show --value -p MainPID -p ActiveEnterTimestampMonotonic "
            f"-p NRestarts {unit}"
        )
        entries[unit] = " ".join(shown.split())
    return Footprint(host.name, entries)


def footprint_changes(before: Footprint, after: Footprint) -> list[str]:
    problems = []
    for key in sorted(before.entries.keys() | after.entries.keys()):
        was, now = before.entries.get(key, "absent"), after.entries.get(key, "absent")
        if was != now:
            problems.append(f"{after.host}: {key}: {now}, was {was}")
    return problems
