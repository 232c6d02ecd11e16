"""Restore exactly, from any starting state: a VF that was up, with its own MTU, address and
VF-table settings before its lifecycle, comes home with every one of them.

The default lab starts every VF down with default settings, which is also what a VF
that lost its admin state or settings looks like; these tests start from a state that
differs from the defaults, and from what the plugins set, in every attribute they touch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakekernel.lab import build_model, parse_lab_yaml
from fakekernel.model import FakeKernelModel, diff
from plugins.effects.linux import (
    AttachMember,
    MoveLink,
    MoveLinkNamed,
    RenameLink,
    SetLinkMTU,
    SetVFConfig,
)
from plugins.effects.linux._common import describe, ns_json
from plugins.kernel import Link, LinkChanges, LinkSpec, VFChanges
from plugins.kernel._crashing import CrashingKernel
from plugins.sdk import CleanupStatus
from plugins.sdk.runner import CrashPoints, EffectContext, SimulatedCrash, UndoOutcome

from .node import LAB, VF0, VF1, FakeNode

# Different from the lab's defaults and from what VF_CONFIG/the topologies set. QoS stays
# 0: the plugin sets "vlan" alone and the kernel keeps the QoS, which needs a VLAN.
BUSY_TABLE = VFChanges(vlan=300, spoofchk=True, trust=False, min_tx_rate=100, max_tx_rate=1000)
BUSY_MTU = 9000
BUSY_MACS = {VF0["pciAddress"]: "02:aa:00:00:00:01", VF1["pciAddress"]: "02:aa:00:00:00:02"}


def lab_model(*, sandbox: bool = True) -> FakeKernelModel:
    desc = parse_lab_yaml(LAB.read_text(), str(LAB))
    model = build_model(desc)
    if sandbox:
        model.add_namespace("pod-a")
    return model


def vf(model: FakeKernelModel, pci: str) -> Link:
    link = model.find_device(pci)
    assert link is not None
    return link


def start_busy(model: FakeKernelModel, pci: str) -> None:
    """The VF is up, with its own MTU and address, and non-default VF-table settings."""
    link = vf(model, pci)
    assert link.vf_of is not None
    pf_pci, index = link.vf_of
    pf = vf(model, pf_pci)
    host = model.host_namespace()
    caps = model.get_vfs(host, pf.ifindex)[index]
    table = BUSY_TABLE
    if caps.link_state is not None:  # only NICs that can force a VF's link state
        table = VFChanges(**{**table.fields(), "link_state": "disable"})
    model.set_vf(host, pf.ifindex, index, table)
    model.set_link(host, link.ifindex, LinkChanges(mtu=BUSY_MTU, mac=BUSY_MACS[pci], up=True))


@pytest.fixture
def busy_node(tmp_path: Path) -> Iterator[FakeNode]:
    model = lab_model(sandbox=False)  # the node makes its own
    for pci in BUSY_MACS:
        start_busy(model, pci)
    node = FakeNode(tmp_path, model=model)
    yield node
    node.close()


def test_busy_start_differs_from_the_defaults_in_every_attribute_we_restore() -> None:
    """Guards the tests below: a start equal to the defaults would hide a restore bug."""
    plain, busy = lab_model(), lab_model()
    start_busy(busy, VF0["pciAddress"])
    changed = {line.split(": ")[1] for line in diff(plain.snapshot(), busy.snapshot())}
    expected = {"up", "mtu", "mac", "vlan", "min_tx_rate", "max_tx_rate", "link_state"}
    assert expected <= changed


def test_vfs_that_started_up_come_home_identical_after_a_full_lifecycle(
    busy_node: FakeNode,
) -> None:
    before = busy_node.model.snapshot()
    busy_node.full_attach()
    assert diff(before, busy_node.model.snapshot()) != []
    responses = busy_node.full_detach()
    assert [r.status for r in responses] == [CleanupStatus.CLEANED] * 6
    assert diff(before, busy_node.model.snapshot()) == []
    assert vf(busy_node.model, VF0["pciAddress"]).up


# -- each executor that changes a VF, on its own ------------------------------------------

PCI = VF0["pciAddress"]


def vf_config_payload(model: FakeKernelModel) -> dict[str, Any]:
    settings = {"vlan": 0, "spoofCheck": False, "trust": True, "mac": "02:bb:00:00:00:01"}
    return {"pf": "enp3s0f0", "vfIndex": 0, "pciAddress": PCI, "settings": settings}


def moved_in(model: FakeKernelModel, name: str = "np0000000000000", up: bool = False) -> None:
    link = model.move_link(
        model.host_namespace(), vf(model, PCI).ifindex, model.namespace("pod-a"), new_name=name
    )
    model.set_link(link.ns, link.ifindex, LinkChanges(up=up))


class MoveThenRename:
    """MoveVF's first two steps (``effects.move_vf``) as one executor: the move, then
    the rename's capture and apply; undo in reverse, the rename's first."""

    def __init__(self, kernel: Any) -> None:
        self.move, self.rename = MoveLink(kernel), RenameLink(kernel)

    @staticmethod
    def _part(ctx: EffectContext, part: str) -> EffectContext:
        inputs = {"link": {"pciAddress": PCI}} if part == "rename" else {}
        payload = ctx.payload[part]
        assert isinstance(payload, dict)
        return EffectContext(
            ctx.partition, ctx.operation_id, part, ctx.scope, ctx.step, payload, inputs
        )

    def capture(self, ctx: EffectContext) -> Any:
        return self.move.capture(self._part(ctx, "move"))

    def apply(self, ctx: EffectContext, before: Any) -> dict[str, Any]:
        self.move.apply(self._part(ctx, "move"), before)
        renaming = self._part(ctx, "rename")
        renamed = self.rename.capture(renaming)
        self.rename.apply(renaming, renamed)
        return {"rename": renamed}

    def undo(self, ctx: EffectContext, before: Any, outputs: Any) -> Any:
        first = self.rename.undo(self._part(ctx, "rename"), outputs["rename"], None)
        if first.outcome is UndoOutcome.QUARANTINED:
            return first
        return self.move.undo(self._part(ctx, "move"), before, None)


CASES: dict[str, tuple[Any, Any, Any]] = {
    # executor, payload, inputs (each from the prepared model)
    "set-vf-config": (SetVFConfig, vf_config_payload, lambda m: {}),
    "set-link-mtu": (
        SetLinkMTU,
        lambda m: {"mtu": 1500},
        lambda m: {"link": describe(vf(m, PCI), f"pci:{PCI}")},
    ),
    "move-link": (
        MoveLink,
        lambda m: {
            "link": {"description": describe(vf(m, PCI), f"pci:{PCI}")},
            "to": ns_json(m.namespace("pod-a")),
        },
        lambda m: {},
    ),
    "move-link-named": (
        MoveLinkNamed,
        lambda m: {**CASES["move-link"][1](m), "name": "net1"},
        lambda m: {},
    ),
    # The rename's undo is the move's (``RenameLink``): restored exactly only as a pair.
    "move-then-rename": (
        MoveThenRename,
        lambda m: {"move": CASES["move-link"][1](m), "rename": {"name": "net1"}},
        lambda m: {},
    ),
    "attach-member": (
        AttachMember,
        lambda m: {
            "member": {"id": "h", "type": "KernelInterface/v1", "description": {"pciAddress": PCI}}
        },
        lambda m: {"bond": our_bond(m)},
    ),
}


def our_bond(model: FakeKernelModel) -> dict[str, Any]:
    bond = model.get_link(model.namespace("pod-a"), name="bond0")
    assert bond is not None
    return {**describe(bond, "link:dranp:ours"), "marker": "dranp:ours"}


def changes(case: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    found = diff(before, after)
    if case == "attach-member":
        # The bond's own address belongs to create-bond: Linux hands the bond a new random
        # address when its last slave leaves.
        found = [c for c in found if not c.startswith("~ link 'bond0'")]
    return found


def prepared(case: str) -> FakeKernelModel:
    model = lab_model()
    start_busy(model, PCI)
    if case == "attach-member":
        moved_in(model, up=True)  # as the pod may have it
    if case == "attach-member":
        bond = LinkSpec(kind="bond", name="bond0", alias="dranp:ours", mtu=1500)
        model.create_link(model.namespace("pod-a"), bond)
    return model


def context(case: str, model: FakeKernelModel) -> EffectContext:
    _, payload, inputs = CASES[case]
    return EffectContext("p/v1", "op-1", case, "att-1", "step", payload(model), inputs(model))


@pytest.mark.parametrize("case", list(CASES))
def test_apply_then_undo_restores_every_attribute_of_a_busy_vf(case: str) -> None:
    model = prepared(case)
    initial = model.snapshot()
    executor, ctx = CASES[case][0](model), context(case, model)
    before = executor.capture(ctx)
    outputs = executor.apply(ctx, before)
    assert diff(initial, model.snapshot()) != [], "apply changed nothing"
    result = executor.undo(ctx, before, outputs)
    assert result.outcome is UndoOutcome.UNDONE, result
    assert changes(case, initial, model.snapshot()) == []
    assert executor.undo(ctx, before, outputs).outcome is UndoOutcome.ABSENT  # idempotent


@pytest.mark.parametrize("case", list(CASES))
def test_a_crash_between_undo_kernel_calls_still_restores_everything(case: str) -> None:
    reference = prepared(case)
    executor, ctx = CASES[case][0](reference), context(case, reference)
    before = executor.capture(ctx)
    outputs = executor.apply(ctx, before)
    recorder = CrashPoints()
    with recorder.scope("test", "op-1", case):
        CASES[case][0](CrashingKernel(reference, recorder)).undo(ctx, before, outputs)
    points = [p for p in recorder.reached if p.phase.kind.is_kernel_call]
    assert points
    for point in points:
        model = prepared(case)
        initial = model.snapshot()
        ctx = context(case, model)
        outputs = CASES[case][0](model).apply(ctx, before)
        crash = CrashPoints(armed=point)
        with pytest.raises(SimulatedCrash), crash.scope("test", "op-1", case):
            CASES[case][0](CrashingKernel(model, crash)).undo(ctx, before, outputs)
        # A new process undoes again from the same before-image.
        result = CASES[case][0](model).undo(ctx, before, outputs)
        assert result.outcome is not UndoOutcome.QUARANTINED, (point, result)
        assert changes(case, initial, model.snapshot()) == [], point


def test_a_vf_back_home_before_its_undo_gets_its_name_and_admin_state_back() -> None:
    """The sandbox died while the VF was in it: the kernel sent it home, closed, under
    whatever name was free; undo gives it its own name and brings it up again."""
    model = prepared("move-link")
    initial = model.snapshot()
    executor, ctx = MoveLink(model), context("move-link", model)
    before = executor.capture(ctx)
    outputs = executor.apply(ctx, before)
    model.delete_namespace("pod-a")
    returned = vf(model, PCI)
    assert (returned.name, returned.up) != (before["name"], True)
    assert executor.undo(ctx, before, outputs).outcome is UndoOutcome.UNDONE
    links_and_vfs = {**model.snapshot(), "namespaces": initial["namespaces"]}
    assert diff(initial, links_and_vfs) == []  # the empty sandbox is gone, nothing else


def test_a_vf_brought_up_at_home_by_someone_else_is_quarantined_and_left_up() -> None:
    model = lab_model()  # VF0 starts down
    executor, ctx = MoveLink(model), context("move-link", model)
    before = executor.capture(ctx)
    outputs = executor.apply(ctx, before)
    executor.undo(ctx, before, outputs)
    link = vf(model, PCI)
    model.set_link(link.ns, link.ifindex, LinkChanges(up=True))  # an administrator
    result = executor.undo(ctx, before, outputs)
    assert result.outcome is UndoOutcome.QUARANTINED
    assert vf(model, PCI).up


def test_an_external_change_of_the_vf_netdev_address_is_quarantined() -> None:
    model = prepared("set-vf-config")
    executor, ctx = SetVFConfig(model), context("set-vf-config", model)
    before = executor.capture(ctx)
    outputs = executor.apply(ctx, before)
    link = vf(model, PCI)
    model.set_link(link.ns, link.ifindex, LinkChanges(mac="02:cc:00:00:00:01"))
    result = executor.undo(ctx, before, outputs)
    assert result.outcome is UndoOutcome.QUARANTINED
    assert "netdev address" in result.detail
    assert vf(model, PCI).mac == "02:cc:00:00:00:01"
