"""Each Linux executor on the fake kernel: apply then undo returns exactly to the captured
state; a crash between any two of its kernel calls is recovered by re-applying (probe
based, idempotent); a foreign object is refused and never touched."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from fakekernel.lab import load_lab
from fakekernel.model import FakeKernelModel, diff
from plugins.effects.linux import (
    AttachMember,
    CreateBond,
    CreateSharedChild,
    CreateVLAN,
    HoldSharedParent,
    MoveLink,
    MoveLinkNamed,
    RenameLink,
    SetLinkMTU,
    SetLinkUp,
    SetVFConfig,
)
from plugins.effects.linux._common import describe, ns_json
from plugins.kernel import KERNEL_CALLS, LinkChanges, LinkSpec, VFChanges
from plugins.kernel._crashing import CrashingKernel
from plugins.sdk import FailedPrecondition
from plugins.sdk.runner import (
    CrashPoints,
    EffectContext,
    SimulatedCrash,
    UndoOutcome,
    scope_evidence,
)

from .node import LAB

VF0_PCI = "0000:03:10.0"


@dataclass
class Case:
    """One executor, its payload/inputs, and the kernel it runs on (set up per case)."""

    name: str
    make: Callable[[Any], Any]
    payload: Callable[[FakeKernelModel], dict[str, Any]]
    inputs: Callable[[FakeKernelModel], dict[str, Any]] = field(default=lambda m: {})
    setup: Callable[[FakeKernelModel], None] = field(default=lambda m: None)
    foreign: Callable[[FakeKernelModel], None] | None = None
    # The effect whose undo restores what this one changed: this one's undo changes
    # nothing (``test_the_move_vf_subplan_is_undone_by_its_move_home`` checks the pair).
    restored_by: str | None = None


def sandbox(m: FakeKernelModel) -> Any:
    return next(ns for ns in m.namespaces() if ns.path.endswith("/pod-a"))


def vf_in_sandbox(m: FakeKernelModel, name: str = "net1", pci: str = VF0_PCI) -> Any:
    link = m.find_device(pci)
    assert link is not None
    return m.move_link(link.ns, link.ifindex, sandbox(m), new_name=name)


def make_owned_bond(m: FakeKernelModel) -> None:
    m.create_link(sandbox(m), LinkSpec(kind="bond", name="bond0", alias="dranp:ours"))


def owned_bond(m: FakeKernelModel) -> dict[str, Any]:
    bond = m.get_link(sandbox(m), name="bond0")
    assert bond is not None
    return {**describe(bond, "link:dranp:ours"), "marker": "dranp:ours"}


def attach_setup(m: FakeKernelModel) -> None:
    make_owned_bond(m)
    m.set_link(sandbox(m), vf_in_sandbox(m).ifindex, LinkChanges(up=True))


def enslave_elsewhere(m: FakeKernelModel) -> None:
    other = m.create_link(sandbox(m), LinkSpec(kind="bond", name="other"))
    m.set_link(sandbox(m), vf_in_sandbox_link(m), LinkChanges(up=False))
    m.set_link(sandbox(m), vf_in_sandbox_link(m), LinkChanges(master=other.ifindex))


def host_vf_description(m: FakeKernelModel) -> dict[str, Any]:
    link = m.find_device(VF0_PCI)
    assert link is not None
    return describe(link, f"pci:{VF0_PCI}")


CASES = [
    Case(
        "set-vf-config",
        SetVFConfig,
        lambda m: {
            "pf": "enp3s0f0",
            "vfIndex": 0,
            "pciAddress": VF0_PCI,
            "settings": {"vlan": 10, "qos": 2, "spoofCheck": False, "trust": True},
        },
        foreign=lambda m: None,
    ),
    Case(
        "set-link-mtu",
        SetLinkMTU,
        lambda m: {"mtu": 9000},
        inputs=lambda m: {"link": host_vf_description(m)},
    ),
    Case(
        "move-link",
        MoveLink,
        lambda m: {"link": {"description": host_vf_description(m)}, "to": ns_json(sandbox(m))},
    ),
    Case(
        "move-link-named",
        MoveLinkNamed,
        lambda m: {
            "link": {"description": host_vf_description(m)},
            "to": ns_json(sandbox(m)),
            "name": "net1",
        },
    ),
    Case(
        "rename-link",
        RenameLink,
        lambda m: {"name": "net1"},
        inputs=lambda m: {"link": {"pciAddress": VF0_PCI}},
        setup=lambda m: vf_in_sandbox(m, "np0000000000000"),
        foreign=lambda m: m.create_link(sandbox(m), LinkSpec(kind="dummy", name="net1")),
        restored_by="move-link",
    ),
    Case(
        "set-link-up",
        SetLinkUp,
        lambda m: {},
        inputs=lambda m: {"link": {"pciAddress": VF0_PCI}},
        setup=vf_in_sandbox,
    ),
    Case(
        "create-bond",
        CreateBond,
        lambda m: {
            "namespace": ns_json(sandbox(m)),
            "name": "bond0",
            "mode": "active-backup",
            "monitorIntervalMs": 100,
            "mtu": 1500,
        },
        foreign=lambda m: m.create_link(sandbox(m), LinkSpec(kind="bond", name="bond0")),
    ),
    Case(
        "attach-member",
        AttachMember,
        lambda m: {
            "member": {
                "id": "h",
                "type": "KernelInterface/v1",
                "description": {"pciAddress": VF0_PCI},
            }
        },
        inputs=lambda m: {"bond": owned_bond(m)},
        setup=attach_setup,
        foreign=enslave_elsewhere,
    ),
    Case(
        "create-vlan",
        CreateVLAN,
        lambda m: {
            "parent": {"id": "p", "type": "KernelInterface/v1", "description": sandbox_parent(m)},
            "namespace": ns_json(sandbox(m)),
            "name": "data0",
            "vlanId": 100,
            "protocol": "802.1Q",
            "mtu": 1500,
        },
        setup=vf_in_sandbox,
        foreign=lambda m: m.create_link(sandbox(m), LinkSpec(kind="dummy", name="data0")),
    ),
    Case(
        "create-shared-child",
        CreateSharedChild,
        lambda m: {
            "parent": {"id": "p", "type": "SharedParent/v1", "description": shared_parent(m)},
            "namespace": ns_json(sandbox(m)),
            "name": "secondary0",
            "kind": "macvlan",
            "mode": "bridge",
            "mtu": 1500,
        },
        foreign=lambda m: m.create_link(sandbox(m), LinkSpec(kind="dummy", name="secondary0")),
    ),
    Case(
        "hold-shared-parent",
        HoldSharedParent,
        lambda m: {
            "rootId": "r",
            "parent": "enp3s0f2",
            "capacity": "dra.networking/macvlans",
            "quantity": 1,
            "kind": "macvlan",
            "mode": "bridge",
            "mtu": 1500,
        },
    ),
]


def vf_in_sandbox_link(m: FakeKernelModel) -> int:
    link = m.find_device(VF0_PCI)
    assert link is not None
    return link.ifindex


def sandbox_parent(m: FakeKernelModel) -> dict[str, Any]:
    link = m.find_device(VF0_PCI)
    assert link is not None
    return describe(link, f"pci:{VF0_PCI}")


def shared_parent(m: FakeKernelModel) -> dict[str, Any]:
    link = m.get_link(m.host_namespace(), name="enp3s0f2")
    assert link is not None
    return describe(link, "pci:0000:03:00.2")


def fresh(case: Case) -> FakeKernelModel:
    model = load_lab(LAB)
    model.add_namespace("pod-a")
    case.setup(model)
    return model


def context(case: Case, model: FakeKernelModel) -> EffectContext:
    return EffectContext(
        "p/v1", "op-1", case.name, "att-1", "step", case.payload(model), case.inputs(model)
    )


def run_apply(
    case: Case, model: FakeKernelModel, crash: CrashPoints, before: Any = None
) -> tuple[Any, Any, dict[str, Any]]:
    """Capture (unless a recorded before-image is given), then apply under ``crash``."""
    executor = case.make(CrashingKernel(model, crash))
    ctx = context(case, model)
    with crash.scope("test", "op-1", case.name):
        if before is None:
            before = executor.capture(ctx)
        outputs = dict(executor.apply(ctx, before))
    return executor, before, outputs


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_apply_then_undo_restores_exactly(case: Case) -> None:
    model = fresh(case)
    initial = model.snapshot()
    executor, before, outputs = run_apply(case, model, CrashPoints())
    if case.name != "hold-shared-parent":
        assert diff(initial, model.snapshot()) != [], "apply changed nothing"
    ctx = context(case, model)
    assert executor.probe(ctx, before, outputs).value == "ours"
    applied = model.snapshot()
    result = executor.undo(ctx, before, outputs)
    assert result.outcome is UndoOutcome.UNDONE, result
    if case.restored_by is not None:
        assert diff(applied, model.snapshot()) == [], f"left to {case.restored_by}'s undo"
        return
    changes = diff(initial, model.snapshot())
    if case.name == "attach-member":
        # The bond's own address belongs to create-bond: Linux hands the bond its first
        # slave's MAC and does not give the old one back when the last slave leaves.
        changes = [
            c
            for c in changes
            if not (c.startswith("~ link 'bond0'") and c.endswith("'") and "mac:" in c)
        ]
    assert changes == []
    assert executor.undo(ctx, before, outputs).outcome is not UndoOutcome.QUARANTINED  # idempotent


class CountingMutations:
    """The model, recording the mutations called on it (``mutations``, by method; the
    seam's declarations say which calls mutate)."""

    MUTATING = frozenset(name for name, call in KERNEL_CALLS.items() if call.mutating)

    def __init__(self, model: FakeKernelModel) -> None:
        self.model = model
        self.mutations: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.model, name)
        if name not in self.MUTATING:
            return method

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.mutations.append(name)
            return method(*args, **kwargs)

        return recorded


def move_vf_steps(kernel: Any, model: FakeKernelModel, version: int) -> list[tuple[Any, Any]]:
    """``effects.move_vf``'s executors and payloads: since v2 the move under the final
    name, then up; before, the move under a temporary name, the rename, then up."""
    moved = {"link": {"description": host_vf_description(model)}, "to": ns_json(sandbox(model))}
    if version == 2:
        return [(MoveLinkNamed(kernel), {**moved, "name": "net1"}), (SetLinkUp(kernel), {})]
    return [
        (MoveLink(kernel), moved),
        (RenameLink(kernel), {"name": "net1"}),
        (SetLinkUp(kernel), {}),
    ]


@pytest.mark.parametrize("version", [2, 1], ids=["move-link-v2", "move-link-v1-and-rename"])
@pytest.mark.parametrize("home_up", [False, True], ids=["down-at-home", "up-at-home"])
def test_the_move_vf_subplan_is_undone_by_its_move_home(home_up: bool, version: int) -> None:
    """``effects.move_vf`` (moved in under our marker and named, then up) undone in
    reverse restores the VF exactly, and only the move's undo changes the kernel: one
    move home, plus bringing it up again if it was up at home (the move closes it). v2
    gets it there in two messages (the move with its name and marker, then up), v1's
    journals in three (a rename between)."""
    model = fresh(CASES[0])
    vf = model.find_device(VF0_PCI)
    assert vf is not None
    model.set_link(vf.ns, vf.ifindex, LinkChanges(up=home_up))
    initial = model.snapshot()
    kernel = CountingMutations(model)
    done = []
    for index, (executor, payload) in enumerate(move_vf_steps(kernel, model, version)):
        inputs = {"link": {"pciAddress": VF0_PCI}} if index else {}
        ctx = EffectContext("p/v1", "op-1", f"e{index}", "att-1", "step", payload, inputs)
        before = executor.capture(ctx)
        done.append((executor, ctx, before, executor.apply(ctx, before)))
    assert kernel.mutations == ["move_link", *["set_link"] * (3 - version)]
    moved = model.find_device(VF0_PCI)
    assert moved is not None
    assert (moved.name, moved.up) == ("net1", True)
    assert moved.alias is not None
    assert moved.alias.startswith(scope_evidence("p/v1", "att-1"))
    kernel.mutations.clear()
    for executor, ctx, before, outputs in reversed(done):
        assert executor.undo(ctx, before, outputs).outcome is UndoOutcome.UNDONE
    assert kernel.mutations == ["move_link", *(["set_link"] if home_up else [])]
    assert diff(initial, model.snapshot()) == []


@pytest.mark.parametrize("own_name_taken", [False, True], ids=["moved-then-refused", "refused"])
def test_a_taken_name_refuses_the_named_move_and_its_undo_brings_the_vf_home(
    own_name_taken: bool,
) -> None:
    """v2 leaves the name check to the kernel: a link of another's under the final name
    makes the move fail as the check did, with the VF either not moved (its own name is
    taken in the sandbox too) or moved under its own name and unmarked (the rename after
    the move failed); the cleanup's undo brings it home, and the other link is left
    alone."""
    model = fresh(CASES[0])
    pod = sandbox(model)
    model.create_link(pod, LinkSpec(kind="dummy", name="net1"))
    vf = model.find_device(VF0_PCI)
    assert vf is not None
    if own_name_taken:
        model.create_link(pod, LinkSpec(kind="dummy", name=vf.name))
    initial = model.snapshot()
    executor = MoveLinkNamed(model)
    payload = {"link": {"description": host_vf_description(model)}, "to": ns_json(pod)}
    ctx = EffectContext("p/v1", "op-1", "e0", "att-1", "step", {**payload, "name": "net1"}, {})
    before = executor.capture(ctx)
    with pytest.raises(FailedPrecondition, match="net1 already exists in the sandbox"):
        executor.apply(ctx, before)
    moved = model.find_device(VF0_PCI)
    assert moved is not None
    assert (moved.ns.key == pod.key, moved.name, moved.alias) == (
        not own_name_taken, vf.name, vf.alias
    )  # fmt: skip
    result = executor.undo(ctx, before, None)
    assert result.outcome is (UndoOutcome.ABSENT if own_name_taken else UndoOutcome.UNDONE)
    assert diff(initial, model.snapshot()) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_crash_between_kernel_calls_is_recovered_by_probe(case: Case) -> None:
    reference_model = fresh(case)
    recorder = CrashPoints()
    _, _, expected = run_apply(case, reference_model, recorder)
    expected_state = reference_model.snapshot()
    kernel_points = [p for p in recorder.reached if p.phase.kind.is_kernel_call]
    assert kernel_points or case.name == "hold-shared-parent"
    for point in kernel_points:
        model = fresh(case)
        before = case.make(model).capture(context(case, model))  # durable before the crash
        with pytest.raises(SimulatedCrash):
            run_apply(case, model, CrashPoints(armed=point), before)
        # A new process: same payload, same identity, the recorded before-image,
        # the kernel as the crash left it.
        _, _, outputs = run_apply(case, model, CrashPoints(), before)
        assert outputs == expected, point
        assert diff(expected_state, model.snapshot()) == [], point


@pytest.mark.parametrize("case", [c for c in CASES if c.foreign is not None], ids=lambda c: c.name)
def test_a_foreign_object_is_refused_and_left_alone(case: Case) -> None:
    model = fresh(case)
    assert case.foreign is not None
    case.foreign(model)
    if case.name == "set-vf-config":
        # A foreign change on another VF of the same PF must stay untouched by our effect.
        pf = model.get_link(model.host_namespace(), name="enp3s0f0")
        assert pf is not None
        model.set_vf(model.host_namespace(), pf.ifindex, 1, VFChanges(vlan=77))
        executor, before, outputs = run_apply(case, model, CrashPoints())
        executor.undo(context(case, model), before, outputs)
        assert model.get_vfs(model.host_namespace(), pf.ifindex)[1].vlan == 77
        return
    foreign_state = model.snapshot()
    executor = case.make(model)
    ctx = context(case, model)
    with pytest.raises(FailedPrecondition):
        executor.capture(ctx)
    # Cleanup of an effect that never applied must not touch the foreign object either.
    result = executor.undo(
        ctx, {"existed": False, "mtu": 1500, "mac": "", "up": False, "name": "x"}, None
    )
    assert result.outcome is not UndoOutcome.UNDONE
    assert diff(foreign_state, model.snapshot()) == []


def test_external_change_to_a_vf_field_quarantines_instead_of_overwriting() -> None:
    case = CASES[0]
    model = fresh(case)
    executor, before, outputs = run_apply(case, model, CrashPoints())
    pf = model.get_link(model.host_namespace(), name="enp3s0f0")
    assert pf is not None
    model.set_vf(
        model.host_namespace(), pf.ifindex, 0, VFChanges(vlan=99, qos=0)
    )  # an administrator
    result = executor.undo(context(case, model), before, outputs)
    assert result.outcome is UndoOutcome.QUARANTINED
    assert "vlan" in result.detail
    assert model.get_vfs(model.host_namespace(), pf.ifindex)[0].vlan == 99


def test_shared_parent_mtu_below_the_request_is_refused() -> None:
    case = CASES[-1]
    model = fresh(case)
    ctx = context(case, model)
    ctx = EffectContext(
        ctx.partition,
        ctx.operation_id,
        ctx.effect_id,
        ctx.scope,
        ctx.step,
        {**ctx.payload, "mtu": 9500},
    )
    with pytest.raises(FailedPrecondition, match="MTU 9000, below the requested 9500"):
        HoldSharedParent(model).capture(ctx)
