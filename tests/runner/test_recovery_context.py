"""Recovery reads an uncertain effect's context straight from the recorded plan's JSON.

``recorded_context`` must give exactly what ``effect_context`` gives from the rebuilt,
re-validated ``Plan`` (payload and the inputs recorded outputs fill), for every effect
of a recorded operation: recovery's probes see what a resume or a cleanup sees.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plugins.sdk import Hook, Plan
from plugins.sdk.runner._context import effect_context, recorded_context, recorded_outputs

from . import node as n
from .node import ToyNode


def test_recorded_context_is_the_plans_context(tmp_path: Path) -> None:
    toy = ToyNode(tmp_path)
    try:
        toy.endpoint.connect_network(n.connect())
        assert toy.store is not None
        op, records = toy.store.read(
            lambda r: next(
                (o, r.effects(o.partition, o.operation_id))
                for o in r.operations("toy/v1alpha1", hook=Hook.CONNECT_NETWORK)
            )
        )
    finally:
        toy.close()
    assert op.plan_json is not None
    data = json.loads(op.plan_json)
    plan = Plan.from_json(data)
    outputs = recorded_outputs(records)
    assert len(plan.effects) > 1
    for partial in ({}, outputs):  # before any output was recorded, and after all were
        for effect in plan.effects:
            expected = effect_context(op, plan, effect.id, partial)
            assert recorded_context(op, data, effect.id, partial) == expected
    assert any(effect_context(op, plan, e.id, outputs).inputs for e in plan.effects)
    with pytest.raises(KeyError):
        recorded_context(op, data, "no-such-effect", outputs)
