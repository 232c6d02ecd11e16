"""A Kernel wrapper that names a crash point around every mutating call.

Reads pass straight through; each mutation is bracketed by
``kernel#N.<call>.before`` / ``.after`` in the current effect's crash scope, so the
rig can crash between any two kernel calls of an effect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from plugins.sdk import NamespaceHandle
from plugins.sdk.runner import CrashPoints

from ._protocol import Kernel
from ._types import Link, LinkChanges, LinkSpec, NsRef, VFChanges, VFConfig

T = TypeVar("T")


class CrashingKernel:
    def __init__(self, kernel: Kernel, crash: CrashPoints) -> None:
        self.inner = kernel
        self.crash = crash

    def _mutate(self, call: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        phase = self.crash.kernel_call(call)
        self.crash.hit(f"{phase}.before")
        result = fn(*args, **kwargs)
        self.crash.hit(f"{phase}.after")
        return result

    def boot_id(self) -> str:
        return self.inner.boot_id()

    def host_namespace(self) -> NsRef:
        return self.inner.host_namespace()

    def open_namespace(self, handle: NamespaceHandle) -> NsRef:
        return self.inner.open_namespace(handle)

    def list_namespaces(self) -> list[NsRef]:
        return self.inner.list_namespaces()

    def list_links(self, ns: NsRef) -> list[Link]:
        return self.inner.list_links(ns)

    def get_link(
        self, ns: NsRef, *, name: str | None = None, ifindex: int | None = None
    ) -> Link | None:
        return self.inner.get_link(ns, name=name, ifindex=ifindex)

    def find_device(self, pci_address: str) -> Link | None:
        return self.inner.find_device(pci_address)

    def create_link(self, ns: NsRef, spec: LinkSpec) -> Link:
        return self._mutate("create_link", self.inner.create_link, ns, spec)

    def set_link(self, ns: NsRef, ifindex: int, changes: LinkChanges) -> Link:
        return self._mutate("set_link", self.inner.set_link, ns, ifindex, changes)

    def move_link(
        self,
        ns: NsRef,
        ifindex: int,
        target: NsRef,
        *,
        new_name: str | None = None,
        alias: str | None = None,
    ) -> Link:
        return self._mutate(
            "move_link", self.inner.move_link, ns, ifindex, target, new_name=new_name, alias=alias
        )

    def delete_link(self, ns: NsRef, ifindex: int) -> None:
        self._mutate("delete_link", self.inner.delete_link, ns, ifindex)

    def get_vfs(self, ns: NsRef, pf_ifindex: int) -> list[VFConfig]:
        return self.inner.get_vfs(ns, pf_ifindex)

    def set_vf(self, ns: NsRef, pf_ifindex: int, vf_index: int, changes: VFChanges) -> None:
        self._mutate("set_vf", self.inner.set_vf, ns, pf_ifindex, vf_index, changes)


def _is_a_kernel(k: CrashingKernel) -> Kernel:
    return k
