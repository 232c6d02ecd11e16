"""Labs chosen by URL, like pytest-testinfra's backends: parse once, build lazily.

- ``fake://``: the fake kernel (in-process for crash enumeration; a server process with
  real service processes for the SIGKILL and end-to-end runs). Runs anywhere.
- ``netns://``: the running kernel in network namespaces (root; veth, macvlan here).
- ``vm://``: a QEMU guest booting Debian's kernel (bonding, 8021q, ipvlan, dummy, igb).
- ``sriov://INVENTORY``: Ansible-provisioned NIC hosts described by an inventory file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import labs.netns

TIERS = ("fake", "netns", "vm", "sriov")


class LabURLError(ValueError):
    pass


@dataclass(frozen=True)
class LabSpec:
    tier: str
    target: str  # inventory path for sriov://, empty otherwise

    def missing(self) -> str | None:
        """Why this lab cannot run on this machine, in one line; None if it can."""
        if self.tier == "fake":
            return None
        if self.tier == "netns":
            return labs.netns.missing()
        if self.tier == "vm":
            return "the QEMU VM lab (Debian kernel, emulated igb SR-IOV NIC) is not built yet"
        if not Path(self.target).is_file():
            return f"inventory {self.target!r} does not exist"
        return "provisioning SR-IOV hosts with ansible-runner is not built yet"


def parse_lab_url(url: str) -> LabSpec:
    parts = urlsplit(url)
    if parts.scheme not in TIERS:
        raise LabURLError(
            f"lab URL {url!r}: unknown scheme; expected one of {', '.join(t + '://' for t in TIERS)}"
        )
    target = (parts.netloc + parts.path) if parts.scheme == "sriov" else ""
    if parts.scheme == "sriov" and not target:
        raise LabURLError(
            f"lab URL {url!r}: sriov:// needs an inventory path, e.g. sriov://inventories/lab.yml"
        )
    if parts.scheme != "sriov" and (parts.netloc or parts.path not in ("", "/")):
        raise LabURLError(f"lab URL {url!r}: {parts.scheme}:// takes no path")
    return LabSpec(parts.scheme, target)
