"""The one kernel interface shared by every lab tier."""

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

__all__ = [
    "BondInfo",
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
]
