"""The one kernel interface shared by every lab tier."""

from ._crashing import CrashingKernel
from ._protocol import Kernel
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
    "kernel_error",
    "open_kernel",
]
