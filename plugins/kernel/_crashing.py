"""A Kernel wrapper that names a crash point around every mutating call.

Reads pass straight through; each mutation (a call the seam declares ``@mutates``) is
bracketed by ``kernel#N.<call>.before`` / ``.after`` in the current effect's crash
scope, so the rig can crash between any two kernel calls of an effect.
"""

from __future__ import annotations

from typing import Any

from plugins.sdk.runner import CrashPoints

from ._forwarding import ForwardingKernel
from ._protocol import Kernel
from ._seam import KernelCall


class CrashingKernel(ForwardingKernel):
    def __init__(self, kernel: Kernel, crash: CrashPoints) -> None:
        super().__init__(kernel)
        self.crash = crash

    def _kernel_call(self, call: KernelCall, arguments: dict[str, Any]) -> Any:
        if not call.mutating:
            return super()._kernel_call(call, arguments)
        before, after = self.crash.kernel_phases(call.name)
        self.crash.hit(before)
        result = super()._kernel_call(call, arguments)
        self.crash.hit(after)
        return result
