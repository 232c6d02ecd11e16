"""SetLinkUp's undo on the fake kernel: a link this scope created is left up for the
create's undo to delete (no kernel call: taking it down first costs the kernel a second
RCU grace period); any other link is brought down, as the before-image says."""

from __future__ import annotations

from typing import Any

import pytest

from fakekernel.lab import load_lab
from fakekernel.model import FakeKernelModel, diff
from plugins.effects.linux import CreateSharedChild, SetLinkUp
from plugins.effects.linux._common import describe, ns_json
from plugins.kernel import CrashingKernel, LinkChanges, LinkSpec, NsRef
from plugins.sdk.runner import CrashPoints, EffectContext, UndoOutcome

from .node import LAB

SCOPE, PARTITION = "att-1", "macvlan/v1alpha1"


def sandbox(m: FakeKernelModel) -> NsRef:
    return next(ns for ns in m.namespaces() if ns.path.endswith("/pod-a"))


def fresh() -> FakeKernelModel:
    model = load_lab(LAB)
    model.add_namespace("pod-a")
    return model


def context(effect: str, payload: dict[str, Any], inputs: dict[str, Any]) -> EffectContext:
    return EffectContext(PARTITION, "op-1", effect, SCOPE, "step", payload, inputs)


def created_child(m: FakeKernelModel) -> dict[str, Any]:
    """A macvlan child created by this scope's plan: its description, as the plan's output."""
    host = m.host_namespace()
    parent = m.get_link(host, name="enp3s0f2")
    assert parent is not None
    payload = {
        "parent": {
            "id": "p",
            "type": "SharedParent/v1",
            "description": describe(parent, "link:enp3s0f2"),
        },
        "namespace": ns_json(sandbox(m)),
        "name": "net1",
        "kind": "macvlan",
        "mode": "bridge",
        "mtu": 1500,
    }
    create = CreateSharedChild(m)
    ctx = context("create-child", payload, {})
    return dict(create.apply(ctx, create.capture(ctx))["interface"])


def brought_up(m: FakeKernelModel, link: dict[str, Any]) -> tuple[SetLinkUp, EffectContext, Any]:
    up = SetLinkUp(m)
    ctx = context("activate-child", {}, {"link": link})
    before = up.capture(ctx)
    up.apply(ctx, before)
    return up, ctx, before


def test_a_link_this_scope_created_is_left_up_for_its_delete_with_no_kernel_call() -> None:
    model = fresh()
    child = created_child(model)
    _, ctx, before = brought_up(model, child)
    crash = CrashPoints()
    snapshot = model.snapshot()
    with crash.scope("test", "op-1", "undo"):
        result = SetLinkUp(CrashingKernel(model, crash)).undo(ctx, before, {})
    assert result.outcome is UndoOutcome.UNDONE
    assert "deletes it next" in result.detail
    assert crash.reached == []  # not even a read
    assert diff(snapshot, model.snapshot()) == []


@pytest.mark.parametrize(
    "marker",
    [None, "dranp:00000000:another-scope"],
    ids=["unmarked", "marked by another scope"],
)
def test_a_link_this_scope_did_not_create_is_brought_down(marker: str | None) -> None:
    model = fresh()
    link = model.create_link(sandbox(model), LinkSpec(kind="dummy", name="net1", alias=marker))
    description = describe(link, "link:net1") | ({"marker": marker} if marker else {})
    up, ctx, before = brought_up(model, description)
    assert before == {"up": False}
    assert up.undo(ctx, before, {}).outcome is UndoOutcome.UNDONE
    after = model.get_link(sandbox(model), ifindex=link.ifindex)
    assert after is not None
    assert not after.up


def test_a_link_that_was_up_before_is_left_up() -> None:
    model = fresh()
    link = model.create_link(sandbox(model), LinkSpec(kind="dummy", name="net1"))
    model.set_link(sandbox(model), link.ifindex, LinkChanges(up=True))
    up, ctx, before = brought_up(model, describe(link, "link:net1"))
    assert before == {"up": True}
    assert up.undo(ctx, before, {}).outcome is UndoOutcome.ABSENT
    after = model.get_link(sandbox(model), ifindex=link.ifindex)
    assert after is not None
    assert after.up
