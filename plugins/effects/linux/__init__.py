"""The registered Linux effect executors, written once against the Kernel protocol."""

from __future__ import annotations

from plugins.kernel import Kernel
from plugins.sdk.runner import EffectRegistry

from ._common import evidence_scan
from ._links import (
    AttachMember,
    CreateBond,
    CreateSharedChild,
    CreateVLAN,
    HoldSharedParent,
    SetLinkUp,
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
    "AttachMember",
    "CreateBond",
    "CreateSharedChild",
    "CreateVLAN",
    "HoldSharedParent",
    "MoveLink",
    "RenameLink",
    "SetLinkMTU",
    "SetLinkUp",
    "SetVFConfig",
    "evidence_scan",
    "linux_effects",
]
