"""A kernel that forwards every call to another: the base of every wrapper."""

from __future__ import annotations

from typing import Any

from ._methods import KernelMethods
from ._protocol import Kernel
from ._seam import KernelCall

__all__ = ["ForwardingKernel"]


class ForwardingKernel(KernelMethods):
    """Every call of the seam passed to ``inner`` unchanged. A wrapper overrides
    ``_kernel_call`` (to act around every call, or around the mutating ones: each
    ``KernelCall`` says whether it mutates) or the one method it changes."""

    def __init__(self, inner: Kernel) -> None:
        self.inner = inner

    def _kernel_call(self, call: KernelCall, arguments: dict[str, Any]) -> Any:
        return getattr(self.inner, call.name)(**arguments)


def _is_a_kernel(k: ForwardingKernel) -> Kernel:
    return k  # mypy checks the protocol here
