"""``reconcile``: kernel objects carrying our ownership evidence against the journals.

Evidence is what the owned-link kit leaves (``plugins.effects.linux``): a link's alias
is its effect's marker (``dranp:<scope>:<effect>``), and before it is marked it carries
the temporary name derived from that marker. Every recorded effect's marker and
temporary name are computed from its identity, so each object found is one of:

* **leak**: recorded by an operation that did not finish and that nobody is cleaning:
  ``Failed`` or ``CleanupPending``, or ``Running`` in a journal whose service is down
  (a running service recovered at start, so its ``Running`` operations are in flight
  and are not leaks). ``--apply`` undoes them through the runner.
* **orphan**: a marker no journal of this node records. Nothing says what it replaced,
  so it is listed for an operator and never touched.
* **drift**: the journal and the node disagree otherwise: an object the journal says
  was undone or quarantined is still there, or one a succeeded operation created is
  not. Listed, never touched.

The findings' digest (SHA-256 of their canonical JSON) is the dry-run's receipt:
``--apply`` recomputes the findings and refuses unless the digest is the same.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from plugins.effects.linux import temp_name
from plugins.kernel import Kernel, NsRef, open_kernel
from plugins.sdk import EffectState, Hook, NetworkPluginError, OperationState
from plugins.sdk.runner import EffectContext
from plugins.sdk.store import EffectRecord, OperationRecord

from ._contents import Contents
from ._errors import CtlError, Exit

T = TypeVar("T")
MARKER_PREFIX = "dranp:"
LEAK, ORPHAN, DRIFT = "leak", "orphan", "drift"
_CATEGORY_ORDER = (LEAK, ORPHAN, DRIFT)
_UNFINISHED = (OperationState.FAILED, OperationState.CLEANUP_PENDING)
_CLEANUP_OF = {Hook.CONNECT_NETWORK: Hook.REMOVE_NETWORK, Hook.NODE_PREPARE: Hook.NODE_UNPREPARE}


@dataclass(frozen=True)
class KernelObject:
    """A link that may carry our evidence, where it is now."""

    namespace: str
    name: str
    kind: str
    ifindex: int
    alias: str

    def describe(self) -> str:
        return f"{self.kind} {self.name} (ifindex {self.ifindex}) in {self.namespace}"


@dataclass(frozen=True)
class Recorded:
    """One recorded effect, with the evidence its object would carry."""

    contents: Contents
    op: OperationRecord
    effect: EffectRecord
    marker: str
    temp_name: str

    @property
    def expects_object(self) -> bool:
        """A succeeded create whose recorded outputs name the marked object it made."""
        return (
            self.op.state is OperationState.SUCCEEDED
            and self.effect.state is EffectState.APPLIED
            and self.marker in (self.effect.outputs_json or "")
        )


@dataclass(frozen=True)
class Finding:
    """One row of the reconcile table (``category``: leak, orphan or drift)."""

    category: str
    service: str
    plugin: str
    partition: str
    scope: str
    step: str
    operation: str
    hook: str
    effect: str
    state: str  # the journal's word: "<operation state>/<effect state>", or "-"
    object: str
    marker: str
    why: str
    action: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def recorded_effects(all_contents: Iterable[Contents]) -> list[Recorded]:
    found = []
    for contents in all_contents:
        for op in contents.operations:
            for effect in contents.effects_of(op):
                ctx = EffectContext(
                    op.partition, op.operation_id, effect.effect_id, op.scope, op.step, {}
                )
                found.append(Recorded(contents, op, effect, ctx.marker, temp_name(ctx)))
    return found


def scan(kernel: Kernel, temp_names: set[str]) -> list[KernelObject]:
    """Every link on the node with our marker as its alias, or a recorded temporary name."""
    found = []
    for ns in kernel.list_namespaces():
        for link in kernel.list_links(ns):
            alias = link.alias or ""
            if alias.startswith(MARKER_PREFIX) or link.name in temp_names:
                found.append(KernelObject(_where(ns), link.name, link.kind, link.ifindex, alias))
    return found


def _where(ns: NsRef) -> str:
    return ns.path or f"namespace {ns.device}:{ns.inode}"


def _finding(category: str, rec: Recorded, obj: str, why: str, action: str) -> Finding:
    return Finding(
        category=category,
        service=rec.contents.service.name,
        plugin=rec.contents.plugin(rec.op),
        partition=rec.op.partition,
        scope=rec.op.scope,
        step=rec.op.step,
        operation=rec.op.operation_id,
        hook=rec.op.hook.value,
        effect=rec.effect.effect_id,
        state=f"{rec.op.state.value}/{rec.effect.state.value}",
        object=obj,
        marker=rec.marker,
        why=why,
        action=action,
    )


def _is_leak(rec: Recorded) -> bool:
    if rec.effect.state in (EffectState.UNDONE, EffectState.QUARANTINED):
        return False
    if rec.op.state in _UNFINISHED:
        return True
    return rec.op.state is OperationState.RUNNING and not rec.contents.live


def _classify(rec: Recorded, obj: KernelObject) -> Finding | None:
    where = obj.describe()
    if _is_leak(rec):
        cleanup = _CLEANUP_OF.get(rec.op.hook)
        action = f"{cleanup.value} {rec.op.scope}" if cleanup else "none: not a create"
        return _finding(LEAK, rec, where, "its operation did not finish", action)
    if rec.effect.state is EffectState.QUARANTINED:
        why = f"quarantined: {rec.effect.detail}" if rec.effect.detail else "quarantined"
        return _finding(DRIFT, rec, where, why, "none: left for an operator")
    if rec.effect.state is EffectState.UNDONE or rec.op.state is OperationState.CLEANED:
        return _finding(DRIFT, rec, where, "recorded undone, still on the node", "none")
    return None  # in use (succeeded) or in flight in a running service


def findings(all_contents: Sequence[Contents], kernel: Kernel) -> list[Finding]:
    """Leaks, orphans and drift on the node, in a stable order."""
    records = recorded_effects(all_contents)
    by_marker = {r.marker: r for r in records}
    by_name = {r.temp_name: r for r in records}
    result: list[Finding] = []
    seen: set[str] = set()
    for obj in scan(kernel, set(by_name)):
        rec = by_marker.get(obj.alias) or by_name.get(obj.name)
        if rec is None:
            if obj.alias.startswith(MARKER_PREFIX):
                result.append(_orphan(obj))
            continue
        seen.add(rec.marker)
        finding = _classify(rec, obj)
        if finding is not None:
            result.append(finding)
    for rec in records:
        if rec.expects_object and rec.marker not in seen:
            result.append(_finding(DRIFT, rec, "-", "recorded applied, not on the node", "none"))
    return sorted(result, key=_order)


def _orphan(obj: KernelObject) -> Finding:
    return Finding(
        category=ORPHAN,
        service="-",
        plugin="-",
        partition="",
        scope="-",
        step="",
        operation="-",
        hook="",
        effect="-",
        state="-",
        object=obj.describe(),
        marker=obj.alias,
        why="no journal of this node records its marker",
        action="none: left for an operator",
    )


def _order(f: Finding) -> tuple[Any, ...]:
    return (_CATEGORY_ORDER.index(f.category), f.service, f.scope, f.operation, f.effect, f.object)


def digest(found: Sequence[Finding]) -> str:
    """The dry-run's receipt: the same findings give the same digest, any change another."""
    body = json.dumps([f.to_json() for f in found], sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def with_kernel(url: str, fn: Callable[[Kernel], T]) -> T:
    """Run ``fn`` on the node's kernel, named by a service config's ``kernel`` URL."""
    try:
        kernel = open_kernel(url)
    except NetworkPluginError as exc:
        raise CtlError(Exit.USAGE, exc.message) from None
    except OSError as exc:
        raise CtlError(
            Exit.UNREACHABLE, f"kernel {url}: {exc}", subject=f"kernel {url}: "
        ) from None
    try:
        return fn(kernel)
    except OSError as exc:
        raise CtlError(
            Exit.UNREACHABLE, f"kernel {url}: {exc}", subject=f"kernel {url}: "
        ) from None
    finally:
        close = getattr(kernel, "close", None)
        if callable(close):
            close()
