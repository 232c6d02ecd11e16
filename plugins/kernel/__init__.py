"""The one kernel interface shared by every lab tier."""

# Linux's naming facts live in the SDK, the bottom layer (it validates names in requests);
# the kernel layer re-exports them (``check_interface_name``: the kernel's own rule).
from plugins.sdk import IFNAMSIZ, PCI_ADDRESS
from plugins.sdk import kernel_name_problem as check_interface_name

from ._crashing import CrashingKernel
from ._protocol import Kernel
from ._snapshot import ReadSharingKernel
from ._types import (
    BondInfo,
    KernelError,
    Link,
    LinkChanges,
    LinkKind,
    LinkSpec,
    NsRef,
    VFChanges,
    VFConfig,
    kernel_error,
)
from ._url import open_kernel

__all__ = [
    "IFNAMSIZ",
    "PCI_ADDRESS",
    "BondInfo",
    "CrashingKernel",
    "Kernel",
    "KernelError",
    "Link",
    "LinkChanges",
    "LinkKind",
    "LinkSpec",
    "NsRef",
    "ReadSharingKernel",
    "VFChanges",
    "VFConfig",
    "check_interface_name",
    "kernel_error",
    "open_kernel",
]
