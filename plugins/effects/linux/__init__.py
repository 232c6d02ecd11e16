"""The registered Linux effect executors, written once against the Kernel protocol.

The owned-link kit (``OwnedLink``, ``NewLink``, ``owned_link_payload``,
``evidence_scan``) is public: a plugin that creates a new kind of link writes only
its spec (docs/writing-a-plugin.md).
"""

from __future__ import annotations

from plugins.kernel import Kernel
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
from ._vf import MoveLink, RenameLink, SetLinkMTU, SetVFConfig


def linux_effects(kernel: Kernel) -> EffectRegistry:
    """Every executor the three services are approved to run, bound to one kernel."""
    return EffectRegistry(
        [
            SetVFConfig(kernel),
            SetLinkMTU(kernel),
            MoveLink(kernel),
            RenameLink(kernel),
            SetLinkUp(kernel),
            CreateBond(kernel),
            AttachMember(kernel),
            CreateVLAN(kernel),
            CreateSharedChild(kernel),
            HoldSharedParent(kernel),
        ],
        evidence=evidence_scan(kernel),
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
