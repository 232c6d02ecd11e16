"""Checks made before anything is journaled: the envelope, the plan, the grants.

Pure functions of the request, the registration and the approved executors: a
refusal here writes nothing and touches no kernel.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .._descriptor import PortSpec
from .._errors import InvalidArgument, PlanError
from .._plan import CleanupPlan, Plan, PlannedEffect, thaw_json
from .._registry import Registration
from .._requests import ConnectRequest, PrepareRequest
from .._types import Hook, ResourceHandle
from ._effects import EffectRegistry
from ._semantic import Request


def check_envelope(request: Request, hook: Hook) -> None:
    env = request.envelope
    if env.hook is not hook:
        raise InvalidArgument(f"envelope.hook is {env.hook.value}, this call is {hook.value}")
    for name in ("operation_id", "scope", "step"):
        if not getattr(env, name):
            raise InvalidArgument(f"envelope.{name} is empty")
    if env.generation < 1:
        raise InvalidArgument("envelope.generation must be >= 1")


def check_cleanup_plan(plan: CleanupPlan, expected: Hook) -> CleanupPlan:
    if not isinstance(plan, CleanupPlan) or plan.target_hook is not expected:
        raise PlanError([f"cleanup must undo the recorded {expected.value} plan"])
    return plan


def export_ports(reg: Registration, hook: Hook) -> dict[str, PortSpec]:
    ports = (
        reg.descriptor.preparation.outputs if hook is Hook.NODE_PREPARE else reg.descriptor.outputs
    )
    return {p.name: p for p in ports}


def output_problem(declared: tuple[str, ...], result: Mapping[str, Any]) -> str:
    """Why an executor's outputs cannot be recorded ("" when they can)."""
    if set(result) != set(declared):
        return f"ports {sorted(result)} != declared {sorted(declared)}"
    for port, description in result.items():
        if not isinstance(description, dict):
            return f"port {port!r} description is not a JSON object"
    return ""


def validate_plan(
    reg: Registration,
    effects: EffectRegistry,
    hook: Hook,
    plan: Plan,
    request: PrepareRequest | ConnectRequest,
) -> None:
    """Every effect kind, payload, permission, export and grant, before the intent exists."""
    problems = []
    allowed = set(reg.descriptor.allowed_effects.get(hook.value, ()))
    for e in plan.effects:
        executor = effects.get(e.kind)
        if e.kind not in allowed:
            problems.append(f"effect {e.id!r}: kind {e.kind} is not allowed for {reg.name} {hook}")
        elif executor is None:
            problems.append(f"effect {e.id!r}: no executor for {e.kind}")
        else:
            if tuple(e.outputs) != tuple(executor.outputs):
                problems.append(
                    f"effect {e.id!r}: declares ports {list(e.outputs)}, "
                    f"{e.kind} has {list(executor.outputs)}"
                )
            payload_problem = effects.payload_problem(e.kind, thaw_json(e.payload))
            if payload_problem:
                problems.append(f"effect {e.id!r}: payload {payload_problem}")
    ports = export_ports(reg, hook)
    for port, refs in plan.exports.items():
        spec = ports.get(port)
        if spec is None:
            problems.append(f"export {port!r} is not a declared output of {reg.name} {hook}")
        elif not spec.min <= len(refs) <= spec.max:
            problems.append(
                f"export {port!r} has {len(refs)} references, contract says {spec.min}..{spec.max}"
            )
    for port, spec in ports.items():
        if spec.min > 0 and port not in plan.exports:
            problems.append(f"declared output {port!r} is not exported")
    if problems:
        raise PlanError(problems)
    if isinstance(request, ConnectRequest):
        check_grants(request, plan, allowed)


def check_grants(request: ConnectRequest, plan: Plan, allowed: set[str]) -> None:
    """Every grant names an input of this call; every consumed input is granted.

    An effect consumes an input when its payload refers to the input handle's id (the
    effect builders embed the handle, ``plugins.effects.handle_json``). Enforced here,
    once, so no plugin can forget it: without ``Grant(effect.kind, handle.id)`` the
    call is refused before anything is journaled.
    """
    inputs = {h.id: h for hs in request.inputs.values() for h in hs}
    for g in request.grants:
        if g.resource_id not in inputs or g.effect not in allowed:
            raise InvalidArgument(
                f"grant {g.effect} on {g.resource_id!r} names no input of this call"
            )
    granted = {(g.effect, g.resource_id) for g in request.grants}
    for e in plan.effects:
        for handle in consumed_inputs(e, inputs):
            if (e.kind, handle.id) not in granted:
                raise InvalidArgument(
                    f"effect {e.id!r} ({e.kind}) consumes input handle {handle.id!r} "
                    f"({handle.type}) without a grant for {e.kind}",
                    details={"effect": e.id, "kind": e.kind, "handle": handle.id},
                )


def consumed_inputs(
    effect: PlannedEffect, inputs: Mapping[str, ResourceHandle]
) -> list[ResourceHandle]:
    """The request input handles ``effect``'s payload refers to, in first-mention order."""
    seen: dict[str, ResourceHandle] = {}
    for text in _strings(thaw_json(effect.payload)):
        if text in inputs and text not in seen:
            seen[text] = inputs[text]
    return list(seen.values())


def _strings(value: Any) -> Iterator[str]:
    """Every string value in a JSON document (keys are field names, never references)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
