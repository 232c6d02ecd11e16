"""Labs chosen by URL, like pytest-testinfra's backends: parse once, build lazily.

- ``fake://``: the fake kernel (in-process for crash enumeration; a server process with
  real service processes for the SIGKILL and end-to-end runs). Runs anywhere.
- ``netns://``: the running kernel in network namespaces (root; veth, macvlan here).
- ``vm://``: a QEMU guest booting Debian's kernel (bonding, 8021q, ipvlan, dummy, igb);
  Debian 12's 6.1 by default, ``vm://?kernel=6.12`` for the other (``labs.vm.KERNELS``).
- ``sriov://INVENTORY``: Ansible-provisioned NIC hosts described by an inventory file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import labs.netns
import labs.vm

TIERS = ("fake", "netns", "vm", "sriov")


class LabURLError(ValueError):
    pass


@dataclass(frozen=True)
class LabSpec:
    tier: str
    target: str  # inventory path for sriov://, empty otherwise
    kernel: str = ""  # vm://: the guest kernel, a key of labs.vm.KERNELS; empty otherwise

    def missing(self) -> str | None:
        """Why this lab cannot run on this machine, in one line; None if it can."""
        if self.tier == "fake":
            return None
        if self.tier == "netns":
            return labs.netns.missing()
        if self.tier == "vm":
            return labs.vm.missing(self.kernel)
        return _sriov_missing(Path(self.target))


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
    if parts.scheme == "vm":
        return LabSpec("vm", "", _vm_kernel(url, parts.query))
    if parts.query:
        raise LabURLError(f"lab URL {url!r}: {parts.scheme}:// takes no options")
    return LabSpec(parts.scheme, target)


def _vm_kernel(url: str, query: str) -> str:
    """The kernel a ``vm://`` URL asks for: its one option, ``kernel`` (default 6.1)."""
    valid = ", ".join(labs.vm.KERNELS)
    try:
        options = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise LabURLError(f"lab URL {url!r}: options are key=value; vm:// takes kernel") from None
    unknown = sorted(set(options) - {"kernel"})
    if unknown:
        raise LabURLError(
            f"lab URL {url!r}: unknown option {', '.join(unknown)}; vm:// takes kernel={{{valid}}}"
        )
    kernels = options.get("kernel", [labs.vm.DEFAULT_KERNEL])
    if len(kernels) != 1 or kernels[0] not in labs.vm.KERNELS:
        raise LabURLError(
            f"lab URL {url!r}: unknown kernel {'/'.join(kernels)!r}; valid kernels: {valid}"
        )
    return kernels[0]


def lab_slug(url: str) -> str:
    """A lab URL as a name for files and report keys: ``vm://?kernel=6.12`` -> ``vm-6.12``."""
    slug = url.replace("://?kernel=", "-").replace("://", "-")
    return re.sub(r"[^A-Za-z0-9._-]", "_", slug).rstrip("-_")


def summary_path(reports: Path, url: str) -> Path:
    """Where the rig writes the summary of a run on the lab ``url``."""
    return reports / f"summary-{lab_slug(url)}.json"


def _sriov_missing(inventory: Path) -> str | None:
    """Why the SR-IOV lab of ``inventory`` cannot run here (its hosts' reachability is
    for provisioning to tell, one line per host)."""
    import shutil

    from labs.emulated_host import missing as emulated_missing
    from labs.sriov import InventoryError, load_inventory

    if not inventory.is_file():
        return f"inventory {str(inventory)!r} does not exist"
    try:
        hosts = load_inventory(inventory).hosts
    except InventoryError as exc:
        return str(exc)
    if shutil.which("ssh") is None:
        return "the SR-IOV lab needs an SSH client (ssh); install with scripts/install-sriov-lab"
    if any(host.emulated for host in hosts):
        return emulated_missing()
    return None
