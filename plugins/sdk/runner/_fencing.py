"""Fencing and ordering: what the journal's scope record allows, and in-memory quiescing.

The durable checks are pure functions of the records read under the unit's lock
(and again inside the transaction that writes: the single writer is the true
serialization point). ``Quiescing`` is the in-memory half: it marks a unit a removal
is on its way through, from before it waits for the unit's lock until it is done, so
that work already running stops at its next effect boundary and new work is refused
while the removal's fence is not durable yet (it rides with the removal's first
commit, docs/runner.md, "The record sequence").
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from .._errors import Aborted, AlreadyExists, FailedPrecondition
from .._requests import OperationState
from .._types import Hook
from ..store import OperationRecord, Reader, ScopeRecord


def unit_key(scope: str, step: str) -> str:
    """What scope records, locks and fences are keyed by: one step of one prep/attachment.

    One attachment may use a logical plugin more than once (two VFs of a bond), so the
    step is part of the unit: removing vf1 must neither fence nor undo vf0.
    """
    return f"{scope}/{step}"


def check_fence(scope: ScopeRecord | None, name: str) -> None:
    if scope is not None and scope.fence_operation_id:
        raise Aborted(
            f"scope {name} was removed by {scope.fence_operation_id}; "
            "earlier work cannot start or replay"
        )


def check_generation(scope: ScopeRecord | None, generation: int, epoch: int, name: str) -> None:
    if scope is None:
        return
    if generation < scope.generation:
        raise Aborted(
            f"scope {name}: generation {generation} is older than accepted {scope.generation}"
        )
    if epoch < scope.epoch:
        raise Aborted(
            f"scope {name}: coordinator epoch {epoch} is older than accepted {scope.epoch}"
        )


def advance(
    scope: ScopeRecord | None, partition: str, name: str, generation: int, epoch: int
) -> ScopeRecord:
    """The scope record once a call of ``generation``/``epoch`` is accepted."""
    if scope is None:
        return ScopeRecord(
            partition=partition,
            scope=name,
            generation=generation,
            epoch=epoch,
            fence_operation_id="",
        )
    return dataclasses.replace(
        scope, generation=max(scope.generation, generation), epoch=max(scope.epoch, epoch)
    )


def fenced(scope: ScopeRecord, fence_operation_id: str) -> ScopeRecord:
    """A terminal fence: the first removal's id stays; a later one does not replace it."""
    return dataclasses.replace(
        scope, fence_operation_id=scope.fence_operation_id or fence_operation_id
    )


def check_same(existing: OperationRecord, hook: Hook, semantic: str) -> None:
    if existing.hook is not hook or existing.semantic_digest != semantic:
        raise AlreadyExists(
            f"operation id {existing.operation_id} was already used for a different request "
            f"({existing.hook.value}, {existing.semantic_digest[:19]}...)"
        )


def allocation_root(op: OperationRecord) -> str | None:
    root = (json.loads(op.request_json).get("allocation") or {}).get("root_id")
    return None if root is None else str(root)


def check_single_attachment(t: Reader, partition: str, root: str, attachment: str) -> None:
    """SinglePod: one allocation root realizes at most one attachment at a time."""
    active = set(OperationState) - {OperationState.CLEANED}
    # Filtered in SQL (on the single writer, once per attach): only this root's rows.
    for op in t.operations(
        partition,
        hook=Hook.CONNECT_NETWORK,
        states=active,
        allocation_root=root,
        not_scope=attachment,
    ):
        if op.scope != attachment and allocation_root(op) == root:
            raise FailedPrecondition(
                f"root {root} is still attached as {op.scope} ({op.state.value}); "
                "remove that attachment before connecting it again"
            )


class Quiescing:
    """Units a removal is on its way through: marked before it waits for the unit's lock.

    The removal's fence becomes durable only with its first commit, which it makes under
    the unit's lock. Until then the mark is the fence, while this process lives: work
    running on the unit stops at its next effect boundary (``is_removing``), and a create
    that takes the lock before the waiting removal is refused before it replays, resumes
    or plans, and again in its intent's transaction (``check``), exactly as a durable
    fence would refuse it. Once the fence is durable the mark only repeats it. A crash
    loses the mark with everything the removal had not committed: nothing, in the kernel
    (docs/runner.md, "The record sequence").

    A mark lives exactly as long as a removal is on its way through the unit (counted:
    two removals of one unit may overlap), so the set stays as small as the removals in
    flight.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._removals: Counter[tuple[str, str]] = Counter()

    @contextmanager
    def removing(self, partition: str, unit: str) -> Iterator[None]:
        key = (partition, unit)
        with self._lock:
            self._removals[key] += 1
        try:
            yield
        finally:
            with self._lock:
                self._removals[key] -= 1
                if not self._removals[key]:
                    del self._removals[key]

    def is_removing(self, partition: str, unit: str) -> bool:
        with self._lock:
            return (partition, unit) in self._removals

    def check(self, partition: str, unit: str, name: str) -> None:
        """``check_fence`` for a fence on its way: refuse work a waiting removal would undo."""
        with self._lock:
            removing = (partition, unit) in self._removals
        if removing:
            raise Aborted(
                f"scope {name} is being removed (the removal waits for its lock); "
                "earlier work cannot start or replay"
            )

    def __len__(self) -> int:
        with self._lock:
            return len(self._removals)
