"""Strict decoding of plugin configs: bounds, JSON, JSON Schema, cross-field rules, dataclasses.

Every rejection of *input* is a :class:`ConfigError` carrying a JSONPath-like ``path``
(``$``, ``$.vf.vlan``, ``$.members[1]``) and a ``rule``. Problems with the schema, the
cross-field rules or the target dataclass are programming errors and raise
``ValueError``/``TypeError`` instead.

Pipeline (``ConfigValidator.decode``):

1. bounds: size (``max-bytes``), UTF-8 (``encoding``), nesting (``max-depth``);
2. JSON: ``syntax`` (incl. trailing data), ``not-object``, ``duplicate-key``,
   ``non-finite`` (NaN, Infinity, float overflow), ``range`` (integers outside int64),
   ``encoding`` (lone surrogate escapes such as ``"\\ud800"``);
3. JSON Schema 2020-12, as jsonschema decides it (integers exclude floats, booleans
   are never numbers; every other verdict is ``Draft202012Validator``'s): its accept
   path compiled by ``_accept`` where that vouches for the schema, jsonschema itself
   to explain a refusal (``SchemaCheck``);
4. cross-field rules (``cross-field:<id>``);
5. typed decoding into frozen dataclasses.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import json
import math
import re
import threading
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar, cast

from plugins.sdk._accept import compile_accept
from plugins.sdk._errors import ConfigError

if TYPE_CHECKING:
    # jsonschema is imported when the first schema is compiled (``SchemaCheck``), not by
    # importing this module: tools that never validate do not pay for it.
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "ConfigValidator",
    "JSONValue",
    "SchemaCheck",
    "SchemaProblem",
    "compile_schema",
    "decode_into",
    "json_path",
    "parse_config_json",
    "schema_problems",
]

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None
T = TypeVar("T")

DEFAULT_MAX_BYTES = 65536
DEFAULT_MAX_DEPTH = 16
# Hard ceiling for max_depth: keeps every recursive step after the pre-scan (our tree
# walks, jsonschema's descent, typed decoding) far below Python's recursion limit.
_MAX_DEPTH_CEILING = 64
# Integers must fit int64, as in Kubernetes and Go decoders of the same configs; this also
# keeps float arithmetic in jsonschema (multipleOf) from overflowing.
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1

Path: TypeAlias = tuple[str | int, ...]


# --- paths and message helpers ----------------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def json_path(parts: Sequence[str | int], root: str = "$") -> str:
    """``$.vf.vlan``, ``$.members[1]``, ``$.capacity["dra.networking/macvlans"]``.

    ``root`` names the document: a manifest's paths read ``spec.steps[0]`` with the root
    ``""``, a lab's ``lab.pfs[0]``.
    """
    out = [root]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENT.fullmatch(part):
            out.append(f".{part}" if out != [""] else part)
        else:
            out.append(f"[{json.dumps(part)}]")
    return "".join(out) or "$"


def _show(value: object, limit: int = 60) -> str:
    """A short ASCII-only JSON rendering for messages (inputs may be huge or exotic)."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _quote(key: str) -> str:
    return "'" + _show(key)[1:-1] + "'"


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | _OutOfRange):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"


def _got(value: object) -> str:
    kind = _json_type(value)
    return kind if kind in ("array", "object", "null") else f"{kind} {_show(value)}"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_limits(max_bytes: int, max_depth: int) -> None:
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
        raise ValueError(f"max_bytes must be a positive int, got {max_bytes!r}")
    if (
        not isinstance(max_depth, int)
        or isinstance(max_depth, bool)
        or not 1 <= max_depth <= _MAX_DEPTH_CEILING
    ):
        raise ValueError(f"max_depth must be an int in 1..{_MAX_DEPTH_CEILING}, got {max_depth!r}")


# --- steps 1 and 2: bounds and JSON -------------------------------------------------------

# A string token (closing quote optional so an unterminated string swallows the rest
# rather than exposing its brackets) or a single bracket. Linear: no nested quantifiers.
_SCAN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_depth(text: str, max_depth: int) -> None:
    # Runs before json so that hostile nesting can never reach the recursive parser.
    depth = 0
    for match in _SCAN.finditer(text):
        token = match.group()
        if token in {"[", "{"}:
            depth += 1
            if depth > max_depth:
                raise ConfigError("$", "max-depth", f"nesting deeper than {max_depth} levels")
        elif token in {"]", "}"}:
            depth -= 1


class _Duplicated(dict[str, Any]):
    """Returned by the pairs hook for an object with a repeated key; reported with its
    full path by the tree walk, since the hook itself cannot know where it is."""

    def __init__(self, pairs: list[tuple[str, Any]], key: str) -> None:
        super().__init__(pairs)
        self.duplicate = key


class _OutOfRange:
    def __init__(self, literal: str) -> None:
        self.literal = literal


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return _Duplicated(pairs, key)
        seen.add(key)
    raise AssertionError("unreachable")  # pragma: no cover


def _parse_int(literal: str) -> int | _OutOfRange:
    # The length test comes first: int() on a huge literal is slow or raises ValueError.
    if len(literal) > 20:
        return _OutOfRange(literal)
    value = int(literal)
    return value if _INT_MIN <= value <= _INT_MAX else _OutOfRange(literal)


def _check_tree(value: object, parts: Path) -> None:
    """Report parse-time markers with their path; depth is already bounded."""
    if isinstance(value, dict):
        if isinstance(value, _Duplicated):
            key = value.duplicate
            raise ConfigError(
                json_path((*parts, key)), "duplicate-key", f"duplicate key {_quote(key)}"
            )
        for key, item in value.items():
            if _SURROGATE.search(key):
                raise ConfigError(
                    json_path(parts), "encoding", "key contains a lone UTF-16 surrogate"
                )
            _check_tree(item, (*parts, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_tree(item, (*parts, index))
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(json_path(parts), "non-finite", "number must be finite")
    elif isinstance(value, _OutOfRange):
        raise ConfigError(json_path(parts), "range", "integer does not fit in 64 bits")
    elif isinstance(value, str) and _SURROGATE.search(value):
        raise ConfigError(json_path(parts), "encoding", "string contains a lone UTF-16 surrogate")


def parse_config_json(
    raw: bytes | str, *, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = DEFAULT_MAX_DEPTH
) -> dict[str, JSONValue]:
    """Steps 1-2: bounds and strict JSON parsing of exactly one top-level object."""
    _check_limits(max_bytes, max_depth)
    if isinstance(raw, str):
        if len(raw) > max_bytes:  # every character is at least one UTF-8 byte
            raise ConfigError("$", "max-bytes", f"config exceeds {max_bytes} bytes")
        try:
            data = raw.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ConfigError("$", "encoding", f"not encodable as UTF-8 at {exc.start}") from None
    elif isinstance(raw, bytes | bytearray):
        data = bytes(raw)
    else:
        raise ConfigError("$", "encoding", f"config must be bytes or str, got {type(raw).__name__}")
    if len(data) > max_bytes:
        raise ConfigError("$", "max-bytes", f"config is {len(data)} bytes, limit is {max_bytes}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("$", "encoding", f"invalid UTF-8 at byte {exc.start}") from None
    _check_depth(text, max_depth)
    try:
        value = json.loads(
            text,
            object_pairs_hook=_pairs_hook,
            parse_int=_parse_int,
            parse_constant=float,  # NaN/Infinity become floats; the walk rejects them
        )
    except json.JSONDecodeError as exc:
        what = "unexpected data after the JSON value" if exc.msg == "Extra data" else exc.msg
        where = f"line {exc.lineno} column {exc.colno}"
        raise ConfigError("$", "syntax", f"invalid JSON at {where}: {what}") from None
    if not isinstance(value, dict):
        message = f"config must be a JSON object, got {_json_type(value)}"
        raise ConfigError("$", "not-object", message)
    _check_tree(value, ())
    return cast(dict[str, JSONValue], value)


# --- step 3: JSON Schema ------------------------------------------------------------------


def _schema_integer(_checker: object, instance: object) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _schema_number(_checker: object, instance: object) -> bool:
    return _is_number(instance)


def _unknown_key(key: str, value: object) -> ValidationError:
    from jsonschema.exceptions import ValidationError

    return ValidationError(f"unknown key {_quote(key)}", path=(key,), instance=value)


def _original(keyword: str) -> Any:
    """Draft 2020-12's own implementation of ``keyword`` (the overrides below defer to it)."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator.VALIDATORS[keyword]


# The `false` forms of these two are overridden only to say which keys are unexpected,
# each as its own error located at the key (jsonschema lists them all in one message at
# the enclosing object). Whether the object is refused stays jsonschema's answer: its
# own implementation runs first, and only a refusal is then explained key by key.


def _additional_properties(
    validator: Validator, value: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    errors = list(_original("additionalProperties")(validator, value, instance, schema))
    if value is not False or not errors:
        yield from errors
        return
    known = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extra = [k for k in instance if k not in known and not any(re.search(p, k) for p in patterns)]
    yield from [_unknown_key(key, instance[key]) for key in extra] or errors


def _unevaluated_properties(
    validator: Validator, value: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    original = _original("unevaluatedProperties")
    errors = list(original(validator, value, instance, schema))
    if value is not False or not errors or len(instance) > _MAX_NAMED_KEYS:
        yield from errors
        return

    def refuses(probe: Mapping[str, Any]) -> bool:
        return next(iter(original(validator, False, instance, probe)), None) is not None

    named = False
    for key in _unevaluated_keys(refuses, instance, schema):  # lazily: is_valid needs one
        named = True
        yield _unknown_key(key, instance[key])
    if not named:
        yield from errors


def _unevaluated_keys(
    refuses: Callable[[Mapping[str, Any]], bool],
    instance: Mapping[str, Any],
    schema: Mapping[str, Any],
) -> Iterator[str]:
    """Keys ``unevaluatedProperties: false`` refuses, found by asking jsonschema's keyword.

    Which keys a schema evaluated (through ``$ref``, ``allOf``, ``if``/``then``,
    ``dependentSchemas``, ...) is known only inside jsonschema, and it names the
    refused ones in prose. ``refuses(probe)`` runs the keyword against ``schema`` changed
    into ``probe``: a key listed in the schema's own ``properties`` always counts as
    evaluated, so listing every key but a set ``S`` (as ``true``: no new constraint on
    its value) leaves refused exactly the refused keys within ``S``. Halving ``S`` finds
    them: about ``2 * log2(len(instance))`` probes for the first, fewer for each next.
    A probe costs jsonschema about ``len(instance) ** 2`` steps (it keeps the evaluated
    keys in a list), hence ``_MAX_NAMED_KEYS`` and ``_MAX_PROBES``.
    """
    declared = schema.get("properties", {})
    # The keyword itself is left out: `false` evaluates no key, yet would be tried on each.
    rest = {k: v for k, v in schema.items() if k not in ("properties", "unevaluatedProperties")}
    probes = 0

    def search(keys: list[str]) -> Iterator[str]:
        nonlocal probes
        if probes >= _MAX_PROBES:
            return
        probes += 1
        inside = set(keys)
        listed = {key: True for key in instance if key not in declared and key not in inside}
        if not refuses({**rest, "properties": {**listed, **declared}}):
            return
        if len(keys) == 1:
            yield keys[0]
            return
        yield from search(keys[: len(keys) // 2])
        yield from search(keys[len(keys) // 2 :])

    yield from search([key for key in instance if key not in declared])


# An object with more keys, or whose unknown keys take more probes to find, keeps
# jsonschema's own error (at the object, listing them all). Configs people write have
# far fewer keys per object; a hostile one of thousands costs one jsonschema pass.
_MAX_NAMED_KEYS = 64
_MAX_PROBES = 128


def _properties(
    validator: Validator, value: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    # jsonschema drops the path of errors from a `false` subschema; `"x": false` is the
    # usual way to forbid a key, so report it at the key. Elsewhere `false` is rare.
    if not validator.is_type(instance, "object"):
        return
    from jsonschema.exceptions import ValidationError

    for key, subschema in value.items():
        if key in instance and subschema is False:
            message = f"key {_quote(key)} is not allowed"
            yield ValidationError(message, path=(key,), instance=instance[key])
    allowed = {key: subschema for key, subschema in value.items() if subschema is not False}
    yield from _original("properties")(validator, allowed, instance, schema)


def _property_names(
    validator: Validator, value: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    # jsonschema reports a bad key at the enclosing object; report it at the key itself,
    # like an unknown key.
    if not validator.is_type(instance, "object"):
        return
    descend = cast(Any, validator).descend  # on every validator, not in the Protocol
    for key in instance:
        yield from descend(instance=key, schema=value, path=key)


@functools.cache
def _strict_validator() -> type[Validator]:
    """Draft 2020-12 with the overrides above: integers exclude floats, each unknown key
    its own error (built once, when a schema is first compiled)."""
    import jsonschema.validators
    from jsonschema import Draft202012Validator

    strict: type[Validator] = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        Draft202012Validator,
        validators={
            "additionalProperties": _additional_properties,
            "properties": _properties,
            "propertyNames": _property_names,
            "unevaluatedProperties": _unevaluated_properties,
        },
        type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many(
            {"integer": _schema_integer, "number": _schema_number}
        ),
    )
    return strict


_COMPARISONS = {
    "minimum": ">=",
    "maximum": "<=",
    "exclusiveMinimum": ">",
    "exclusiveMaximum": "<",
}
_SIZES = {
    "minItems": ("at least", "items"),
    "maxItems": ("at most", "items"),
    "minProperties": ("at least", "properties"),
    "maxProperties": ("at most", "properties"),
    "minLength": ("at least", "characters"),
    "maxLength": ("at most", "characters"),
}


def _size(value: object) -> int:
    return len(value) if isinstance(value, str | list | dict) else 0


def _candidates(error: ValidationError) -> Iterator[tuple[Path, str, str]]:
    """Map one jsonschema error to (path, rule, message) candidates."""
    keyword, expected, inst = error.validator, cast(Any, error.validator_value), error.instance
    parts: Path = tuple(error.absolute_path)
    if keyword in ("additionalProperties", "unevaluatedProperties"):
        # Our per-key errors; or jsonschema's own, listing every key (_unevaluated_keys).
        yield (
            parts,
            "unknown-key",
            error.message if len(error.message) <= 200 else error.message[:197] + "...",
        )
    elif keyword == "required":
        for name in expected:
            if isinstance(inst, dict) and name not in inst:
                yield (*parts, name), "required", f"missing required field {_quote(name)}"
    elif keyword == "dependentRequired":
        for trigger, names in expected.items():
            for name in names:
                if isinstance(inst, dict) and trigger in inst and name not in inst:
                    message = f"missing field {_quote(name)}, required with {_quote(trigger)}"
                    yield (*parts, name), "required", message
    elif keyword == "type":
        wanted = " or ".join(expected) if isinstance(expected, list) else expected
        yield parts, "type", f"must be of type {wanted}, got {_got(inst)}"
    elif keyword in _COMPARISONS:
        yield (
            parts,
            "range",
            f"must be {_COMPARISONS[keyword]} {_show(expected)}, got {_show(inst)}",
        )
    elif keyword == "multipleOf":
        yield parts, "range", f"must be a multiple of {_show(expected)}, got {_show(inst)}"
    elif keyword in _SIZES:
        bound, unit = _SIZES[keyword]
        message = f"must have {bound} {_show(expected)} {unit}, got {_size(inst)}"
        yield parts, "size", message
    elif keyword == "pattern":
        yield parts, "pattern", f"must match pattern {_show(expected)}, got {_show(inst)}"
    elif keyword == "enum":
        yield parts, "enum", f"must be one of {_show(expected, 120)}, got {_show(inst)}"
    elif keyword == "const":
        yield parts, "enum", f"must be {_show(expected)}, got {_show(inst)}"
    elif keyword == "properties":  # only our errors for `"key": false`
        yield parts, "not-allowed", error.message
    elif not isinstance(keyword, str):  # any other `false` subschema; jsonschema loses its path
        yield parts, "not-allowed", "no value is allowed here"
    else:
        message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
        yield parts, keyword, message


# jsonschema spends ~20us per error; a 64 KiB config can hold tens of thousands of them.
# Choosing among the first few (in jsonschema's deterministic order) bounds the cost.
_MAX_SCHEMA_ERRORS = 100

# At the same depth, a typo'd key explains the "required" and "type" errors it causes.
_RULE_RANK = {"unknown-key": 0, "required": 1, "type": 2}


def _precedence(candidate: tuple[Path, str, str]) -> tuple[Any, ...]:
    """Shallowest path first; then unknown-key, required, type, everything else; then
    the path itself (indices before names) and the message, so the choice is total."""
    parts, rule, message = candidate
    ordered_parts = tuple((0, p) if isinstance(p, int) else (1, p) for p in parts)
    return (len(parts), _RULE_RANK.get(rule, 3), ordered_parts, rule, message)


@dataclasses.dataclass(frozen=True)
class SchemaProblem:
    """One way a JSON value fails its schema: where, which rule, and why."""

    parts: Path
    rule: str
    message: str

    def path(self, root: str = "$") -> str:
        return json_path(self.parts, root)

    def line(self, root: str = "$") -> str:
        """The one-line form every schema error uses: ``$.a.b: <why> [<rule>]``."""
        return f"{self.path(root)}: {self.message} [{self.rule}]"

    def __str__(self) -> str:
        return self.line()


def _check_schema(schema: Mapping[str, Any]) -> None:
    """ValueError if ``schema`` fails the Draft 2020-12 metaschema (jsonschema decides)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"invalid JSON Schema: {exc.message}") from exc


def _local_refs_only(node: object, where: str = "#") -> None:
    """ValueError naming the first ``$ref`` or ``$dynamicRef`` that leaves the schema.

    A schema is self-contained: jsonschema's default registry would fetch a remote
    reference over the network at validation time (a request's verdict depending on a
    server somewhere), so one is refused when the schema is compiled, and the validator
    is given an empty registry that resolves nothing but the schema itself.
    """
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef") and not (
                isinstance(value, str) and value.startswith("#")
            ):
                raise ValueError(
                    f"invalid JSON Schema: {where}/{key} is {value!r}: only references "
                    "within the schema (starting with '#') are allowed"
                )
            _local_refs_only(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _local_refs_only(value, f"{where}/{index}")


def compile_schema(schema: Mapping[str, Any]) -> Validator:
    """A strict Draft 2020-12 validator for ``schema``; ValueError if it is no valid schema
    or it references anything outside itself."""
    from referencing import Registry

    schema = copy.deepcopy(dict(schema))
    _check_schema(schema)
    _local_refs_only(schema)
    validator: Validator = _strict_validator()(schema, registry=Registry())
    return validator


def schema_problems(validator: Validator, value: object) -> tuple[SchemaProblem, ...]:
    """Every problem of ``value`` (bounded), the most explanatory first (see _precedence)."""
    errors = itertools.islice(validator.iter_errors(cast(Any, value)), _MAX_SCHEMA_ERRORS)
    candidates = sorted({c for e in errors for c in _candidates(e)}, key=_precedence)
    return tuple(SchemaProblem(*candidate) for candidate in candidates)


# What ``SchemaCheck`` reports for a value jsonschema refuses with errors ``_candidates``
# maps to nothing (none known): the refusal stands, whatever the explanation lacks.
_UNEXPLAINED = SchemaProblem((), "schema", "does not match the schema")


class SchemaCheck:
    """A schema checked against the metaschema and compiled once, when it is built.

    ``problems(value)`` is ``()`` exactly when jsonschema's strict validator (Draft
    2020-12 with the overrides above: integers exclude floats, each unknown key its own
    error) finds ``value`` valid; a refused value is explained by ``schema_problems``. An
    invalid schema raises ValueError here. Build one per schema and keep it (a bundle, a
    file format, a coordinator's descriptor). Safe to share between threads.

    The accept path (every valid request config) does not ask jsonschema: a schema
    ``_accept`` vouches for is compiled to closures that answer what jsonschema's
    ``is_valid`` would, and jsonschema is imported and its validator built only for the
    first refusal to explain (P8: a service that never sees a bad config never imports
    it). Any other schema is compiled by jsonschema at once, checked against the
    metaschema (1 to 3 ms for our schemas).
    """

    def __init__(self, schema: Mapping[str, Any]) -> None:
        _local_refs_only(schema)
        self._schema = copy.deepcopy(dict(schema))
        self._accept = compile_accept(self._schema)
        self._strict: Validator | None = None
        self._lock = threading.Lock()
        if self._accept is None:
            self._strict = compile_schema(self._schema)

    def _explainer(self) -> Validator:
        with self._lock:
            if self._strict is None:
                self._strict = compile_schema(self._schema)
            return self._strict

    def problems(self, value: object) -> tuple[SchemaProblem, ...]:
        if self._accept is not None and self._accept(value):
            return ()
        # jsonschema has the last word on a refusal (the compiled path only accepts sooner)
        if self._explainer().is_valid(cast(Any, value)):
            return ()
        return schema_problems(self._explainer(), value) or (_UNEXPLAINED,)


# --- step 4: cross-field rules ------------------------------------------------------------

_Pointer: TypeAlias = tuple[str, ...]
_RULE_FIELDS = {
    "forbids": ({"when", "field"}, set()),
    "requires": ({"when", "field"}, {"minimum"}),
    "lessOrEqual": ({"lower", "upper"}, set()),
}
_INDEX = re.compile(r"0|[1-9][0-9]*")


def _pointer(rule_id: str, text: object) -> _Pointer:
    if not isinstance(text, str) or not text.startswith("/") or re.search("~(?![01])", text):
        raise ValueError(f"cross-field rule {rule_id!r}: bad JSON pointer {text!r}")
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in text[1:].split("/"))


def _resolve(doc: object, pointer: _Pointer) -> tuple[bool, object, Path]:
    """(present, value, path); JSON null counts as absent, like an omitted field."""
    current: object = doc
    parts: list[str | int] = []
    for position, token in enumerate(pointer):
        if isinstance(current, dict) and token in current:
            current = current[token]
            parts.append(token)
        elif isinstance(current, list) and _INDEX.fullmatch(token) and int(token) < len(current):
            current = current[int(token)]
            parts.append(int(token))
        else:
            return False, None, (*parts, *pointer[position:])
    return current is not None, current, tuple(parts)


@dataclasses.dataclass(frozen=True)
class _CrossFieldRule:
    id: str
    kind: str
    first: _Pointer  # when / lower
    second: _Pointer  # field / upper
    minimum: float | None
    message: str

    @classmethod
    def parse(cls, spec: object) -> _CrossFieldRule:
        if not isinstance(spec, Mapping):
            raise ValueError(f"cross-field rule must be a mapping, got {spec!r}")
        rule_id, kind, message = spec.get("id"), spec.get("kind"), spec.get("message")
        if not isinstance(rule_id, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", rule_id):
            raise ValueError(f"cross-field rule id must be a simple name, got {rule_id!r}")
        if kind not in _RULE_FIELDS:
            raise ValueError(f"cross-field rule {rule_id!r}: unknown kind {kind!r}")
        if not isinstance(message, str) or not message:
            raise ValueError(f"cross-field rule {rule_id!r}: message must be a non-empty string")
        needed, optional = _RULE_FIELDS[kind]
        keys = set(spec) - {"id", "kind", "message"}
        if not needed <= keys or keys - needed - optional:
            raise ValueError(
                f"cross-field rule {rule_id!r}: {kind} takes {sorted(needed)}"
                f" (optional {sorted(optional)}), got {sorted(keys)}"
            )
        minimum = spec.get("minimum")
        if minimum is not None and not (_is_number(minimum) and math.isfinite(minimum)):
            raise ValueError(f"cross-field rule {rule_id!r}: minimum must be a finite number")
        first, second = ("lower", "upper") if kind == "lessOrEqual" else ("when", "field")
        return cls(
            rule_id,
            kind,
            _pointer(rule_id, spec[first]),
            _pointer(rule_id, spec[second]),
            minimum,
            message,
        )

    def check(self, doc: dict[str, JSONValue]) -> None:
        has_first, first, first_parts = _resolve(doc, self.first)
        has_second, second, second_parts = _resolve(doc, self.second)
        if self.kind == "forbids":
            ok = not (has_first and has_second)
            where = second_parts
        elif self.kind == "requires":
            triggered = has_first and not (_is_number(first) and first == 0)
            ok = not triggered or (
                has_second
                and (
                    self.minimum is None
                    or (_is_number(second) and cast(float, second) >= self.minimum)
                )
            )
            where = second_parts
        else:  # lessOrEqual; non-numbers are left to the schema
            comparable = has_first and has_second and _is_number(first) and _is_number(second)
            ok = not comparable or cast(float, first) <= cast(float, second)
            where = first_parts
        if not ok:
            raise ConfigError(json_path(where), f"cross-field:{self.id}", self.message)


# --- the validator ------------------------------------------------------------------------


class ConfigValidator:
    """A compiled schema plus cross-field rules; safe to share between threads."""

    def __init__(
        self,
        schema: Mapping[str, Any],
        cross_field_rules: Sequence[Mapping[str, Any]] = (),
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        _check_limits(max_bytes, max_depth)
        self._schema = SchemaCheck(schema)
        rules = tuple(_CrossFieldRule.parse(spec) for spec in cross_field_rules)
        ids = [rule.id for rule in rules]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate cross-field rule ids in {ids}")
        self._rules = rules
        self._max_bytes = max_bytes
        self._max_depth = max_depth
        self._checked: tuple[bytes | str, dict[str, JSONValue]] | None = None

    def validate(self, raw: bytes | str) -> dict[str, JSONValue]:
        """Steps 1-4; returns the plain JSON object."""
        doc = parse_config_json(raw, max_bytes=self._max_bytes, max_depth=self._max_depth)
        problems = self._schema.problems(doc)
        if problems:
            first = problems[0]
            raise ConfigError(first.path(), first.rule, first.message)
        for cross_field in self._rules:
            cross_field.check(doc)
        return doc

    def check(self, raw: bytes | str) -> None:
        """``validate`` for a caller that needs only the verdict.

        The document is kept for the next ``decode`` of the same text: the runner checks a
        request's config before anything else and its handler then decodes it, so every
        create parsed and validated its config twice. The kept document is never handed
        out (nobody can change it in between), and only the last one is kept; a ``decode``
        of other text, or racing another thread's ``check``, validates afresh."""
        self._checked = (raw, self.validate(raw))

    def decode(self, raw: bytes | str, cls: type[T]) -> T:
        """Steps 1-5; returns an instance of the dataclass ``cls``."""
        checked = self._checked  # one read: another thread may replace it meanwhile
        if checked is not None and checked[0] == raw:
            return decode_into(checked[1], cls)
        return decode_into(self.validate(raw), cls)


# --- step 5: typed decoding ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: str
    hint: Any
    required: bool


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _union_args(hint: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(hint)
    return typing.get_args(hint) if origin in (types.UnionType, typing.Union) else None


def _check_hint(hint: Any, seen: set[type]) -> None:
    """Reject unsupported annotations when a class is first used, not when a value shows up."""
    if hint in (int, str, bool, float, type(None)):
        return
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if hint not in seen:
            seen.add(hint)
            for field in _plan(hint):
                _check_hint(field.hint, seen)
        return
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal and all(isinstance(a, int | str) for a in args):
        return
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        _check_hint(args[0], seen)
        return
    if (union := _union_args(hint)) is not None:
        for arm in union:
            _check_hint(arm, seen)
        return
    raise TypeError(f"unsupported config field type {hint!r}")


_PLANS: dict[type[Any], tuple[_Field, ...]] = {}
_CHECKED: set[type[Any]] = set()


def _plan(cls: type[Any]) -> tuple[_Field, ...]:
    if cls in _PLANS:
        return _PLANS[cls]
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{cls!r} is not a dataclass")
    if not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__} must be a frozen dataclass")
    hints = typing.get_type_hints(cls)
    plan = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        hint = hints[field.name]
        has_default = (
            field.default is not dataclasses.MISSING
            or field.default_factory is not dataclasses.MISSING
        )
        # Omitted must stay distinguishable from false.
        optional_bool = set(_union_args(hint) or ()) == {bool, type(None)}
        if optional_bool and has_default and field.default is not None:
            raise TypeError(f"{cls.__name__}.{field.name}: optional bool must default to None")
        key = field.metadata.get("json", _camel(field.name))
        if not isinstance(key, str) or not key:
            raise TypeError(f"{cls.__name__}.{field.name}: metadata 'json' must be a string")
        plan.append(_Field(field.name, key, hint, not has_default))
    keys = [f.key for f in plan]
    if len(set(keys)) != len(keys):
        raise TypeError(f"{cls.__name__}: two fields map to the same JSON key")
    _PLANS[cls] = tuple(plan)
    return _PLANS[cls]


def _checked_plan(cls: type[Any]) -> tuple[_Field, ...]:
    # Validates the whole class graph once, so unsupported annotations fail on first use.
    if cls not in _CHECKED:
        _plan(cls)  # a clear TypeError for non-dataclasses
        _check_hint(cls, set())
        _CHECKED.add(cls)
    return _plan(cls)


def _type_name(hint: Any) -> str:
    names = {int: "integer", str: "string", bool: "boolean", float: "number", type(None): "null"}
    if hint in names:
        return names[hint]
    if (union := _union_args(hint)) is not None:
        return " or ".join(_type_name(arm) for arm in union)
    return "array" if typing.get_origin(hint) is tuple else "object"


def _decode_value(value: object, hint: Any, parts: Path) -> object:
    def mismatch() -> ConfigError:
        return ConfigError(
            json_path(parts), "type", f"must be of type {_type_name(hint)}, got {_got(value)}"
        )

    if (union := _union_args(hint)) is not None:
        if value is None:
            if type(None) in union:
                return None
            raise mismatch()
        arms = [arm for arm in union if arm is not type(None)]
        if len(arms) == 1:  # keep the precise error from inside X of `X | None`
            return _decode_value(value, arms[0], parts)
        for arm in arms:
            try:
                return _decode_value(value, arm, parts)
            except ConfigError:
                continue
        raise mismatch()
    origin = typing.get_origin(hint)
    if origin is Literal:
        choices = typing.get_args(hint)
        if any(type(value) is type(c) and value == c for c in choices):
            return value
        raise ConfigError(
            json_path(parts), "enum", f"must be one of {_show(list(choices))}, got {_got(value)}"
        )
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise mismatch()
        item = typing.get_args(hint)[0]
        return tuple(_decode_value(v, item, (*parts, i)) for i, v in enumerate(value))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise mismatch()
        return _decode_object(value, hint, parts)
    if hint is bool or hint is str or hint is type(None):
        if type(value) is not hint:
            raise mismatch()
        return value
    if not _is_number(value) or (hint is int and not isinstance(value, int)):
        raise mismatch()
    if hint is float:
        try:
            number = float(cast(float, value))
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise ConfigError(json_path(parts), "non-finite", "number must be finite")
        return number
    return value


def _decode_object(obj: Mapping[Any, object], cls: type[Any], parts: Path) -> object:
    plan = _checked_plan(cls)
    known = {field.key for field in plan}
    for key in obj:
        if key not in known:
            name = key if isinstance(key, str) else repr(key)
            raise ConfigError(
                json_path((*parts, name)), "unknown-key", f"unknown key {_quote(name)}"
            )
    kwargs: dict[str, object] = {}
    for field in plan:
        if field.key in obj:
            kwargs[field.name] = _decode_value(obj[field.key], field.hint, (*parts, field.key))
        elif field.required:
            message = f"missing required field {_quote(field.key)}"
            raise ConfigError(json_path((*parts, field.key)), "required", message)
    try:
        return cls(**kwargs)
    except ValueError as exc:  # a __post_init__ check rejecting the value
        raise ConfigError(json_path(parts), "invalid", str(exc)) from exc


def decode_into(obj: Mapping[str, object], cls: type[T]) -> T:
    """Step 5: build the frozen dataclass ``cls`` from a decoded JSON object.

    JSON keys are the camelCase of the field names unless ``metadata={"json": ...}``
    says otherwise. Supported field types: int, float, str, bool, nested dataclasses,
    ``X | None``, ``tuple[X, ...]`` and ``Literal[...]``.
    """
    if not isinstance(obj, Mapping):
        raise ConfigError("$", "not-object", f"config must be a JSON object, got {_got(obj)}")
    return cast(T, _decode_object(obj, cls, ()))
