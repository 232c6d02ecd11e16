"""The lab's kernel: the Kernel protocol plus what a test needs to set up a scene and to
check the node afterwards. Declared like the seam itself (``plugins.kernel``'s
``@reads``/``@mutates``), so the fake kernel's wire (its client, and the dispatch the
fake kernel server and the VM lab's guest agent share) derives from ``LAB_CALLS``."""

from __future__ import annotations

from errno import EEXIST, ENOENT
from typing import Any, Protocol

from plugins.kernel import Kernel, NsRef, calls_of, mutates, reads

__all__ = ["LAB_CALLS", "LabKernel"]


class LabKernel(Kernel, Protocol):
    @mutates(errors={EEXIST: "the name is taken"})
    def add_namespace(self, name: str) -> NsRef:
        """A new named namespace of the lab."""
        ...

    @mutates(errors={ENOENT: "no namespace of that name"})
    def delete_namespace(self, name: str) -> None:
        """Delete a named namespace (what it held dies with it; devices go home)."""
        ...

    @reads(errors={ENOENT: "no namespace of that name"})
    def namespace(self, name: str) -> NsRef:
        """The lab's namespace of that name."""
        ...

    @reads()
    def namespaces(self) -> list[NsRef]:
        """Every namespace of the lab, the node's first."""
        ...

    @reads()
    def snapshot(self) -> dict[str, Any]:
        """The whole node as data, for the invariant oracle and the report."""
        ...


LAB_CALLS = calls_of(LabKernel)
