"""The SR-IOV lab of one run: every host of an inventory ready, and left as it was found.

``SriovLab(path)`` boots the inventory's emulated hosts (``sriov_emulated: true``: a
QEMU guest of ``labs.emulated_host`` on a free port of 127.0.0.1), records every host's
state (testinfra), provisions them all with ansible-runner (in parallel: Ansible's
forks), checks them (services active, sockets 0600 in 0700 directories, VFs bound, no
ownership evidence), then reaches each host's real kernel through the kernel agent the
provisioning installed, over SSH (``host_lab(name)``: a ``labs.HostLab``, on which the
NIC labs' suites run as on the VM lab's guest). ``close()`` hangs up, checks that the
run left no ownership evidence, tears every host down and checks that no trace is left;
what it finds is raised, one line per problem, so a run that leaves a trace fails.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection
from pathlib import Path
from typing import Any

from ..emulated_host import EmulatedHost
from ..host import HostLab
from ..remote_services import RemoteHost
from ._artifacts import CACHE_DIR, Distribution
from ._checks import check_no_trace, check_provisioned, connect, ownership_evidence, snapshot
from ._inventory import CAPABILITIES, Inventory, LabHost, PeerPort, load_inventory
from ._provision import ProvisionResult, distributions, provision, teardown
from ._role import role_defaults

__all__ = [
    "SriovLab",
    "SriovLabUnavailable",
    "agent_command",
    "lacking",
    "remote_host",
    "ssh_command",
    "traffic_peer",
]


# Where provisioning puts the project's venv on a host.
VENV = str(role_defaults()["dranp_venv"])


class SriovLabUnavailable(RuntimeError):
    """The SR-IOV lab could not be made ready (one line per host and cause)."""


def agent_command(host: LabHost) -> list[str]:
    """The ssh argv that runs the kernel agent on ``host`` over its stdin and stdout."""
    remote = [f"{VENV}/bin/python", "-m", "labs.kernel_agent", "--stdio"]
    if host.user != "root":
        remote = ["sudo", "-n", *remote]
    return [*ssh_command(host), shlex.join(remote)]


def remote_host(host: LabHost) -> RemoteHost:
    """How the rig runs services on ``host``: over SSH, from the venv provisioning made
    (the product and the test kit), as root."""
    sudo = ("sudo", "-n") if host.user != "root" else ()
    return RemoteHost(host.name, tuple(ssh_command(host)), f"{VENV}/bin/python", sudo)


def ssh_command(host: LabHost) -> list[str]:
    """The ssh argv logging in to ``host``, the remote command line to be appended."""
    return [
        "ssh",
        "-i",
        str(host.key_file),
        "-p",
        str(host.port),
        "-o",
        "BatchMode=yes",
        "-o",
        "LogLevel=ERROR",
        *shlex.split(host.ssh_args),
        f"{host.user}@{host.address}",
    ]


def lacking(host: LabHost) -> dict[str, str]:
    """Each capability some PF of ``host`` does not promise -> why (its inventory entry)."""
    missing: dict[str, str] = {}
    for capability in CAPABILITIES:
        for pf in host.pfs:
            if not pf.can(capability) and capability not in missing:
                missing[capability] = (
                    f"{host.name}: {pf.model} ({pf.driver}) at {pf.pci} does not list "
                    f"{capability} among its capabilities (inventory)"
                )
    return missing


def traffic_peer(host: LabHost) -> tuple[PeerPort | None, str]:
    """The one port every PF of ``host`` is cabled to (the inventory's ``peer``), which
    a bond of one VF per PF reaches whichever member is active; else None and why."""
    peers = {pf.peer for pf in host.pfs}
    if peers == {None}:
        return None, f"{host.name}: no PF names a traffic peer port (inventory: peer)"
    if len(peers) > 1:
        named = ", ".join(sorted(f"{pf.pci} -> {pf.peer}" for pf in host.pfs))
        return None, (
            f"{host.name}: a bond of one VF per PF needs one peer port that every PF "
            f"reaches; the inventory names {named}"
        )
    (peer,) = peers
    return peer, ""


class SriovLab:
    """The hosts of the inventory at ``path``, provisioned for a run (see the module)."""

    def __init__(
        self,
        path: Path,
        *,
        hosts: Collection[str] | None = None,
        start_seed: int | None = None,
        cache: Path = CACHE_DIR,
    ) -> None:
        """``hosts``: only these of the inventory (a group: ``Inventory.groups``)."""
        self.inventory: Inventory = load_inventory(path)
        if hosts is not None:
            self.inventory = self.inventory.only(hosts)
        self.emulated: dict[str, EmulatedHost] = {}
        self.host_labs: dict[str, HostLab] = {}
        self.remote: dict[str, Any] = {}
        self.before: dict[str, Any] = {}
        self.provisioned: dict[str, Any] = {}
        self.provisioning: ProvisionResult | None = None
        self.builds: dict[str, Distribution] = {}
        self.testbeds: dict[str, dict[str, Any]] = {}
        try:
            for host in self.inventory:
                if host.emulated:
                    booted = EmulatedHost()
                    self.emulated[host.name] = booted
                    self.inventory = self.inventory.reached_at(
                        host.name, "127.0.0.1", booted.ssh_port
                    )
            self.remote = {h.name: connect(h) for h in self.inventory}
            self.before = {h.name: snapshot(h, self.remote[h.name]) for h in self.inventory}
            # One build for the run: a second provisioning of it must change nothing.
            self.builds = distributions(self.inventory, cache)
            self.provisioning = provision(self.inventory, builds=self.builds)
            self.provisioning.check()
            problems = [
                p for h in self.inventory for p in check_provisioned(h, self.remote[h.name])
            ]
            if problems:
                raise SriovLabUnavailable("; ".join(problems))
            # As provisioned: what the run's own checks compare against.
            self.provisioned = {h.name: snapshot(h, self.remote[h.name]) for h in self.inventory}
            for host in self.inventory:
                self.testbeds[host.name] = self._testbed(host)
                self.host_labs[host.name] = HostLab(
                    host.name,
                    agent_command(host),
                    [pf["netdev"] for pf in self.testbeds[host.name]["pfs"]],
                    lacking=lacking(host),
                    start_seed=start_seed,
                    remote=remote_host(host),
                )
            for host in self.inventory:
                peer, why = traffic_peer(host)
                lab = self.host_labs[host.name]
                if peer is None:
                    lab.no_peer = why
                else:
                    lab.peer = (self.host_labs[peer.host], peer.netdev)
        except BaseException:
            self.close(check=False)
            raise

    def host_lab(self, name: str) -> HostLab:
        try:
            return self.host_labs[name]
        except KeyError:
            raise KeyError(f"{self.inventory.path} has no host {name!r}") from None

    def _netdev(self, host: LabHost, pci: str, netdev: str | None) -> str:
        """The PF's netdev: the inventory's, else what the host names the PCI function."""
        if netdev:
            return netdev
        found = self.remote[host.name].check_output(f"ls /sys/bus/pci/devices/{pci}/net").split()
        if not found:
            raise SriovLabUnavailable(f"{host.name}: PF {pci} has no netdev")
        return str(found[0])

    def _testbed(self, host: LabHost) -> dict[str, Any]:
        """What the report says of the host: its kernel, and per PF the NIC model, the
        driver's and firmware's versions and the PCI address (``ethtool -i``)."""
        remote = self.remote[host.name]
        pfs = []
        for pf in host.pfs:
            netdev = self._netdev(host, pf.pci, pf.netdev)
            info = dict(
                line.split(": ", 1)
                for line in remote.check_output(f"ethtool -i {shlex.quote(netdev)}").splitlines()
                if ": " in line
            )
            pfs.append(
                {
                    "pci": pf.pci,
                    "netdev": netdev,
                    "model": pf.model,
                    "driver": info.get("driver", pf.driver),
                    "driver_version": info.get("version", ""),
                    "firmware": info.get("firmware-version", ""),
                    "vfs": pf.vfs,
                }
            )
        return {
            "kernel": remote.check_output("uname -r").strip(),
            "emulated": host.emulated,
            "pfs": pfs,
        }

    def close(self, *, check: bool = True) -> None:
        """Hang up, check the run left no evidence, tear every host down, check no trace
        is left, power the emulated hosts off; raises ``AssertionError`` listing every
        problem found (when ``check``). Idempotent."""
        problems: list[str] = []
        try:
            for name, lab in self.host_labs.items():
                # One host's agent failing to hang up cleanly must not keep the others
                # (or the teardown, or the emulated hosts' power-off) from happening.
                try:
                    lab.close()
                except Exception as exc:
                    problems.append(f"{name}: closing its kernel agent: {exc}")
            self.host_labs = {}
            if self.provisioning is not None:
                if check:
                    for host in self.inventory:
                        problems += ownership_evidence(host, self.remote[host.name])
                torn = teardown(self.inventory)
                problems += list(torn.failures)
                self.provisioning = None
                if check:
                    for host in self.inventory:
                        before = self.before[host.name]
                        problems += check_no_trace(host, self.remote[host.name], before)
        finally:
            for booted in self.emulated.values():
                booted.close()
            self.emulated = {}
        if problems:
            raise AssertionError(
                "the SR-IOV lab was not left as it was found:\n" + "\n".join(problems)
            )

    def __enter__(self) -> SriovLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
