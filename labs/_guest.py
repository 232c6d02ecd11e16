"""What only the VM lab's guest can tell: its kernel release and its PFs' SR-IOV.

The kernel agent (``labs.kernel_agent``) answers these beside the ``Kernel`` protocol;
``VmKernel`` is the host's side. Kept apart from the agent's transport so
the guest-only surface can grow (sysfs knobs the ``Kernel`` protocol does not model)
without touching the wire.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from fakekernel.client import FakeKernelClient
from plugins.kernel import kernel_error

__all__ = ["GUEST_METHODS", "GUEST_PARAMS", "GuestSide", "VmKernel"]

# The guest-only methods and their parameters' types (all plain JSON scalars).
GUEST_PARAMS: dict[str, dict[str, type]] = {
    "release": {},
    "sriov": {"pf": str},
    "set_sriov_numvfs": {"pf": str, "count": int},
}
# How long the VFs' netdevs may take to appear after sriov_numvfs is written (TCG).
VF_NETDEV_DEADLINE_S = 60.0
SYSFS_NET = Path("/sys/class/net")
GUEST_METHODS = tuple(GUEST_PARAMS)


class GuestSide:
    """What the agent answers from the guest itself: its release and its PFs' SR-IOV."""

    def __init__(self, node_pin: str) -> None:
        self.node_pin = node_pin

    def release(self) -> str:
        return os.uname().release

    def sriov(self, pf: str) -> dict[str, int]:
        device = self._device(pf)
        return {
            "totalvfs": int((device / "sriov_totalvfs").read_text()),
            "numvfs": int((device / "sriov_numvfs").read_text()),
        }

    def set_sriov_numvfs(self, pf: str, count: int) -> list[str]:
        """Write ``count`` to the PF's ``sriov_numvfs`` (through 0, as the kernel asks
        when VFs exist) and return the VFs' netdev names once all of them exist."""
        from .netns import _link_events

        device = self._device(pf)
        numvfs = device / "sriov_numvfs"
        with _link_events(self.node_pin) as events:
            if int(numvfs.read_text()) not in (0, count):
                numvfs.write_text("0")
            if int(numvfs.read_text()) != count:
                numvfs.write_text(str(count))
            deadline = time.monotonic() + VF_NETDEV_DEADLINE_S
            while (names := _vf_netdevs(device, count)) is None:
                if not events.wait(deadline - time.monotonic()):
                    raise kernel_error(
                        errno.ETIMEDOUT,
                        f"{pf}: {count} VF netdevs not there {VF_NETDEV_DEADLINE_S:g} s after "
                        "sriov_numvfs was written",
                    )
            return names

    @staticmethod
    def _device(pf: str) -> Path:
        device = SYSFS_NET / pf / "device"
        if "/" in pf or not (device / "sriov_totalvfs").exists():
            raise kernel_error(errno.ENODEV, f"{pf!r} is not an SR-IOV PF in this guest")
        return device


def _vf_netdevs(device: Path, count: int) -> list[str] | None:
    """The netdev names of VFs 0..count-1 of the PF ``device``; None while one is missing
    (the VF's driver has not bound yet, or udev has not renamed it yet: names still
    ``eth*`` are not final)."""
    names = []
    for index in range(count):
        net = device / f"virtfn{index}" / "net"
        found = sorted(net.iterdir()) if net.is_dir() else []
        if not found or found[0].name.startswith("eth"):
            return None
        names.append(found[0].name)
    return names


class VmKernel(FakeKernelClient):
    """The guest's kernel through the agent: the ``Kernel`` protocol and the lab's
    named namespaces and snapshot (as ``FakeKernelClient`` speaks them), plus what only
    the guest can tell."""

    def release(self) -> str:
        """The guest kernel's ``uname -r``."""
        return str(self._call("release"))

    def sriov(self, pf: str) -> dict[str, int]:
        """``{"totalvfs": n, "numvfs": n}`` of a PF netdev of the guest."""
        answer: dict[str, int] = self._call("sriov", pf=pf)
        return answer

    def set_sriov_numvfs(self, pf: str, count: int) -> list[str]:
        """Give the PF ``count`` VFs; returns their netdev names once all exist."""
        return [str(name) for name in self._call("set_sriov_numvfs", pf=pf, count=count)]
