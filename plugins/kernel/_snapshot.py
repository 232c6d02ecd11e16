"""A Kernel whose reads can be shared for a while: one dump per namespace at recovery.

``ReadSharingKernel(kernel)`` passes every call straight through, except on a thread
inside ``with k.shared_reads():``. There, each read (``open_namespace``,
``list_links``, ``get_link``, ``find_device``, ``get_vfs``, ``host_namespace``,
``list_namespaces``) asks the kernel once per distinct argument and answers the same
question again from that first answer. Recovery probes every uncertain effect, and
the probes of one namespace all open it and dump its links: with 1,000 operations in
flight that was 2,000 round trips where one dump per namespace says the same.

Why sharing is sound there: recovery only observes (it never mutates the kernel, and
the service admits no call until it is done), so nothing of ours changes between the
first read and the last. A change by someone else in between is one the probe could
as well have missed by reading a moment earlier; a probe's answer is an observation
at one instant, recorded as a note, never acted on by recovery itself.

A create hook (NodePrepare, ConnectNetwork: ``Runner._create``) runs in a block too,
for a narrower reason: between a mutation of ours and the next, an effect's apply asks
again what its capture just read, with nothing but our own journal commit in between;
that second answer is the same observation a moment later. Every mutation forgets
everything first, so what follows a change of ours reads the kernel again.

Outside a ``shared_reads()`` block (removals, inspection) nothing is remembered. A
mutation inside one forgets everything first and passes through.
Errors are not remembered: a read that failed is asked again. Only the thread that
opened the block shares; other threads (a GetInfo, the health service) never see it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar, cast

from plugins.sdk import NamespaceHandle

from ._protocol import Kernel
from ._types import Link, LinkChanges, LinkSpec, NsRef, VFChanges, VFConfig

T = TypeVar("T")


class ReadSharingKernel:
    """``kernel``'s calls, with reads shared inside ``shared_reads()`` (module docstring)."""

    def __init__(self, kernel: Kernel) -> None:
        self.inner = kernel
        self._local = threading.local()

    @contextlib.contextmanager
    def shared_reads(self) -> Iterator[None]:
        """On this thread, until the block ends: each distinct read asks the kernel once."""
        outer = getattr(self._local, "answers", None)
        if outer is not None:  # nested: the outer block's answers stay in use
            yield
            return
        self._local.answers = {}
        try:
            yield
        finally:
            self._local.answers = None

    def _read(self, key: Hashable, fn: Callable[[], T]) -> T:
        answers: dict[Hashable, Any] | None = getattr(self._local, "answers", None)
        if answers is None:
            return fn()
        if key in answers:
            return cast(T, answers[key])
        answer = answers[key] = fn()
        return answer

    def _mutating(self) -> None:
        answers: dict[Hashable, Any] | None = getattr(self._local, "answers", None)
        if answers:
            answers.clear()

    def boot_id(self) -> str:
        return self.inner.boot_id()

    def host_namespace(self) -> NsRef:
        return self._read(("host_namespace",), self.inner.host_namespace)

    def open_namespace(self, handle: NamespaceHandle) -> NsRef:
        return self._read(("open_namespace", handle), lambda: self.inner.open_namespace(handle))

    def list_namespaces(self) -> list[NsRef]:
        return list(self._read(("list_namespaces",), self.inner.list_namespaces))

    def list_links(self, ns: NsRef) -> list[Link]:
        # A copy each time: a caller may sort or filter its list without touching the next's.
        return list(self._read(("list_links", ns), lambda: self.inner.list_links(ns)))

    def get_link(
        self, ns: NsRef, *, name: str | None = None, ifindex: int | None = None
    ) -> Link | None:
        return self._read(
            ("get_link", ns, name, ifindex),
            lambda: self.inner.get_link(ns, name=name, ifindex=ifindex),
        )

    def find_device(self, pci_address: str) -> Link | None:
        return self._read(("find_device", pci_address), lambda: self.inner.find_device(pci_address))

    def get_vfs(self, ns: NsRef, pf_ifindex: int) -> list[VFConfig]:
        return list(
            self._read(("get_vfs", ns, pf_ifindex), lambda: self.inner.get_vfs(ns, pf_ifindex))
        )

    def create_link(self, ns: NsRef, spec: LinkSpec) -> Link:
        self._mutating()
        return self.inner.create_link(ns, spec)

    def set_link(self, ns: NsRef, ifindex: int, changes: LinkChanges) -> Link:
        self._mutating()
        return self.inner.set_link(ns, ifindex, changes)

    def move_link(
        self,
        ns: NsRef,
        ifindex: int,
        target: NsRef,
        *,
        new_name: str | None = None,
        alias: str | None = None,
    ) -> Link:
        self._mutating()
        return self.inner.move_link(ns, ifindex, target, new_name=new_name, alias=alias)

    def delete_link(self, ns: NsRef, ifindex: int) -> None:
        self._mutating()
        self.inner.delete_link(ns, ifindex)

    def set_vf(self, ns: NsRef, pf_ifindex: int, vf_index: int, changes: VFChanges) -> None:
        self._mutating()
        self.inner.set_vf(ns, pf_ifindex, vf_index, changes)


def _is_a_kernel(k: ReadSharingKernel) -> Kernel:
    return k  # mypy checks the protocol here
