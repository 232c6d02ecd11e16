"""The one kernel interface shared by every lab tier."""

from typing import TYPE_CHECKING

# Linux's naming facts live in the SDK, the bottom layer (it validates names in requests);
# the kernel layer re-exports them (``check_interface_name``: the kernel's own rule).
from plugins.sdk import IFNAMSIZ, PCI_ADDRESS, first_use_exports
from plugins.sdk import kernel_name_problem as check_interface_name

from ._forwarding import ForwardingKernel
from ._methods import KernelMethods
from ._protocol import KERNEL_CALLS, Kernel
from ._seam import PROTOCOL_VERSION, KernelCall, calls_of, mutates, reads
from ._snapshot import ReadSharingKernel
from ._types import (
    FAIL_OVER_MAC,
    IPVLAN_FLAGS,
    BondInfo,
    KernelError,
    Link,
    LinkChanges,
    LinkKind,
    LinkOptions,
    LinkSpec,
    NsRef,
    VFChanges,
    VFConfig,
    kernel_error,
)
from ._url import open_kernel

if TYPE_CHECKING:
    from ._crashing import CrashingKernel

__all__ = [
    "FAIL_OVER_MAC",
    "IFNAMSIZ",
    "IPVLAN_FLAGS",
    "KERNEL_CALLS",
    "PCI_ADDRESS",
    "PROTOCOL_VERSION",
    "BondInfo",
    "CrashingKernel",
    "ForwardingKernel",
    "Kernel",
    "KernelCall",
    "KernelError",
    "KernelMethods",
    "Link",
    "LinkChanges",
    "LinkKind",
    "LinkOptions",
    "LinkSpec",
    "NsRef",
    "ReadSharingKernel",
    "VFChanges",
    "VFConfig",
    "calls_of",
    "check_interface_name",
    "kernel_error",
    "mutates",
    "open_kernel",
    "reads",
]

# Hidden from mypy, which would otherwise accept any name imported from here: the
# TYPE_CHECKING import types CrashingKernel. It is imported on first use because it
# needs the runner (its crash points), which the fake kernel server, a kernel-only
# program, never does: ~0.1 s of CPU at each of its starts.
if not TYPE_CHECKING:
    __getattr__, __dir__ = first_use_exports(
        __name__, {"CrashingKernel": "_crashing"}, globals(), __all__
    )
