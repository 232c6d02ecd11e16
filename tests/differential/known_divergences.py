"""Divergences between the fake kernel and the VM lab's real kernels that stay, each
with its reason. ``test_fake_matches_vm`` fails on a divergence not listed here, and on
a listed one that no longer diverges (fixed in the fake, or the kernel changed), so the
list says exactly what is true. docs/fake-kernel-fidelity.md explains each one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Known:
    aspects: frozenset[str]  # "outcome" (the log) and/or "state" (the observation)
    reason: str
    # True only where the kernel's own state decides whether the divergence shows (which
    # inode a free-list hands out): such a scenario may agree in one run and not in the
    # next, so agreeing does not mean the entry is stale.
    may_agree: bool = False


def kernel_series(release: str) -> str:
    """ "6.1" or "6.12" of a release like "6.12.57+deb12-amd64"."""
    match = re.match(r"(\d+\.\d+)", release)
    return match.group(1) if match else release


BOTH = frozenset({"outcome", "state"})
OUTCOME = frozenset({"outcome"})
STATE = frozenset({"state"})

# (kernel series, scenario name) -> why it diverges
NS_INODE_REUSE = Known(
    BOTH,
    "proc_alloc_inum gives a new namespace the lowest free inode number, so one made at "
    "the path of a dead one may get its inode back: the old handle (device, inode, boot) "
    "then opens the new namespace instead of ESTALE. The fake numbers namespaces upwards "
    "and never reuses one (as the 6.18 host does). Whether the inode comes back depends "
    "on which inodes the guest has freed before (seen both ways on 6.1 in CI runs).",
    may_agree=True,
)
LO_BOND_SLAVE_612 = Known(
    BOTH,
    "6.12 enslaves the loopback device into a bond (the bond takes lo's type), where 6.1 "
    "refuses it (EADDRNOTAVAIL, leaving the empty bond a max MTU of 1500); the model "
    "follows 6.1 and has no per-release switch for it: nothing but this scenario makes lo "
    "a slave.",
)
IGB_SPOOFCHK_WITHOUT_VFS = Known(
    OUTCOME,
    "igb_ndo_set_vf_spoofchk answers EOPNOTSUPP while the PF has no VFs at all, before "
    "its EINVAL for an index out of range; the model answers EINVAL for any missing VF "
    "(found by a generated run, tests/differential/regressions.py).",
)
IGB_PROBE_ANSWERED_612 = Known(
    BOTH,
    "6.12's igb answers a VF made while its PF is up at once (its probe's reset makes it "
    "clear to send and programs its address into the VF table: VLANs taken, carrier, an "
    "up bond takes it); 6.1's igb takes that back (the PF resets after enabling its VFs), "
    "so a VF waits for its first reset with the PF up. The model follows 6.1: the fake of "
    "the guest is built from vm-igb.yaml with live_rename alone. NicProfile's "
    "vf_probe_answered=True gives 6.12's behaviour (checked against a 6.12 run's "
    "recordings); wiring it needs the differential to build the fake from the release.",
)
IPVLAN_PERM_ADDRESS = Known(
    OUTCOME,
    "An ipvlan reports a permanent address, its parent's address when it was made "
    "(ipvlan_init leaves addr_assign_type NET_ADDR_PERM, so register_netdevice copies "
    "the address to perm_addr); the model reports none. The regression logs the whole "
    "state, permanent addresses included (found by a generated run).",
)
IGB_PROBE_ANSWERED_612_CARRIER = Known(
    BOTH,
    IGB_PROBE_ANSWERED_612.reason
    + " Here it shows as the VF's carrier, which igbvf's watchdog may bring within the "
    "scenario's 2 s wait or not (seen both ways on 6.12).",
    may_agree=True,
)
KNOWN_DIVERGENCES: dict[tuple[str, str], Known] = {
    ("6.12", "sriov_vf_vlan_with_its_pf_up"): IGB_PROBE_ANSWERED_612,
    ("6.12", "sriov_vf_enslaved_into_an_up_bond"): IGB_PROBE_ANSWERED_612,
    ("6.12", "sriov_vf_addresses_with_the_pf_up"): IGB_PROBE_ANSWERED_612,
    ("6.12", "sriov_vf_table_follows_the_vf_driver"): IGB_PROBE_ANSWERED_612,
    ("6.12", "sriov_vf_enslaved_into_a_down_bond_with_its_pf_up"): IGB_PROBE_ANSWERED_612_CARRIER,
    ("6.1", "generated_61_set_vf_spoofchk_without_vfs"): IGB_SPOOFCHK_WITHOUT_VFS,
    ("6.12", "generated_61_set_vf_spoofchk_without_vfs"): IGB_SPOOFCHK_WITHOUT_VFS,
    ("6.1", "generated_61_ipvlan_has_its_parents_permanent_address"): IPVLAN_PERM_ADDRESS,
    ("6.12", "generated_61_ipvlan_has_its_parents_permanent_address"): IPVLAN_PERM_ADDRESS,
    ("6.12", "loopback_under_vlan_ipvlan_and_bond"): LO_BOND_SLAVE_612,
    ("6.1", "open_namespace_estale_and_enoent"): NS_INODE_REUSE,
    ("6.12", "open_namespace_estale_and_enoent"): NS_INODE_REUSE,
}
