"""The one kernel interface shared by every lab tier."""

from ._crashing import CrashingKernel
from ._protocol import Kernel
from ._types import (
    IFNAMSIZ,
    PCI_ADDRESS,
    BondInfo,
    KernelError,
    Link,
    LinkChanges,
    LinkKind,
    LinkSpec,
    NsRef,
    VFChanges,
    VFConfig,
    check_interface_name,
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
    "VFChanges",
    "VFConfig",
    "check_interface_name",
    "kernel_error",
    "open_kernel",
]
