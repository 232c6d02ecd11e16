"""The owned-link kit, table-driven over every kind built on it (the project's and the example's),
on the fake kernel: a link is never adopted by its name, nor by a marker on another kind;
a crash between create and rename leaves a link that probe finds and undo removes."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from examples.dummy_plugin.effects import CreateDummy
from fakekernel.lab import load_lab
from fakekernel.model import FakeKernelModel, diff
from plugins.effects.linux import (
    CreateBond,
    CreateSharedChild,
    CreateVLAN,
    MarkedByAnotherKind,
    NewLink,
    OwnedLink,
    evidence_scan,
    owned_link_payload,
    temp_name,
)
from plugins.kernel import CrashingKernel, LinkKind, LinkSpec, NsRef
from plugins.sdk import FailedPrecondition
from plugins.sdk.runner import (
    CrashPoint,
    CrashPoints,
    EffectContext,
    Observation,
    Phase,
    PhaseKind,
    SimulatedCrash,
    UndoOutcome,
)

from .node import LAB

VF0_PCI = "0000:03:10.0"


def after_call(call: int, method: str) -> Phase:
    return Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, call, method)


def sandbox(m: FakeKernelModel) -> NsRef:
    return next(ns for ns in m.namespaces() if ns.path.endswith("/pod-a"))


def ns_json(ns: NsRef) -> dict[str, Any]:
    return {"path": ns.path, "device": ns.device, "inode": ns.inode, "bootId": ns.boot_id}


def vf_in_sandbox(m: FakeKernelModel) -> None:
    vf = m.find_device(VF0_PCI)
    assert vf is not None
    m.move_link(vf.ns, vf.ifindex, sandbox(m), new_name="net1")


def host_parent(m: FakeKernelModel) -> dict[str, Any]:
    parent = m.get_link(m.host_namespace(), name="enp3s0f2")
    assert parent is not None
    return {"ifName": parent.name, "ifIndex": parent.ifindex}


@dataclass(frozen=True)
class Kind:
    """One kind of owned link: its spec, the kernel kind, a payload, what it needs first."""

    name: str
    link: OwnedLink
    link_kind: LinkKind
    payload: Callable[[FakeKernelModel], dict[str, Any]]
    setup: Callable[[FakeKernelModel], None] = lambda m: None

    @property
    def other_kind(self) -> LinkKind:
        return "bond" if self.link_kind == "dummy" else "dummy"


def shared_child(kind: LinkKind, mode: str) -> Kind:
    return Kind(
        kind,
        CreateSharedChild,
        kind,
        lambda m: {
            "parent": {"id": "p", "type": "SharedParent/v1", "description": host_parent(m)},
            "namespace": ns_json(sandbox(m)),
            "name": "net0",
            "kind": kind,
            "mode": mode,
            "mtu": 1500,
        },
    )


KINDS = [
    Kind(
        "bond",
        CreateBond,
        "bond",
        lambda m: {
            "namespace": ns_json(sandbox(m)),
            "name": "net0",
            "mode": "active-backup",
            "monitorIntervalMs": 100,
            "mtu": 1500,
        },
    ),
    Kind(
        "vlan",
        CreateVLAN,
        "vlan",
        lambda m: {
            "parent": {
                "id": "p",
                "type": "KernelInterface/v1",
                "description": {"pciAddress": VF0_PCI},
            },
            "namespace": ns_json(sandbox(m)),
            "name": "net0",
            "vlanId": 100,
            "protocol": "802.1Q",
            "mtu": 1500,
        },
        setup=vf_in_sandbox,
    ),
    shared_child("macvlan", "bridge"),
    shared_child("ipvlan", "l2"),
    Kind(
        "example-dummy",
        CreateDummy,
        "dummy",
        lambda m: {"namespace": ns_json(sandbox(m)), "name": "net0", "mtu": 1500, "mac": None},
    ),
]
each_kind = pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)


def fresh(kind: Kind) -> FakeKernelModel:
    model = load_lab(LAB)
    model.add_namespace("pod-a")
    kind.setup(model)
    return model


def context(kind: Kind, model: FakeKernelModel) -> EffectContext:
    return EffectContext("p/v1", "op-1", "create", "att-1", "step", kind.payload(model))


def plant(model: FakeKernelModel, link_kind: LinkKind, name: str, alias: str | None) -> None:
    model.create_link(sandbox(model), LinkSpec(kind=link_kind, name=name, alias=alias))


def assert_left_alone(kind: Kind, model: FakeKernelModel, expect: type[Exception]) -> None:
    """Probe does not call it ours; capture and apply refuse; undo neither deletes nor adopts."""
    before = model.snapshot()
    ctx = context(kind, model)
    executor = kind.link(model)
    assert executor.probe(ctx, None, None) is Observation.FOREIGN
    with pytest.raises(expect):
        executor.capture(ctx)
    with pytest.raises(expect):
        executor.apply(ctx, {"existed": False})
    assert executor.undo(ctx, {"existed": False}, None).outcome is not UndoOutcome.UNDONE
    assert diff(before, model.snapshot()) == []


@each_kind
def test_the_kit_creates_under_a_temporary_name_then_marks_and_renames_in_one_call(
    kind: Kind,
) -> None:
    model = fresh(kind)
    initial = model.snapshot()
    crash = CrashPoints()
    ctx = context(kind, model)
    executor = kind.link(CrashingKernel(model, crash))
    with crash.scope("test", "op-1", "create"):
        outputs = executor.apply(ctx, executor.capture(ctx))
    assert [p.phase for p in crash.reached if p.phase.kind is PhaseKind.AFTER_KERNEL_CALL] == [
        after_call(1, "create_link"),
        after_call(2, "set_link"),  # the marker and the final name, one RTM_SETLINK
    ]
    link = model.get_link(sandbox(model), name="net0")
    assert link is not None
    assert (link.kind, link.alias) == (kind.link_kind, ctx.marker)
    assert outputs["interface"]["marker"] == ctx.marker
    assert outputs["interface"]["physical"] == f"link:{ctx.marker}"
    assert executor.probe(ctx, None, outputs) is Observation.OURS
    assert executor.undo(ctx, None, outputs).outcome is UndoOutcome.UNDONE
    assert diff(initial, model.snapshot()) == []


@each_kind
@pytest.mark.parametrize("alias", [None, "an-administrator's"])
def test_a_foreign_link_with_the_target_name_is_never_adopted_or_deleted(
    kind: Kind, alias: str | None
) -> None:
    model = fresh(kind)
    # Exactly what we would create, under the final name, without our marker.
    spec = kind.link.spec(NewLink(model, sandbox(model), kind.payload(model), "net0"))
    model.create_link(sandbox(model), replace(spec, alias=alias))
    assert_left_alone(kind, model, FailedPrecondition)


@each_kind
@pytest.mark.parametrize("name", ["net0", "elsewhere"])
def test_our_marker_on_a_link_of_another_kind_is_refused_and_quarantined(
    kind: Kind, name: str
) -> None:
    model = fresh(kind)
    plant(model, kind.other_kind, name, context(kind, model).marker)
    assert_left_alone(kind, model, MarkedByAnotherKind)
    result = kind.link(model).undo(context(kind, model), None, None)
    assert result.outcome is UndoOutcome.QUARANTINED
    assert f"{kind.other_kind} {name} carries the marker" in result.detail


@each_kind
def test_an_unmarked_link_of_another_kind_under_our_temporary_name_is_not_ours(kind: Kind) -> None:
    # The example's drift: it took any unmarked link with its temporary name for its own.
    model = fresh(kind)
    ctx = context(kind, model)
    plant(model, kind.other_kind, temp_name(ctx), None)
    before = model.snapshot()
    executor = kind.link(model)
    assert executor.probe(ctx, None, None) is Observation.ABSENT
    assert executor.undo(ctx, None, None).outcome is UndoOutcome.ABSENT
    assert diff(before, model.snapshot()) == []


@each_kind
@pytest.mark.parametrize(
    ("crash_after", "marked"),
    [(after_call(1, "create_link"), False), (after_call(2, "set_link"), True)],
    ids=str,
)
def test_a_crash_between_create_and_rename_leaves_a_link_probe_finds_and_undo_removes(
    kind: Kind, crash_after: Phase, marked: bool
) -> None:
    model = fresh(kind)
    initial = model.snapshot()
    ctx = context(kind, model)
    before = kind.link(model).capture(ctx)
    crash = CrashPoints(armed=CrashPoint("test", "op-1", "create", crash_after))
    with pytest.raises(SimulatedCrash), crash.scope("test", "op-1", "create"):
        kind.link(CrashingKernel(model, crash)).apply(ctx, before)

    # Unmarked, it still has its temporary name; marked, it has its final one as well.
    name = "net0" if marked else temp_name(ctx)
    (left,) = [lk for lk in model.list_links(sandbox(model)) if lk.name == name]
    assert left.kind == kind.link_kind
    assert left.alias == (ctx.marker if marked else None)
    # Once marked, the node-wide scan attributes it to its scope (before: the journal must).
    found = evidence_scan(model)(ctx.marker)
    where = f"{kind.link_kind} {left.name} in {sandbox(model).path}"
    assert found == ([(ctx.marker, where)] if marked else [])
    # A restarted service: a new executor, the recorded before-image, the kernel as left.
    executor = kind.link(model)
    assert executor.probe(ctx, before, None) is Observation.OURS
    assert executor.undo(ctx, before, None).outcome is UndoOutcome.UNDONE
    assert diff(initial, model.snapshot()) == []
    assert executor.undo(ctx, before, None).outcome is UndoOutcome.ABSENT


def test_a_spec_that_creates_another_kind_or_name_is_refused_before_any_mutation() -> None:
    def wrong_kind(new: NewLink) -> LinkSpec:
        return LinkSpec(kind="bond", name=new.name)

    def wrong_name(new: NewLink) -> LinkSpec:
        return LinkSpec(kind="dummy", name="net0")

    model = fresh(KINDS[-1])
    ctx = context(KINDS[-1], model)
    before = model.snapshot()
    for spec in (wrong_kind, wrong_name):
        link = OwnedLink("test/create-dummy/v1", "dummy", owned_link_payload({}), spec)
        with pytest.raises(FailedPrecondition, match="the kit would look for"):
            link(model).apply(ctx, {"existed": False})
    assert diff(before, model.snapshot()) == []


def test_writing_a_plugin_shows_the_examples_kit_spec_verbatim() -> None:
    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "writing-a-plugin.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.DOTALL)
    assert (root / "examples" / "dummy_plugin" / "effects.py").read_text() in blocks


@each_kind
def test_our_marked_link_under_another_name_gets_its_name_on_resume(kind: Kind) -> None:
    # Renamed by someone between the mark-and-rename and Applied: apply converges.
    model = fresh(kind)
    ctx = context(kind, model)
    executor = kind.link(model)
    before = executor.capture(ctx)
    spec = kind.link.spec(NewLink(model, sandbox(model), kind.payload(model), temp_name(ctx)))
    model.create_link(sandbox(model), replace(spec, alias=ctx.marker))
    outputs = executor.apply(ctx, before)
    (ours,) = [lk for lk in model.list_links(sandbox(model)) if lk.alias == ctx.marker]
    assert (ours.name, outputs["interface"]["ifName"]) == ("net0", "net0")


@each_kind
def test_a_name_taken_between_create_and_rename_leaves_the_link_unmarked_and_ours(
    kind: Kind,
) -> None:
    model = fresh(kind)
    initial = model.snapshot()
    ctx = context(kind, model)
    executor = kind.link(model)
    before = executor.capture(ctx)
    crash = CrashPoints(armed=CrashPoint("test", "op-1", "create", after_call(1, "create_link")))
    with pytest.raises(SimulatedCrash), crash.scope("test", "op-1", "create"):
        kind.link(CrashingKernel(model, crash)).apply(ctx, before)
    plant(model, kind.other_kind, "net0", None)  # someone takes the final name meanwhile
    with pytest.raises(FailedPrecondition):
        executor.apply(ctx, before)
    (left,) = [lk for lk in model.list_links(sandbox(model)) if lk.name == temp_name(ctx)]
    assert left.alias is None  # not marked: the rename would have come first
    assert executor.undo(ctx, before, None).outcome is UndoOutcome.UNDONE
    foreign = model.get_link(sandbox(model), name="net0")
    assert foreign is not None
    assert foreign.kind == kind.other_kind
    assert [d for d in diff(initial, model.snapshot()) if "net0" not in str(d)] == []
