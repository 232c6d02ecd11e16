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
    "and never reuses one (as the 6.18 host does).",
)
KNOWN_DIVERGENCES: dict[tuple[str, str], Known] = {
    ("6.1", "open_namespace_estale_and_enoent"): NS_INODE_REUSE,
    ("6.12", "open_namespace_estale_and_enoent"): NS_INODE_REUSE,
}
