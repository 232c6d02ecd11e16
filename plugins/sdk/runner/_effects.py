"""The effect executor contract (probe, capture, apply, undo) and its registry.

The framework cannot invent the inverse of a kernel action: every registered
effect kind brings its own observation, before-image, mutation and recovery.
The runner only sequences them and makes each boundary durable.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .._accept import compile_accept
from .._errors import RegistrationError
from .._plan import canonical_json, digest, thaw_json

if TYPE_CHECKING:  # jsonschema: imported to explain a refused payload (or judge a schema)
    import jsonschema

JSON = Any


class Observation(enum.StrEnum):
    """What probe sees of an effect's target right now."""

    ABSENT = "absent"  # nothing of ours there (never applied, or already undone)
    OURS = "ours"  # present, carrying our ownership evidence, as applied
    FOREIGN = "foreign"  # present but not ours: never adopt, never delete
    CHANGED = "changed"  # ours, but changed by someone else since capture


class UndoOutcome(enum.StrEnum):
    UNDONE = "undone"  # compensated and verified
    ABSENT = "absent"  # verified nothing of ours remains (it never got applied)
    QUARANTINED = "quarantined"  # ownership or state cannot be verified; left alone


@dataclass(frozen=True)
class UndoResult:
    outcome: UndoOutcome
    detail: str = ""


@dataclass(frozen=True)
class EffectContext:
    """Everything an executor may rely on for one effect of one recorded operation."""

    partition: str
    operation_id: str
    effect_id: str
    scope: str
    step: str
    payload: Mapping[str, JSON]
    inputs: Mapping[str, Mapping[str, JSON]] = field(default_factory=dict)

    @functools.cached_property  # a digest: computed once per context, not per link compared
    def marker(self) -> str:
        """Ownership evidence deterministic from the operation identity (stable across restarts).

        It starts with the scope's evidence prefix (``scope_evidence``), so a node-wide
        scan can attribute an object to a preparation or attachment with no journal record.
        """
        own = digest([self.partition, self.operation_id, self.effect_id])[7:23]
        return scope_evidence(self.partition, self.scope) + own


MARKER_PREFIX = "dranp:"
"""Every marker starts with this: nothing else on a node carries it."""


def scope_evidence(partition: str, scope: str) -> str:
    """The prefix of every marker one logical plugin leaves for one preparation or attachment."""
    return f"{MARKER_PREFIX}{digest([partition, scope])[7:15]}:"


EvidenceScan = Callable[[str], list[tuple[str, str]]]
"""``scan(prefix)``: every kernel object, anywhere on the node, whose ownership evidence
starts with ``prefix``, as ``(marker, description for a person)``. Raises when the node
cannot be scanned."""


class EffectExecutor(Protocol):
    """One versioned effect kind. All four behaviours must be idempotent."""

    kind: str
    payload_schema: Mapping[str, JSON]
    outputs: tuple[str, ...]

    def probe(
        self, ctx: EffectContext, before: JSON, outputs: Mapping[str, JSON] | None
    ) -> Observation:
        """Read-only classification of the target now."""
        ...

    def capture(self, ctx: EffectContext) -> JSON:
        """Read-only before-image of everything apply may change; refuse foreign targets here."""
        ...

    def apply(self, ctx: EffectContext, before: JSON) -> Mapping[str, JSON]:
        """Mutate or reconcile toward the recorded intent; return each output port's description."""
        ...

    def undo(
        self, ctx: EffectContext, before: JSON, outputs: Mapping[str, JSON] | None
    ) -> UndoResult:
        """Compensate from the before-image; verify absence or restoration."""
        ...


class PayloadCheck:
    """A kind's payload schema, compiled once: ``_accept``'s closures decide a payload
    where they vouch for the schema (jsonschema is imported only to explain a refusal),
    jsonschema's Draft 2020-12 validator otherwise (the schema checked against the
    metaschema first)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self._accept = compile_accept(schema, strict=False)
        self._validator: jsonschema.Draft202012Validator | None = None
        if self._accept is None:
            self._validator = self._checked()

    def _checked(self) -> jsonschema.Draft202012Validator:
        import jsonschema

        jsonschema.Draft202012Validator.check_schema(self.schema)
        return jsonschema.Draft202012Validator(self.schema)

    def problem(self, payload: Mapping[str, JSON]) -> str | None:
        """None if ``payload`` is valid, else jsonschema's best error."""
        document = dict(payload)
        if self._accept is not None and self._accept(document):
            return None
        if self._validator is None:
            self._validator = self._checked()  # a benign race: both build the same
        if self._validator.is_valid(document):
            return None
        import jsonschema

        error = jsonschema.exceptions.best_match(self._validator.iter_errors(document))
        if error is None:  # pragma: no cover - is_valid said there is one
            return "(payload): does not match the payload schema"
        where = "/".join(str(p) for p in error.absolute_path) or "(payload)"
        return f"{where}: {error.message}"


@functools.lru_cache(maxsize=256)
def _payload_check(schema_json: str) -> PayloadCheck:
    """Compiling a schema (and checking it against the metaschema) is costly; a schema's
    text decides it."""
    return PayloadCheck(json.loads(schema_json))


def _compiled(kind: str, executor: EffectExecutor) -> PayloadCheck:
    try:
        return _payload_check(canonical_json(thaw_json(executor.payload_schema)))
    except Exception as exc:
        import jsonschema

        if not isinstance(exc, jsonschema.SchemaError):
            raise
        raise RegistrationError(
            f"effect kind {kind!r}: invalid payload schema: {exc.message}"
        ) from exc


SharedReads = Callable[[], AbstractContextManager[None]]
"""``with shared_reads():`` the executors' kernel may answer a repeated read from the
first answer until the next mutation: recovery's probes (one dump per namespace), a
create hook (an apply's re-read of what its capture read) and a removal holding its
unit (an undo's re-read of what the undo before it read; ``plugins.kernel._snapshot``)."""


class EffectRegistry:
    """The executors a service is approved to run, by versioned kind."""

    def __init__(
        self,
        executors: Iterable[EffectExecutor],
        *,
        evidence: EvidenceScan | None = None,
        shared_reads: SharedReads | None = None,
        stuck_calls: Callable[[], int] | None = None,
    ) -> None:
        # Scans the node for ownership evidence (None: these executors leave none to scan).
        self.evidence = evidence
        # The kernel's count of calls stuck past their deadline, for the metrics (None:
        # its kernel keeps none, e.g. the fake kernel's client).
        self.stuck_calls = stuck_calls
        # None: the executors' reads are never shared (each probe asks the kernel).
        self._shared_reads = shared_reads
        self._executors: dict[str, EffectExecutor] = {}
        # Each kind's payload validator is compiled (and its schema checked against the
        # metaschema) when a plan first uses the kind: at start-up that was ~5 ms per
        # kind and the import of jsonschema, before the first socket served. A kind
        # whose schema is invalid fails every plan that uses it, naming the kind.
        self._validators: dict[str, PayloadCheck] = {}
        self._validators_lock = threading.Lock()
        for ex in executors:
            if ex.kind in self._executors:
                raise RegistrationError(f"effect kind {ex.kind!r} registered twice")
            self._executors[ex.kind] = ex

    def shared_reads(self) -> AbstractContextManager[None]:
        """A block in which the executors' kernel reads may be shared (recovery's probes)."""
        if self._shared_reads is None:
            return contextlib.nullcontext()
        return self._shared_reads()

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(self._executors)

    def get(self, kind: str) -> EffectExecutor | None:
        return self._executors.get(kind)

    def payload_validator(self, kind: str) -> PayloadCheck:
        """The kind's compiled payload schema; RegistrationError if it is no valid schema."""
        with self._validators_lock:
            validator = self._validators.get(kind)
            if validator is None:
                validator = self._validators[kind] = _compiled(kind, self._executors[kind])
            return validator

    def payload_problem(self, kind: str, payload: Mapping[str, JSON]) -> str | None:
        """None if ``payload`` is valid for the kind (as jsonschema decides), else its
        best error."""
        return self.payload_validator(kind).problem(payload)
