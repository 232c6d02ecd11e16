"""A ``PluginNode`` on a NIC lab's real kernel: the VM lab's guest, or an SR-IOV host.

The node is a fresh lab session of the machine (``AgentLab.session``) that lends it each
PF and its VF 0 under the example inventory's names, so a test written for the fake
node's ``enp3s0f0v0``/``enp3s0f1v0`` finds them; their PCI addresses are the machine's
own (the session's inventory). The services' runners stay in this process, over the
session's kernel, so in-process crash points fire as on the fake tier.

What the fake kernel shows in one snapshot, a NIC shows in two places: the session's
links (``AgentSession.snapshot``) and the PFs' VF tables, which the node adds as the
fake snapshot's ``pfs``, so ``diff`` compares both. A VF removed under the node
(``remove_vf``: a real ``sriov_numvfs`` write, by PCI address, since the lent PF's
netdev is not in the agent's namespace) is made again at ``close()``, and the machine
is put back and checked to end as it began.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _pytest.mark import ParameterSet

from harness.pytest_plugin import sriov_host_lab, sriov_host_params
from labs import SANDBOX, AgentLab, AgentSession
from labs.netns import PARENTS
from plugins.kernel import LinkChanges, VFChanges, VFConfig
from plugins.sdk.runner import CrashPoints

from .node import PluginNode

# A case's setup may boot the guest, or boot and provision an SR-IOV host: minutes under
# TCG, and over 10 (600 s timed out) with three emulated hosts provisioning on 2 cores.
NIC_TIMEOUT_S = 1200
# VF-table fields a PF restores through its own netlink (the VF's MAC is the VF
# netdev's to set back: through the PF it would become an administrative MAC).
TABLE_FIELDS = ("vlan", "qos", "vlan_proto", "spoofchk", "trust", "min_tx_rate", "max_tx_rate")


def node_kinds(config: pytest.Config) -> list[ParameterSet]:
    """The nodes a plugin-specific test runs on: the fake kernel, and every NIC lab as
    the kit's ``nic_lab`` fixture has them (the VM lab's guest, marked ``vm``; each host
    of a ``--lab sriov://`` inventory, marked ``sriov``; without one, a single ``sriov``
    case that skips or fails saying so). ``nic_lab`` itself has no fake case, so the
    tests take this parameter instead and resolve the machine with ``machine_of``."""
    slow = pytest.mark.timeout(NIC_TIMEOUT_S)
    kinds = [pytest.param("fake", id="fake")]
    kinds.append(pytest.param("vm", marks=[pytest.mark.vm, slow], id="vm"))
    return [*kinds, *sriov_host_params(config, slow)]


def machine_of(request: pytest.FixtureRequest, kind: str) -> AgentLab:
    """The NIC lab of ``kind`` (a ``node_kinds`` value other than fake), as ``nic_lab``."""
    tier, _, host = kind.partition("/")
    if tier == "vm":
        guest: AgentLab = request.getfixturevalue("vm_lab")
        return guest
    return sriov_host_lab(request, host)  # skips or fails when there is no inventory


@dataclass(frozen=True)
class Removal:
    """A PF whose VFs the node removed: its PCI address, its VF count before, its name
    in the machine's root namespace (udev names its VFs after it)."""

    pci: str
    numvfs: int
    stem: str


class NicNode(PluginNode):
    """The node on a session of ``machine`` lending each PF and its VF 0."""

    def __init__(self, machine: AgentLab, root: Path, crash: CrashPoints | None = None) -> None:
        self.machine = machine
        self.lend = machine.lend_vfs(1)  # before the machine is recorded: it makes VFs
        self.machine_before = machine.kernel.snapshot()
        self.tables_before = machine.vf_tables()
        self.removals: list[Removal] = []
        session = machine.session(lend=self.lend)
        print(
            f"\n{machine.tier} session {session.id}: random start state of seed "
            f"{session.start_seed} (RIG_SEED={session.start_seed} reproduces it)"
        )
        try:
            self.vf0, self.vf1 = (vf_attributes(session, f"{pf}v0") for pf in PARENTS[:2])
        except BaseException:
            session.close()
            raise
        super().__init__(session, root, crash=crash or self.crash_plan(), coordinator=False)
        self.pod = self.sandbox()
        self.pod_ns = self.kernel.namespace(SANDBOX)

    @property
    def pfs(self) -> list[str]:
        """The lent PFs' names in the session's node."""
        return [name for root, name in self.lend.items() if root in self.machine.pfs]

    def changes(self, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
        """``diff`` but VFs' permanent addresses: an igbvf VF that resets (moved while
        up, its MAC changed by a bond) takes a new one from its PF, which nothing can
        give back (``AgentLab.changes_since`` leaves it out for the same reason)."""
        return [c for c in super().changes(before, after) if ": perm_mac: " not in c]

    def require(self, *capabilities: str) -> None:
        for capability in capabilities:
            why = self.machine.lacks(capability)
            if why:
                pytest.skip(f"{self.machine.tier} tier: needs {capability}: {why}")

    def remove_vf(self, attributes: dict[str, str]) -> None:
        """A real ``sriov_numvfs`` of 0 on the VF's PF (a VF count can only be lowered
        through 0, so every VF of that PF goes); ``close()`` makes them again."""
        k = self.kernel
        pf = k.get_link(k.host_namespace(), name=attributes["pfName"])
        assert pf is not None, attributes
        assert pf.pci_address is not None, attributes
        stem = next(root for root, name in self.lend.items() if name == pf.name)
        numvfs = self.machine.kernel.pci_sriov(pf.pci_address)["numvfs"]
        self.removals.append(Removal(pf.pci_address, numvfs, stem))  # made again even if...
        self.machine.kernel.write_pci_sriov_numvfs(pf.pci_address, 0, stem)  # ...this fails
        print(f"\n{self.machine.tier}: {stem} ({pf.pci_address}) sriov_numvfs {numvfs} -> 0")

    def close(self) -> None:
        """The removed VFs made again (the session's close waits for each lent device
        to come home by PCI address), the services and the session closed, then the
        machine put back where the test left it changed, and checked."""
        if self._closed:
            return
        try:
            for removal in self.removals:
                made = self.machine.kernel.write_pci_sriov_numvfs(
                    removal.pci, removal.numvfs, removal.stem
                )
                print(
                    f"\n{removal.stem}: sriov_numvfs 0 -> {removal.numvfs}: {self._indexes(made)}"
                )
        finally:
            super().close()
        for removal in self.removals:
            self._restore_remade(removal)
        # A test that ends with a VF still prepared (or remade) leaves its settings in
        # the PF's VF table: the session gives the VF back, but the PF outlives it on the
        # machine. Where a test cleans up, its own snapshots check that the plugin undid
        # them; here the next test's machine is put back as it was.
        for pf_name, table in self.tables_before.items():
            pf = self.machine.kernel.get_link(self.machine.kernel.host_namespace(), name=pf_name)
            assert pf is not None, f"{pf_name} is not back in the machine's root namespace"
            restore_table(self.machine, pf.ifindex, table)
        # Not a test module, so pytest does not rewrite these asserts: the message says it.
        changed = self.machine.changes_since(self.machine_before)
        assert changed == [], f"the machine changed: {changed}"
        tables = table_changes(self.tables_before, self.machine.vf_tables())
        assert tables == [], f"a PF's VF table changed: {tables}"

    def _indexes(self, names: list[str]) -> dict[str, int | None]:
        """Each root netdev of ``names`` -> its ifindex (what a VF made again got)."""
        k = self.machine.kernel
        host = k.host_namespace()
        return {n: getattr(k.get_link(host, name=n), "ifindex", None) for n in names}

    def _restore_remade(self, removal: Removal) -> None:
        """Each VF of ``removal``'s PF as the machine had it: a VF made again is a new
        device, with a new ifindex, a MAC its PF drew and the PF's default VF-table
        entry. The session's close did this for the lent VF; the others are the node's
        to restore, since its removal remade them too."""
        k = self.machine.kernel
        host = k.host_namespace()
        for row in self.machine_before["links"]:
            if not row["vf_of"] or row["vf_of"][0] != removal.pci:
                continue
            now = k.find_device(row["pci_address"])
            assert now is not None, f"{row['name']} was not made again"
            assert now.ns.key == host.key, f"{row['name']} did not come home"
            if now.up:
                now = k.set_link(host, now.ifindex, LinkChanges(up=False))
            if now.name != row["name"]:
                now = k.set_link(host, now.ifindex, LinkChanges(name=row["name"]))
            if now.ifindex != row["ifindex"]:
                print(f"{now.name}: made again as ifindex {now.ifindex}, given {row['ifindex']}")
                k.renumber_link(now.name, row["ifindex"])
                renumbered = k.get_link(host, ifindex=row["ifindex"])
                assert renumbered is not None, f"{now.name} lost its way home"
                now = renumbered
            changes = LinkChanges(
                mtu=None if now.mtu == row["mtu"] else row["mtu"],
                mac=None if now.mac == row["mac"] else row["mac"],
                alias=None if now.alias == row["alias"] else (row["alias"] or ""),
            )
            if changes != LinkChanges():
                now = k.set_link(host, now.ifindex, changes)
            if row["up"]:
                k.set_link(host, now.ifindex, LinkChanges(up=True))


def restore_table(machine: AgentLab, pf_ifindex: int, table: list[VFConfig]) -> None:
    """The PF's VF-table entries back as ``table`` had them (``TABLE_FIELDS``)."""
    k = machine.kernel
    host = k.host_namespace()
    now = {vf.vf_index: vf for vf in k.get_vfs(host, pf_ifindex)}
    for vf in table:
        changed = {
            f: getattr(vf, f)
            for f in TABLE_FIELDS
            if getattr(vf, f) is not None and getattr(vf, f) != getattr(now[vf.vf_index], f)
        }
        if changed:
            k.set_vf(host, pf_ifindex, vf.vf_index, VFChanges(**changed))


def table_changes(before: dict[str, list[VFConfig]], after: dict[str, list[VFConfig]]) -> list[str]:
    """``<pf> vf <index>: <field>: <before> -> <after>`` for each VF-table difference."""
    lines = []
    for pf in sorted(before.keys() | after.keys()):
        old = {vf.vf_index: vf.to_json() for vf in before.get(pf, [])}
        new = {vf.vf_index: vf.to_json() for vf in after.get(pf, [])}
        for index in sorted(old.keys() | new.keys()):
            a, b = old.get(index, {}), new.get(index, {})
            lines += [
                f"{pf} vf {index}: {f}: {a.get(f)!r} -> {b.get(f)!r}"
                for f in sorted(a.keys() | b.keys())
                if a.get(f) != b.get(f)
            ]
    return lines


def vf_attributes(session: AgentSession, name: str) -> dict[str, str]:
    """The allocation attributes of the session's VF ``name`` (its PF's name in the
    node, its index, its real PCI address), as the fake node's ``VF0``."""
    inventory = session.inventory()
    device = inventory.device(name) if inventory is not None else None
    assert device is not None, f"{name} is not in the session's inventory"
    return {key: str(device.networking[key]) for key in ("pfName", "vfIndex", "pciAddress")}
