"""The journal's records: immutable values, updated with ``dataclasses.replace``."""

from __future__ import annotations

from dataclasses import dataclass

from .._requests import CleanupStatus, EffectState, OperationState
from .._types import Hook

NONTERMINAL_STATES: frozenset[OperationState] = frozenset(
    {OperationState.RUNNING, OperationState.FAILED, OperationState.CLEANUP_PENDING}
)
"""Operation states recovery must look at after a restart."""


@dataclass(frozen=True, kw_only=True)
class ScopeRecord:
    """Highest accepted generation and epoch of one preparation/attachment scope.

    ``fence_operation_id`` is the cleanup operation that terminally fenced the
    scope; ``""`` means the scope is not fenced.
    """

    partition: str
    scope: str
    generation: int
    epoch: int
    fence_operation_id: str = ""

    @property
    def fenced(self) -> bool:
        return self.fence_operation_id != ""


@dataclass(frozen=True, kw_only=True)
class OperationRecord:
    """One operation identity in one partition, with its plan and replayable result.

    ``hook``, ``scope``, ``step`` and ``semantic_digest`` are its identity and
    cannot be changed by ``Txn.update_operation``. ``seq`` is assigned by
    ``Txn.insert_operation`` (monotonic insertion order); the value passed in is
    ignored.
    """

    partition: str
    operation_id: str
    hook: Hook
    scope: str
    step: str
    semantic_digest: str
    artifact_digest: str
    contract_digest: str
    generation: int
    epoch: int
    request_json: str
    state: OperationState = OperationState.RUNNING
    plan_json: str | None = None
    response_json: str | None = None
    error_json: str | None = None
    target_operation_id: str = ""
    cleanup_status: CleanupStatus | None = None
    seq: int = 0

    @property
    def terminal(self) -> bool:
        return self.state not in NONTERMINAL_STATES


@dataclass(frozen=True, kw_only=True)
class EffectRecord:
    """Durable progress of one effect of an operation's plan.

    ``position`` orders effects within the operation (apply order; undo runs in
    reverse). ``kind`` and ``position`` cannot be changed by ``Txn.update_effect``.
    """

    partition: str
    operation_id: str
    effect_id: str
    position: int
    kind: str
    state: EffectState = EffectState.PLANNED
    before_json: str | None = None
    outputs_json: str | None = None
    detail: str = ""
    attempts: int = 0
