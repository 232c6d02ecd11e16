"""The read-only views: ``ops``, ``show OP`` and ``quarantine``, as JSON-ready values.

Pure functions of journal contents; rendering (tables or JSON) is ``_output``'s.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from plugins.sdk import CleanupStatus, EffectState, Hook, OperationState
from plugins.sdk.store import OperationRecord

from ._contents import Contents

JSON = Any

_CLEANUP_HOOKS = (Hook.REMOVE_NETWORK, Hook.NODE_UNPREPARE)
_OPEN_TARGET_STATES = {
    OperationState.QUARANTINED: CleanupStatus.QUARANTINED,
    OperationState.CLEANUP_PENDING: CleanupStatus.PENDING,
}
_SEVERITY = (CleanupStatus.CLEANED, CleanupStatus.PENDING, CleanupStatus.QUARANTINED)


def _json(text: str | None) -> JSON:
    return None if text is None else json.loads(text)


def _effects(contents: Contents, op: OperationRecord) -> list[dict[str, JSON]]:
    return [
        {"id": e.effect_id, "kind": e.kind, "state": e.state.value} for e in contents.effects_of(op)
    ]


def effects_summary(effects: Iterable[dict[str, JSON]]) -> str:
    """An ``ops`` row's effects counted by state, for a table cell (``1 Applied,1 Planned``)."""
    counts: dict[str, int] = {}
    for e in effects:
        counts[e["state"]] = counts.get(e["state"], 0) + 1
    return ",".join(f"{n} {state}" for state, n in counts.items())


def operation_rows(all_contents: Iterable[Contents]) -> list[dict[str, JSON]]:
    """``ops``: every operation of every journal, its effects by id, kind and state. Age is
    in operations recorded since (the journal keeps no wall-clock time: order is what it
    can vouch for)."""
    rows = []
    for contents in all_contents:
        last = contents.last_seq
        for op in contents.operations:
            rows.append(
                {
                    "service": contents.service.name,
                    "plugin": contents.plugin(op),
                    "scope": op.scope,
                    "step": op.step,
                    "operation": op.operation_id,
                    "hook": op.hook.value,
                    "state": op.state.value,
                    "cleanup": op.cleanup_status.value if op.cleanup_status else "",
                    "effects": _effects(contents, op),
                    "partition": op.partition,
                    "generation": op.generation,
                    "epoch": op.epoch,
                    "seq": op.seq,
                    "age": last - op.seq,
                }
            )
    return rows


def select_operations(
    rows: Sequence[dict[str, JSON]],
    *,
    services: Collection[str] = (),
    states: Collection[str] = (),
    scopes: Collection[str] = (),
    limit: int | None = None,
) -> list[dict[str, JSON]]:
    """``ops``' filters: a row passes when it matches one value of each filter given; then
    ``limit`` keeps the newest (smallest age, the first service's on a tie), in their order."""
    kept = [
        r
        for r in rows
        if (not services or r["service"] in services)
        and (not states or r["state"] in states)
        and (not scopes or r["scope"] in scopes)
    ]
    if limit is None:
        return kept
    newest = sorted(range(len(kept)), key=lambda i: (kept[i]["age"], i))[:limit]
    return [kept[i] for i in sorted(newest)]


def operation_details(all_contents: Iterable[Contents], operation_id: str) -> list[dict[str, JSON]]:
    """``show OP``: the operation's every record (one entry per partition that has it)."""
    found = []
    for contents in all_contents:
        for op in contents.operations:
            if op.operation_id != operation_id:
                continue
            found.append(
                {
                    "service": contents.service.name,
                    "plugin": contents.plugin(op),
                    "partition": op.partition,
                    "operation": op.operation_id,
                    "hook": op.hook.value,
                    "scope": op.scope,
                    "step": op.step,
                    "state": op.state.value,
                    "cleanup": op.cleanup_status.value if op.cleanup_status else "",
                    "targetOperation": op.target_operation_id,
                    "generation": op.generation,
                    "epoch": op.epoch,
                    "seq": op.seq,
                    "semanticDigest": op.semantic_digest,
                    "artifactDigest": op.artifact_digest,
                    "contractDigest": op.contract_digest,
                    "request": _json(op.request_json),
                    "plan": _json(op.plan_json),
                    "effects": [
                        {
                            "id": e.effect_id,
                            "position": e.position,
                            "kind": e.kind,
                            "state": e.state.value,
                            "attempts": e.attempts,
                            "detail": e.detail,
                            "beforeImage": _json(e.before_json),
                            "outputs": _json(e.outputs_json),
                        }
                        for e in contents.effects_of(op)
                    ],
                    "response": _json(op.response_json),
                    "error": _json(op.error_json),
                }
            )
    return found


def quarantine_rows(all_contents: Iterable[Contents]) -> list[dict[str, JSON]]:
    """``quarantine``: every unit (scope and step) whose cleanup is pending or quarantined.

    A unit is listed when an operation of it is ``Quarantined`` or ``CleanupPending``, or
    when its latest cleanup finished other than ``CLEANED`` (an unrecorded scope whose
    objects the node still holds is quarantined with no target of its own). The reason
    is what the journal says: each stuck effect's detail and the cleanup's own detail.
    """
    rows = []
    for contents in all_contents:
        units: dict[tuple[str, str, str], list[OperationRecord]] = {}
        for op in contents.operations:
            units.setdefault((op.partition, op.scope, op.step), []).append(op)
        for (_, scope, step), ops in units.items():
            status, operations, reasons = CleanupStatus.CLEANED, [], []
            for op in ops:
                stuck = _OPEN_TARGET_STATES.get(op.state)
                if stuck is not None:
                    status = max(status, stuck, key=_SEVERITY.index)
                    operations.append(op.operation_id)
                    reasons += [
                        f"{e.effect_id}: {e.detail or e.state.value}"
                        for e in contents.effects_of(op)
                        if e.state in (EffectState.QUARANTINED, EffectState.UNDOING)
                    ]
            cleanups = [op for op in ops if op.hook in _CLEANUP_HOOKS and op.cleanup_status]
            last = cleanups[-1] if cleanups else None
            if last is not None and last.cleanup_status is not CleanupStatus.CLEANED:
                assert last.cleanup_status is not None
                status = max(status, last.cleanup_status, key=_SEVERITY.index)
                operations.append(last.operation_id)
                detail = (_json(last.response_json) or {}).get("detail", "")
                if detail:
                    reasons.append(detail)
            if status is CleanupStatus.CLEANED:
                continue
            rows.append(
                {
                    "service": contents.service.name,
                    "plugin": contents.plugin(ops[0]),
                    "scope": scope,
                    "step": step,
                    "status": status.value,
                    "operations": operations,
                    "reason": "; ".join(reasons) or "no detail recorded",
                }
            )
    return rows
