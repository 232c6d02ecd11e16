"""The foreign object is planted on a kernel without the dummy module too.

Linux without ``dummy`` (this machine's) refuses a dummy link with EOPNOTSUPP; the
in-process suite then plants a veth pair in the pod, as the wire suite does, so
``foreign-object`` tests the plugin rather than the kernel's modules on ``netns://``.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from conformance import CHECKS
from conformance.target import example_target
from labs import FakeModelLab, Lab
from plugins.kernel import KernelError, LinkSpec, NsRef


class NoDummy:
    """A lab kernel that refuses dummy links like Linux without the module."""

    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel

    def create_link(self, ns: NsRef, spec: LinkSpec) -> Any:
        if spec.kind == "dummy":
            raise KernelError(errno.EOPNOTSUPP, "no dummy module")
        return self._kernel.create_link(ns, spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)


class NoDummyLab(FakeModelLab):
    @property
    def kernel(self) -> Any:
        return NoDummy(self.model)


def no_dummy_lab() -> Lab:
    return NoDummyLab(randomize=False)


def test_the_foreign_object_is_a_veth_where_dummy_is_missing(tmp_path: Path) -> None:
    # The example plugin's own dummy is never created here: the foreign link named like
    # it is found first, and the connect refused.
    CHECKS["foreign-object"](example_target(), tmp_path, no_dummy_lab)
