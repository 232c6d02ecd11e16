"""MoveLink's kernel calls: the VF goes into the sandbox under its temporary name (v2: its
final name) with our marker as its alias in one ``move_link``, and home under its own
name with its own alias in one ``move_link``; the branches for a VF found elsewhere (in
the sandbox unmarked, home still marked) keep their separate ``set_link``."""

from __future__ import annotations

import errno

import pytest

from fakekernel.lab import load_lab
from fakekernel.model import FakeKernelModel, diff
from plugins.effects.linux import MoveLink, MoveLinkNamed, evidence_scan
from plugins.effects.linux._common import describe, ns_json, temp_name
from plugins.kernel import KernelError, Link, LinkChanges, LinkSpec
from plugins.kernel._crashing import CrashingKernel
from plugins.sdk import FailedPrecondition
from plugins.sdk.runner import (
    CrashPoint,
    CrashPoints,
    EffectContext,
    Phase,
    PhaseKind,
    SimulatedCrash,
    UndoOutcome,
)

from .node import LAB, VF0

PCI = VF0["pciAddress"]
HOME = "enp3s0f0v0"


def model_with(alias: str | None, *, up: bool = False) -> FakeKernelModel:
    model = load_lab(LAB)
    model.add_namespace("pod-a")
    vf = found(model)
    model.set_link(vf.ns, vf.ifindex, LinkChanges(alias=alias, up=up))
    return model


def found(model: FakeKernelModel) -> Link:
    link = model.find_device(PCI)
    assert link is not None
    return link


def context(model: FakeKernelModel) -> EffectContext:
    payload = {
        "link": {"description": describe(found(model), f"pci:{PCI}")},
        "to": ns_json(model.namespace("pod-a")),
    }
    return EffectContext("p/v1", "op-1", "move", "att-1", "step", payload)


def mutations(crash: CrashPoints) -> list[tuple[int, str]]:
    """The kernel calls that returned: (their number in the effect, the method)."""
    return [
        (p.phase.call, p.phase.boundary)
        for p in crash.reached
        if p.phase.kind is PhaseKind.AFTER_KERNEL_CALL
    ]


@pytest.mark.parametrize("alias", [None, "its own"])
def test_in_and_home_each_in_one_call_with_name_and_alias(alias: str | None) -> None:
    model = model_with(alias, up=True)
    initial = model.snapshot()
    ctx = context(model)
    crash = CrashPoints()
    executor = MoveLink(CrashingKernel(model, crash))
    with crash.scope("test", "op-1", "move"):
        before = executor.capture(ctx)
        outputs = executor.apply(ctx, before)
    assert mutations(crash) == [(1, "move_link")]  # the mark is no second call
    moved = found(model)
    assert (moved.ns, moved.name, moved.alias) == (
        model.namespace("pod-a"),
        temp_name(ctx),
        ctx.marker,
    )
    assert outputs["link"]["ifName"] == temp_name(ctx)

    crash = CrashPoints()
    executor = MoveLink(CrashingKernel(model, crash))
    with crash.scope("test", "op-1", "move"):
        result = executor.undo(ctx, before, outputs)
    assert result.outcome is UndoOutcome.UNDONE, result
    # home with its name and alias in one move; then up again, as it was before
    assert mutations(crash) == [(1, "move_link"), (2, "set_link")]
    assert diff(initial, model.snapshot()) == []
    assert executor.undo(ctx, before, outputs).outcome is UndoOutcome.ABSENT


@pytest.mark.parametrize("version", [1, 2], ids=["v1-temporary-name", "v2-final-name"])
def test_a_crash_right_after_the_move_leaves_the_vf_marked(version: int) -> None:
    """The evidence limit of docs/runner.md: a VF moved but not marked no longer happens
    for a crash of ours; the node-wide scan attributes the moved VF to its scope, under
    the name it was moved in with (v2: its final name)."""
    model = model_with(None)
    executor = MoveLink if version == 1 else MoveLinkNamed
    ctx = context(model) if version == 1 else named_context(model)
    before = executor(model).capture(ctx)
    moved = Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, 1, "move_link")
    crash = CrashPoints(armed=CrashPoint("test", "op-1", "move", moved))
    with pytest.raises(SimulatedCrash), crash.scope("test", "op-1", "move"):
        executor(CrashingKernel(model, crash)).apply(ctx, before)
    name = temp_name(ctx) if version == 1 else "net1"
    where = f"device {name} in {model.namespace('pod-a').path}"
    assert evidence_scan(model)(ctx.marker) == [(ctx.marker, where)]


def test_a_vf_in_the_sandbox_without_the_marker_is_marked_on_resume() -> None:
    """A service before the one-message move crashed between the move and the mark."""
    model = model_with("its own")
    ctx = context(model)
    executor = MoveLink(model)
    before = executor.capture(ctx)
    vf = found(model)
    model.move_link(vf.ns, vf.ifindex, model.namespace("pod-a"), new_name=temp_name(ctx))
    crash = CrashPoints()
    with crash.scope("test", "op-1", "move"):
        outputs = MoveLink(CrashingKernel(model, crash)).apply(ctx, before)
    assert mutations(crash) == [(1, "set_link")]
    assert (found(model).alias, outputs["link"]["ifName"]) == (ctx.marker, temp_name(ctx))


def test_a_vf_home_with_the_marker_gets_its_alias_and_name_back_by_set_link() -> None:
    """The sandbox died: the kernel sent the VF home (closed, under a free name) still
    carrying our marker."""
    model = model_with("its own", up=True)
    initial = model.snapshot()
    ctx = context(model)
    executor = MoveLink(model)
    before = executor.capture(ctx)
    outputs = executor.apply(ctx, before)
    model.create_link(model.host_namespace(), LinkSpec(kind="dummy", name=temp_name(ctx)))
    model.delete_namespace("pod-a")
    back = found(model)
    assert (back.ns, back.name, back.alias) == (
        model.host_namespace(),
        f"dev{back.ifindex}",
        ctx.marker,
    )
    crash = CrashPoints()
    with crash.scope("test", "op-1", "move"):
        result = MoveLink(CrashingKernel(model, crash)).undo(ctx, before, outputs)
    assert result.outcome is UndoOutcome.UNDONE, result
    assert mutations(crash) == [
        (1, "set_link"),  # the alias
        (2, "set_link"),  # the name
        (3, "set_link"),  # up
    ]
    dummy = model.get_link(model.host_namespace(), name=temp_name(ctx))
    assert dummy is not None
    model.delete_link(dummy.ns, dummy.ifindex)
    after = {**model.snapshot(), "namespaces": initial["namespaces"]}
    assert diff(initial, after) == []


def test_a_name_taken_at_home_leaves_the_vf_moved_and_still_marked() -> None:
    """do_setlink moves, then renames, then sets the alias: a taken home name stops it
    after the move, so the VF is home under its temporary name with our marker (the
    evidence stays until undo finishes); the retry after the name is free restores it."""
    model = model_with("its own")
    initial = model.snapshot()
    ctx = context(model)
    executor = MoveLink(model)
    before = executor.capture(ctx)
    outputs = executor.apply(ctx, before)
    squatter = model.create_link(model.host_namespace(), LinkSpec(kind="dummy", name=HOME))
    with pytest.raises(KernelError) as refused:
        executor.undo(ctx, before, outputs)
    assert refused.value.errno == errno.EEXIST
    left = found(model)
    assert (left.ns, left.name, left.alias) == (model.host_namespace(), temp_name(ctx), ctx.marker)
    model.delete_link(squatter.ns, squatter.ifindex)
    assert executor.undo(ctx, before, outputs).outcome is UndoOutcome.UNDONE
    assert diff(initial, model.snapshot()) == []


# -- linux/move-link/v2: in under the final name ------------------------------------------


def named_context(model: FakeKernelModel) -> EffectContext:
    ctx = context(model)
    payload = {**ctx.payload, "name": "net1"}
    return EffectContext("p/v1", "op-1", "move", "att-1", "step", payload)


def test_v2_moves_names_and_marks_in_one_call() -> None:
    model = model_with("its own", up=True)
    ctx = named_context(model)
    crash = CrashPoints()
    executor = MoveLinkNamed(CrashingKernel(model, crash))
    with crash.scope("test", "op-1", "move"):
        outputs = executor.apply(ctx, executor.capture(ctx))
    assert mutations(crash) == [(1, "move_link")]  # no rename after it
    moved = found(model)
    assert (moved.ns, moved.name, moved.alias) == (model.namespace("pod-a"), "net1", ctx.marker)
    assert outputs["link"]["ifName"] == "net1"


def test_v2_a_vf_moved_under_its_own_name_is_named_and_marked_on_resume() -> None:
    """The name was taken when the move came (the kernel moved the VF and refused the
    rename); once it is free, a retry names and marks the VF in one ``set_link``."""
    model = model_with("its own")
    ctx = named_context(model)
    executor = MoveLinkNamed(model)
    before = executor.capture(ctx)
    squatter = model.create_link(model.namespace("pod-a"), LinkSpec(kind="dummy", name="net1"))
    with pytest.raises(FailedPrecondition, match="net1 already exists"):
        executor.apply(ctx, before)
    assert (found(model).ns, found(model).name) == (model.namespace("pod-a"), HOME)
    model.delete_link(squatter.ns, squatter.ifindex)
    crash = CrashPoints()
    with crash.scope("test", "op-1", "move"):
        outputs = MoveLinkNamed(CrashingKernel(model, crash)).apply(ctx, before)
    assert mutations(crash) == [(1, "set_link")]
    assert (found(model).alias, outputs["link"]["ifName"]) == (ctx.marker, "net1")
