"""The one kernel interface. Effect executors are written against this only.

Backends: ``fakekernel`` (a deterministic model running outside the service
process) and the pyroute2 backend for real Linux. Every method either does what
it says or raises ``KernelError`` with the errno Linux gives for the same call.
"""

from __future__ import annotations

from typing import Protocol

from plugins.sdk import NamespaceHandle

from ._types import Link, LinkChanges, LinkSpec, NsRef, VFChanges, VFConfig


class Kernel(Protocol):
    def boot_id(self) -> str:
        """The node's boot id (/proc/sys/kernel/random/boot_id)."""
        ...

    def host_namespace(self) -> NsRef:
        """The approved host namespace configured for this service (never guessed)."""
        ...

    def open_namespace(self, handle: NamespaceHandle) -> NsRef:
        """Open ``handle.path`` and verify its nsfs device/inode and the boot id.

        ENOENT if the path is gone; ESTALE if it now names a different namespace or
        the boot id differs.
        """
        ...

    def list_namespaces(self) -> list[NsRef]:
        """Every network namespace this backend can reach, for a node-wide scan.

        ``host_namespace()`` first, then every other namespace exactly once (by nsfs
        device and inode), in a deterministic order each backend documents. Read-only:
        nothing stays open for the namespaces listed. Each ref can be passed to
        ``list_links`` and the other calls; a namespace that dies in between fails
        there as it would for ``open_namespace`` (ENOENT or ESTALE), never here.
        """
        ...

    def list_links(self, ns: NsRef) -> list[Link]: ...

    def get_link(
        self, ns: NsRef, *, name: str | None = None, ifindex: int | None = None
    ) -> Link | None:
        """Exactly one of name/ifindex. None if absent (never raises ENODEV for absence)."""
        ...

    def find_device(self, pci_address: str) -> Link | None:
        """The netdev of a PCI function, in whichever namespace it currently is."""
        ...

    def create_link(self, ns: NsRef, spec: LinkSpec) -> Link:
        """Create a link in ``ns`` in one message (a parent may live in ``spec.parent_ns``)."""
        ...

    def set_link(self, ns: NsRef, ifindex: int, changes: LinkChanges) -> Link: ...

    def move_link(
        self,
        ns: NsRef,
        ifindex: int,
        target: NsRef,
        *,
        new_name: str | None = None,
        alias: str | None = None,
    ) -> Link:
        """Move into ``target``, optionally renamed and re-aliased, in one RTM_SETLINK.

        ``alias`` sets IFLA_IFALIAS ("" clears it). Returns the link as seen in ``target``.
        Like Linux's do_setlink the parts apply in order, move, then name, then alias,
        and the first error stops the rest and is raised with what was done kept: a new
        name taken in ``target`` while the old one is free there (EEXIST from the rename
        after the move) leaves the link moved under its old name with its old alias. A
        link already in ``target`` is only renamed and re-aliased. Attribute checks (a
        name or alias too long: ERANGE) fail before anything changes. One message means
        no crash of the caller can fall between the parts; a listener in ``target``
        still gets the kernel's announcement of each part as it is applied (the move's
        shows the alias the link had before; a down link's new alias is not announced).
        """
        ...

    def delete_link(self, ns: NsRef, ifindex: int) -> None: ...

    def get_vfs(self, ns: NsRef, pf_ifindex: int) -> list[VFConfig]: ...

    def set_vf(self, ns: NsRef, pf_ifindex: int, vf_index: int, changes: VFChanges) -> None: ...
