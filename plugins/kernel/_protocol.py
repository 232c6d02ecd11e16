"""The one kernel interface, declared once. Effect executors are written against this only.

Backends: ``fakekernel`` (a deterministic model running outside the service process,
in the test kit) and the netlink backend for real Linux (``plugins.kernel.linux``).
Every method either does what it says or raises ``KernelError`` with the errno Linux
gives for the same call. This class is the seam's table (``_seam.py``): each method's
``@reads`` or ``@mutates`` says whether it changes the kernel and which errno values
it answers with; ``KERNEL_CALLS`` is that table as data.
"""

from __future__ import annotations

from errno import (
    EACCES,
    EADDRNOTAVAIL,
    EBUSY,
    EEXIST,
    EINVAL,
    ENODEV,
    ENOENT,
    ENOTEMPTY,
    EOPNOTSUPP,
    EPERM,
    EPROTONOSUPPORT,
    ERANGE,
    ESTALE,
)
from typing import Protocol

from plugins.sdk import NamespaceHandle

from ._seam import calls_of, mutates, reads
from ._types import Link, LinkChanges, LinkOptions, LinkSpec, NsRef, VFChanges, VFConfig

# What any call given an ``NsRef`` may answer: the namespace died (its mount removed,
# its last process gone) or the reference is of another boot.
_NAMESPACE = {ENOENT: "the namespace is gone", ESTALE: "the reference is of another namespace"}
_NO_LINK = {ENODEV: "no link with that ifindex in the namespace"}
_LINK_CHECKS = {
    EINVAL: "an invalid name, address or value",
    ERANGE: "a name or alias too long, an MTU outside the link's range",
}


class Kernel(Protocol):
    # Not declared constant, though it is for one boot: it is how a caller learns that
    # the kernel behind a connection booted again, which no cache between may answer.
    @reads()
    def boot_id(self) -> str:
        """The node's boot id (/proc/sys/kernel/random/boot_id)."""
        ...

    @reads(constant=True)
    def host_namespace(self) -> NsRef:
        """The approved host namespace configured for this service (never guessed)."""
        ...

    @reads(errors=_NAMESPACE)
    def open_namespace(self, handle: NamespaceHandle) -> NsRef:
        """Open ``handle.path`` and verify its nsfs device/inode and the boot id.

        ENOENT if the path is gone; ESTALE if it now names a different namespace or
        the boot id differs.
        """
        ...

    @reads()
    def list_namespaces(self) -> list[NsRef]:
        """Every network namespace this backend can reach, for a node-wide scan.

        ``host_namespace()`` first, then every other namespace exactly once (by nsfs
        device and inode), in a deterministic order each backend documents. Read-only:
        nothing stays open for the namespaces listed. Each ref can be passed to
        ``list_links`` and the other calls; a namespace that dies in between fails
        there as it would for ``open_namespace`` (ENOENT or ESTALE), never here.
        """
        ...

    @reads(errors=_NAMESPACE)
    def list_links(self, ns: NsRef) -> list[Link]:
        """Every link of ``ns``, by ascending ifindex."""
        ...

    @reads(errors={**_NAMESPACE, EINVAL: "not exactly one of name and ifindex"})
    def get_link(
        self, ns: NsRef, *, name: str | None = None, ifindex: int | None = None
    ) -> Link | None:
        """Exactly one of name/ifindex. None if absent (never raises ENODEV for absence)."""
        ...

    @reads()
    def find_device(self, pci_address: str) -> Link | None:
        """The netdev of a PCI function, in the host namespace or in one this backend has
        opened (``open_namespace``); None if it is in no such namespace, or gone. A caller
        looking for a device it moved into a namespace opens that namespace first (a
        service restarted since the move has opened none: ``effects.linux._common``'s
        ``find_device_in``). The fake model finds it in any namespace (a known gap,
        docs/fake-kernel-fidelity.md)."""
        ...

    @mutates(
        errors={
            **_NAMESPACE,
            **_LINK_CHECKS,
            EEXIST: "the name is taken in the namespace",
            ENODEV: "the parent does not exist",
            EOPNOTSUPP: "the kind is not supported (its module is not loaded)",
            EBUSY: "the parent cannot take another upper device of this kind, or "
            "spec.ifindex is taken in the target namespace only (EEXIST: in the one asked)",
            EPROTONOSUPPORT: "a VLAN protocol other than 802.1Q and 802.1ad",
        }
    )
    def create_link(self, ns: NsRef, spec: LinkSpec) -> Link:
        """Create a link in ``ns`` in one message (a parent may live in ``spec.parent_ns``),
        at ``spec.ifindex`` if given (EEXIST when a link of the namespace the message goes
        to has it: the parent's, for a child created across namespaces)."""
        ...

    @mutates(
        errors={
            **_NAMESPACE,
            **_NO_LINK,
            **_LINK_CHECKS,
            EEXIST: "the new name is taken",
            EBUSY: "the change needs the link down (a name or address of an up link)",
            EADDRNOTAVAIL: "not a unicast, non-zero address",
            EPERM: "the driver refuses the change",
        }
    )
    def set_link(self, ns: NsRef, ifindex: int, changes: LinkChanges) -> Link:
        """Apply ``changes`` in one RTM_SETLINK; the link as it is afterwards."""
        ...

    @mutates(
        errors={
            **_NAMESPACE,
            **_NO_LINK,
            EINVAL: "an option the kind does not have, or an invalid value",
            EOPNOTSUPP: "the link is not of the kind the options name",
            EBUSY: "a bond's mode changed while it is up",
            ENOTEMPTY: "a bond's mode or fail_over_mac changed while it has slaves",
            EACCES: "an active slave set in a bond mode without one",
        }
    )
    def set_link_options(self, ns: NsRef, ifindex: int, options: LinkOptions) -> Link:
        """Change options of an existing link of the kind ``options`` names (RTM_NEWLINK
        on the existing link with IFLA_LINKINFO, as ``ip link set NAME type KIND ...``):
        a bond's mode, MII interval, active slave and fail_over_mac, an ipvlan's or
        macvlan's mode, an ipvlan's flag (the lower device's ipvlans share mode and flag).
        The link as it is afterwards. A link of another kind than ``options.kind``:
        EOPNOTSUPP; an option that kind does not have: EINVAL."""
        ...

    @mutates(
        errors={
            **_NAMESPACE,
            **_NO_LINK,
            ERANGE: "a name or alias too long",
            EEXIST: "the new name is taken in the target",
            EINVAL: "the link cannot change namespace (NETIF_F_NETNS_LOCAL)",
        }
    )
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

    @mutates(errors={**_NAMESPACE, **_NO_LINK, EOPNOTSUPP: "a device cannot be deleted"})
    def delete_link(self, ns: NsRef, ifindex: int) -> None:
        """Unregister the link (and what is stacked on it)."""
        ...

    @reads(errors={**_NAMESPACE, **_NO_LINK})
    def get_vfs(self, ns: NsRef, pf_ifindex: int) -> list[VFConfig]:
        """The PF's VF table ([] for a link without VFs)."""
        ...

    @mutates(
        errors={
            **_NAMESPACE,
            **_NO_LINK,
            EINVAL: "no such VF, or a value the PF refuses",
            EOPNOTSUPP: "the PF's driver does not support the setting",
            EPROTONOSUPPORT: "a VLAN protocol the PF does not support",
        }
    )
    def set_vf(self, ns: NsRef, pf_ifindex: int, vf_index: int, changes: VFChanges) -> None:
        """Apply ``changes`` to one VF through its PF (IFLA_VFINFO_LIST)."""
        ...


KERNEL_CALLS = calls_of(Kernel)
