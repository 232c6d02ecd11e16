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
VF_CARRIER_612 = Known(
    OUTCOME,
    "6.12's igb answers a VF made while its PF is up at once (modelled: "
    "NicProfile.vf_probe_answered, on for 6.12), so the model gives the VF carrier as "
    "soon as it is up and a bond takes it as its active slave; in the guest the first "
    "VF had no carrier within the scenario's 2 s wait for a failover (the bond had no "
    "active slave, or took the second VF). igbvf learns its link from its watchdog, in "
    "its own time; seen once on 6.12 with the model per release, not yet measured "
    "further.",
    may_agree=True,
)
KNOWN_DIVERGENCES: dict[tuple[str, str], Known] = {
    ("6.12", "sriov_vf_enslaved_into_an_up_bond"): VF_CARRIER_612,
    ("6.12", "sriov_vf_enslaved_into_a_down_bond_with_its_pf_up"): VF_CARRIER_612,
    ("6.12", "loopback_under_vlan_ipvlan_and_bond"): LO_BOND_SLAVE_612,
    ("6.12", "generated_612_lo_into_an_empty_bond"): LO_BOND_SLAVE_612,
    ("6.1", "open_namespace_estale_and_enoent"): NS_INODE_REUSE,
    ("6.12", "open_namespace_estale_and_enoent"): NS_INODE_REUSE,
}
