"""Serializable plans: what a handler asks the runner to do, with no side effects.

A plan is pure data (canonical JSON with a content digest). Builders record
problems instead of raising so handler code reads linearly; ``build()`` reports
all of them at once and nothing is recorded or executed for an invalid plan.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from ._errors import PlanError
from ._types import Hook

JSON = Any  # Checked at runtime by _check_pure_json: only JSON types get into a plan.

_ID = re.compile(r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$")
_KIND = re.compile(r"^[a-z0-9-]+(/[a-z0-9-]+)+/v[0-9]+(alpha[0-9]+|beta[0-9]+)?$")
_PORT = re.compile(r"^[a-z][a-z0-9-]{0,31}$")


# What json.dumps(value, sort_keys=True, ...) builds on every call, built once: the same
# encoding, and a quarter of the cost of the runner's many small records and digests.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def _make_c_encoder() -> Callable[[JSON], str] | None:
    """``_CANONICAL.encode`` without its Python around the C encoder (``iterencode``'s float
    closure and checks, ~2 us of 3-6 per call; the runner encodes every capture, result
    and response): the same private constructor with the same arguments, and its own
    circular-reference markers per call, so the same bytes and the same errors.

    ``c_make_encoder`` is private to the json module: an interpreter without it, whose
    constructor takes other arguments, or that encodes a probe differently gets None and
    the plain path, since a digest that differed would call recorded plans altered."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None

    def encode(value: JSON) -> str:
        encoder = make(
            {}, _CANONICAL.default, json.encoder.encode_basestring, None, ":", ",",
            True, False, False,
        )  # fmt: skip
        return "".join(encoder(value, 0))

    probe: JSON = {"z": [1.5, -0.0, 2**70, True, None], "a": {'\u00fc\n"': ""}, "m": [{}, []]}
    try:
        # Against the json module's pure-Python encoder (iterencode, not one-shot).
        if encode(probe) == "".join(_CANONICAL.iterencode(probe)):
            return encode
    except Exception:  # another interpreter's private signature: the plain path
        pass
    return None


_C_ENCODE: Final = _make_c_encoder()


def canonical_json(value: JSON) -> str:
    """The one serialization used for digests: sorted keys, no whitespace, UTF-8."""
    if _C_ENCODE is None or isinstance(value, str):
        return _CANONICAL.encode(value)
    return _C_ENCODE(value)


def digest(value: JSON) -> str:
    return text_digest(canonical_json(value))


def text_digest(canonical: str) -> str:
    """``digest`` of a value whose ``canonical_json`` is ``canonical`` (already serialised)."""
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _check_pure_json(value: object, where: str, problems: list[str]) -> None:
    """Reject anything live (closures, sockets, descriptors, objects) or non-finite."""
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            problems.append(f"{where}: non-finite number")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_pure_json(item, f"{where}[{i}]", problems)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                problems.append(f"{where}: non-string key {key!r}")
                continue
            _check_pure_json(item, f"{where}.{key}", problems)
        return
    problems.append(f"{where}: {type(value).__name__} is not plain JSON data")


@dataclass(frozen=True)
class OutputRef:
    """A named port of an earlier effect in the same plan, e.g. ``create-bond/interface``."""

    effect_id: str
    port: str

    def __str__(self) -> str:
        return f"{self.effect_id}/{self.port}"

    @classmethod
    def parse(cls, text: str) -> OutputRef:
        effect_id, sep, port = text.rpartition("/")
        if not sep or not effect_id or not port:
            raise ValueError(f"output reference {text!r} is not EFFECT/PORT")
        return cls(effect_id, port)


@dataclass(frozen=True)
class EffectSpec:
    """A typed description of one effect; builders create these, nothing executes them here.

    ``inputs`` names the earlier outputs this effect consumes; ``outputs`` declares
    the ports it will produce, so later references can be checked before execution.
    """

    kind: str
    payload: Mapping[str, JSON] = field(default_factory=dict)
    inputs: Mapping[str, OutputRef] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "payload", MappingProxyType(dict(self.payload)))
        object.__setattr__(self, "inputs", MappingProxyType(dict(self.inputs)))
        object.__setattr__(self, "outputs", tuple(self.outputs))


@dataclass(frozen=True)
class Subplan:
    """A versioned sequence of effects built by one convenience builder (e.g. PrepareVF).

    Each step becomes its own plan effect ``<id>.<suffix>`` with its own durable
    boundary; ``outputs`` maps the subplan's public ports to a step's port.
    Inputs that reference ``.<suffix>/<port>`` point at an earlier step of the subplan.
    """

    steps: tuple[tuple[str, EffectSpec], ...]
    outputs: Mapping[str, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class PlannedEffect:
    id: str
    kind: str
    payload: Mapping[str, JSON]
    inputs: Mapping[str, OutputRef]
    outputs: tuple[str, ...]

    def to_json(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "kind": self.kind,
            "payload": thaw_json(self.payload),
            "inputs": {name: str(ref) for name, ref in self.inputs.items()},
            "outputs": list(self.outputs),
        }


_SCALARS = frozenset({str, int, float, bool, type(None)})
_MAPPINGS = frozenset({dict, MappingProxyType})  # what payloads are made of
_SEQUENCES = frozenset({list, tuple})


def thaw_json(value: JSON) -> JSON:
    kind = type(value)
    if kind in _SCALARS:  # most leaves: skips the ABCs' isinstance below
        return value
    if kind in _MAPPINGS:  # dicts and frozen payloads, without the ABC's isinstance
        return {k: thaw_json(v) for k, v in value.items()}
    if kind in _SEQUENCES:
        return [thaw_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: thaw_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw_json(v) for v in value]
    return value


@dataclass(frozen=True)
class Plan:
    """An ordered, validated list of effects and the outputs the hook exports."""

    effects: tuple[PlannedEffect, ...]
    exports: Mapping[str, tuple[OutputRef, ...]]

    def to_json(self) -> dict[str, JSON]:
        return {
            "effects": [e.to_json() for e in self.effects],
            "exports": {port: [str(r) for r in refs] for port, refs in self.exports.items()},
        }

    def canonical(self) -> str:
        return canonical_json(self.to_json())

    def digest(self) -> str:
        return digest(self.to_json())

    def effect(self, effect_id: str) -> PlannedEffect:
        for e in self.effects:
            if e.id == effect_id:
                return e
        raise KeyError(effect_id)

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> Plan:
        """Rebuild a recorded plan and re-run every validation on it."""
        builder = PlanBuilder()
        for e in data["effects"]:
            builder.add(
                e["id"],
                EffectSpec(
                    kind=e["kind"],
                    payload=e["payload"],
                    inputs={n: OutputRef.parse(r) for n, r in e["inputs"].items()},
                    outputs=tuple(e["outputs"]),
                ),
            )
        for port, refs in data["exports"].items():
            for ref in refs:
                builder.export(port, OutputRef.parse(ref))
        return builder.build()


@dataclass(frozen=True)
class EffectRef:
    """Returned by ``PlanBuilder.add``; names the effect's ports for later effects."""

    effect_id: str
    ports: Mapping[str, OutputRef]

    def output(self, port: str) -> OutputRef:
        # An unknown port yields a reference that build() reports, keeping handlers linear.
        return self.ports.get(port, OutputRef(self.effect_id, port))


@dataclass(frozen=True)
class CleanupPlan:
    """A cleanup hook's plan: undo the recorded plan of the target hook, never current config."""

    target_hook: Hook
    target_operation_id: str = ""

    def to_json(self) -> dict[str, JSON]:
        return {"targetHook": str(self.target_hook), "targetOperationId": self.target_operation_id}


class PlanBuilder:
    """Accumulates effects and exports; ``build()`` validates everything at once."""

    def __init__(self) -> None:
        self._effects: list[PlannedEffect] = []
        self._declared: dict[str, tuple[str, ...]] = {}
        self._exports: dict[str, list[OutputRef]] = {}
        self._problems: list[str] = []

    def add(self, effect_id: str, spec: EffectSpec | Subplan) -> EffectRef:
        if isinstance(spec, Subplan):
            return self._add_subplan(effect_id, spec)
        self._add_one(effect_id, spec)
        return EffectRef(effect_id, {p: OutputRef(effect_id, p) for p in spec.outputs})

    def add_indexed(self, prefix: str, index: int, spec: EffectSpec | Subplan) -> EffectRef:
        """Add ``<prefix>-<index>``, e.g. ``attach-member-0``."""
        if index < 0:
            self._problems.append(f"effect {prefix!r}: negative index {index}")
        return self.add(f"{prefix}-{index}", spec)

    def export(self, port: str, ref: OutputRef) -> None:
        if not _PORT.match(port):
            self._problems.append(f"export {port!r}: invalid port name")
        self._check_ref(ref, f"export {port!r}")
        self._exports.setdefault(port, []).append(ref)

    def build(self) -> Plan:
        problems = list(self._problems)
        if not self._effects:
            problems.append("plan has no effects")
        if problems:
            raise PlanError(problems)
        return Plan(
            effects=tuple(self._effects),
            exports=MappingProxyType({p: tuple(r) for p, r in self._exports.items()}),
        )

    def _add_one(self, effect_id: str, spec: EffectSpec) -> None:
        where = f"effect {effect_id!r}"
        problems = self._problems
        if not isinstance(spec, EffectSpec):
            problems.append(f"{where}: not an EffectSpec ({type(spec).__name__})")
            return
        if not _effect_id_ok(effect_id):
            problems.append(f"{where}: invalid effect id")
        if effect_id in self._declared:
            problems.append(f"{where}: duplicate effect id")
            return
        if not _KIND.match(spec.kind):
            problems.append(f"{where}: invalid effect kind {spec.kind!r}")
        _check_pure_json(dict(spec.payload), f"{where} payload", problems)
        for name, ref in spec.inputs.items():
            if not _PORT.match(name):
                problems.append(f"{where}: invalid input name {name!r}")
            self._check_ref(ref, f"{where} input {name!r}")
        if len(set(spec.outputs)) != len(spec.outputs):
            problems.append(f"{where}: duplicate output port")
        for port in spec.outputs:
            if not _PORT.match(port):
                problems.append(f"{where}: invalid output port {port!r}")
        self._declared[effect_id] = spec.outputs
        self._effects.append(
            PlannedEffect(effect_id, spec.kind, spec.payload, spec.inputs, spec.outputs)
        )

    def _add_subplan(self, effect_id: str, sub: Subplan) -> EffectRef:
        if not sub.steps:
            self._problems.append(f"effect {effect_id!r}: empty subplan")
        for suffix, spec in sub.steps:
            inputs = {
                name: OutputRef(f"{effect_id}{ref.effect_id}", ref.port)
                if ref.effect_id.startswith(".")
                else ref
                for name, ref in spec.inputs.items()
            }
            self._add_one(
                f"{effect_id}.{suffix}",
                EffectSpec(spec.kind, spec.payload, inputs, spec.outputs),
            )
        ports = {}
        for port, (suffix, step_port) in sub.outputs.items():
            ref = OutputRef(f"{effect_id}.{suffix}", step_port)
            self._check_ref(ref, f"subplan {effect_id!r} output {port!r}")
            ports[port] = ref
        return EffectRef(effect_id, ports)

    def _check_ref(self, ref: OutputRef, where: str) -> None:
        if not isinstance(ref, OutputRef):
            self._problems.append(f"{where}: not an OutputRef ({type(ref).__name__})")
            return
        declared = self._declared.get(ref.effect_id)
        if declared is None:
            self._problems.append(f"{where}: {ref} does not name an earlier effect")
        elif ref.port not in declared:
            self._problems.append(
                f"{where}: effect {ref.effect_id!r} declares no port {ref.port!r}"
            )


def _effect_id_ok(effect_id: str) -> bool:
    # Subplan steps are "<id>.<suffix>"; each dotted segment follows the id grammar.
    return isinstance(effect_id, str) and all(_ID.match(s) for s in effect_id.split("."))


def new_plan() -> PlanBuilder:
    return PlanBuilder()


def effect(
    kind: str,
    payload: Mapping[str, JSON] | None = None,
    *,
    inputs: Mapping[str, OutputRef] | None = None,
    outputs: Sequence[str] = (),
) -> EffectSpec:
    """Convenience constructor for effect builders."""
    return EffectSpec(kind, payload or {}, inputs or {}, tuple(outputs))
