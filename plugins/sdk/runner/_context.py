"""What an executor is handed for one recorded effect, rebuilt from the journal alone."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from .._plan import OutputRef, Plan, thaw_json
from ..store import EffectRecord, OperationRecord
from ._effects import EffectContext


def load_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def recorded_outputs(records: Iterable[EffectRecord]) -> dict[str, Mapping[str, Any]]:
    """The outputs of every applied effect, by effect id."""
    return {r.effect_id: json.loads(r.outputs_json) for r in records if r.outputs_json}


def effect_context(
    op: OperationRecord, plan: Plan, effect_id: str, outputs: Mapping[str, Mapping[str, Any]]
) -> EffectContext:
    planned = plan.effect(effect_id)
    inputs = {
        name: outputs[ref.effect_id][ref.port]
        for name, ref in planned.inputs.items()
        if ref.effect_id in outputs and ref.port in outputs[ref.effect_id]
    }
    return EffectContext(
        op.partition,
        op.operation_id,
        effect_id,
        op.scope,
        op.step,
        thaw_json(planned.payload),
        inputs,
    )


def recorded_context(
    op: OperationRecord,
    plan: Mapping[str, Any],
    effect_id: str,
    outputs: Mapping[str, Mapping[str, Any]],
) -> EffectContext:
    """``effect_context`` read straight from a recorded plan's JSON (``op.plan_json``).

    The same context (payload, the inputs recorded outputs can fill) without rebuilding
    and re-validating the whole ``Plan``: recovery probes one uncertain effect per
    operation, and a thousand plan rebuilds were a third of its time. The plan's row
    passed its checksum; the plan itself was validated when it was recorded, and is
    again when a cleanup undoes it. KeyError if the plan has no such effect.
    """
    for entry in plan["effects"]:
        if entry["id"] != effect_id:
            continue
        inputs = {}
        for name, text in entry["inputs"].items():
            ref = OutputRef.parse(text)
            if ref.effect_id in outputs and ref.port in outputs[ref.effect_id]:
                inputs[name] = outputs[ref.effect_id][ref.port]
        return EffectContext(
            op.partition, op.operation_id, effect_id, op.scope, op.step, entry["payload"], inputs
        )
    raise KeyError(effect_id)
