"""The registered Linux effect executors, written once against the Kernel protocol.

The owned-link kit (``OwnedLink``, ``NewLink``, ``owned_link_payload``,
``evidence_scan``) is public: a plugin that creates a new kind of link writes only
its spec (docs/writing-a-plugin.md).
"""

from __future__ import annotations

from collections.abc import Callable

from plugins.kernel import Kernel, ReadSharingKernel
from plugins.sdk.runner import EffectRegistry

from ._common import IFNAME_SCHEMA, MTU_SCHEMA, NAMESPACE_SCHEMA, MarkedByAnotherKind, temp_name
from ._link_kinds import CreateBond, CreateSharedChild, CreateVLAN
from ._link_updates import AttachMember, HoldSharedParent, SetLinkUp
from ._links import (
    NewLink,
    OwnedLink,
    OwnedLinkExecutor,
    evidence_scan,
    owned_link_payload,
    payload_namespace,
)
from ._vf import MoveLink, MoveLinkNamed, RenameLink, SetLinkMTU, SetVFConfig


def linux_effects(
    kernel: Kernel, *, stuck_calls: Callable[[], int] | None = None
) -> EffectRegistry:
    """Every executor the three services are approved to run, bound to one kernel.

    ``stuck_calls``: the kernel's count of calls stuck past their deadline, for the
    metrics (``LinuxKernel.stuck_calls``). The executors' reads go through a
    ``ReadSharingKernel``: recovery's probes share one dump per namespace, and a hook's
    effects share what was read since its last mutation (``EffectRegistry.shared_reads``,
    ``plugins.kernel._snapshot``); the evidence scan always reads the kernel.
    """
    shared = ReadSharingKernel(kernel)
    return EffectRegistry(
        [
            SetVFConfig(shared),
            SetLinkMTU(shared),
            MoveLink(shared),
            MoveLinkNamed(shared),
            RenameLink(shared),
            SetLinkUp(shared),
            CreateBond(shared),
            AttachMember(shared),
            CreateVLAN(shared),
            CreateSharedChild(shared),
            HoldSharedParent(shared),
        ],
        evidence=evidence_scan(kernel),
        shared_reads=shared.shared_reads,
        stuck_calls=stuck_calls,
    )


__all__ = [
    "IFNAME_SCHEMA",
    "MTU_SCHEMA",
    "NAMESPACE_SCHEMA",
    "AttachMember",
    "CreateBond",
    "CreateSharedChild",
    "CreateVLAN",
    "HoldSharedParent",
    "MarkedByAnotherKind",
    "MoveLink",
    "MoveLinkNamed",
    "NewLink",
    "OwnedLink",
    "OwnedLinkExecutor",
    "RenameLink",
    "SetLinkMTU",
    "SetLinkUp",
    "SetVFConfig",
    "evidence_scan",
    "linux_effects",
    "owned_link_payload",
    "payload_namespace",
    "temp_name",
]
