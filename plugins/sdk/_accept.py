"""A JSON Schema's accept path, compiled to closures: is this value valid, without jsonschema.

Every request config, effect payload and contract bundle is checked against a schema, and
almost every one is valid. Asking jsonschema costs its import (~6 MB of a service's
memory, docs/benchmarks.md P8) and a walk of its generic machinery per value. Our schemas
use a small part of Draft 2020-12, so ``compile_accept`` compiles that part into nested
closures once per schema, and jsonschema is asked only to *explain* a refusal (where its
wording and our error mapping live, ``_config``) or to judge a schema this module does not
vouch for.

The contract: for a schema ``compile_accept`` returns an accept function for, that
function answers exactly what ``_config``'s strict Draft 2020-12 validator's ``is_valid``
answers (integers exclude floats and booleans, numbers exclude booleans; ``enum``,
``const`` and ``uniqueItems`` compare as jsonschema does: ``1 == 1.0``, ``True != 1``),
and the schema passes the Draft 2020-12 metaschema. tests/unit/test_schema_differential.py
checks both against jsonschema on generated schemas and values. For anything else it
returns None and the caller uses jsonschema as before:

* a keyword of Draft 2020-12 it does not compile (``unevaluatedProperties``,
  ``unevaluatedItems``, ``$anchor``, ``$dynamicRef``, ...; a key outside the draft's
  vocabulary asserts nothing, as in jsonschema);
* a keyword whose value is not of the plain form (a float where a count is due, a
  ``$ref`` that is not a JSON pointer into this schema, ``$id`` below the root, a
  ``$schema`` other than 2020-12's);
* a ``pattern`` Python's ``re`` cannot compile.
"""

from __future__ import annotations

import itertools
import numbers
import re
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Any, cast

__all__ = ["Accept", "compile_accept"]

Accept = Callable[[object], bool]

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_TYPES: dict[str, Callable[[object], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
# Draft 2020-12 as jsonschema ships it (``strict=False``): an integral float is an
# integer, and any ``numbers.Number`` but a bool is a number.
_PLAIN_TYPES: dict[str, Callable[[object], bool]] = {
    **_TYPES,
    "integer": lambda v: (
        not isinstance(v, bool)
        and (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))
    ),
    "number": lambda v: isinstance(v, numbers.Number) and not isinstance(v, bool),
}

# Keywords that assert nothing here (``format`` is an annotation unless a format checker
# is given, and none is). ``$defs`` is compiled for its well-formedness only.
_ANNOTATIONS = frozenset(
    {"$comment", "title", "description", "examples", "default", "deprecated", "format"}
    | {"readOnly", "writeOnly"}
)


# Every keyword of Draft 2020-12's vocabularies. One of these this module does not compile
# makes the schema unsupported; any other key asserts nothing (jsonschema ignores it too,
# and a ``$defs`` entry may be a plain object of schemas that ``$ref`` points into).
# tests/unit/test_schema_differential.py holds that jsonschema acts on none outside it.
VOCABULARY = frozenset(
    {"$id", "$schema", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary"}
    | {"$comment", "$defs", "prefixItems", "items", "contains", "additionalProperties"}
    | {"properties", "patternProperties", "dependentSchemas", "propertyNames", "if", "then"}
    | {"else", "allOf", "anyOf", "oneOf", "not", "unevaluatedItems", "unevaluatedProperties"}
    | {"type", "const", "enum", "multipleOf", "maximum", "exclusiveMaximum", "minimum"}
    | {"exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems"}
    | {"uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties"}
    | {"required", "dependentRequired", "title", "description", "default", "deprecated"}
    | {"readOnly", "writeOnly", "examples", "format", "contentEncoding", "contentMediaType"}
    | {"contentSchema"}
)


class _Unsupported(Exception):
    """The schema leaves the compiled subset: the caller falls back to jsonschema."""


def compile_accept(schema: object, *, strict: bool = True) -> Accept | None:
    """The accept function of ``schema``, or None if it is not one this module vouches for.
    ``strict``: as ``_config``'s strict validator (integers exclude floats); False: as
    jsonschema's own ``Draft202012Validator``."""
    try:
        return _Compiler(schema, _TYPES if strict else _PLAIN_TYPES).root()
    except _Unsupported:
        return None


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _unique_strings(value: object) -> bool:
    return (
        isinstance(value, list)
        and all(isinstance(v, str) for v in value)
        and len(set(value)) == len(value)
    )


# -- jsonschema's equality: bools are not numbers, sequences and mappings compare deeply ---


_TRUE, _FALSE = object(), object()


def _unbool(value: object) -> object:
    if value is True:
        return _TRUE
    if value is False:
        return _FALSE
    return value


def equal(one: object, two: object) -> bool:
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return one == two
    if isinstance(one, Sequence) and isinstance(two, Sequence):
        return len(one) == len(two) and all(equal(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return len(one) == len(two) and all(k in two and equal(v, two[k]) for k, v in one.items())
    return _unbool(one) == _unbool(two)


def unique(items: list[Any]) -> bool:
    """``uniqueItems`` as jsonschema decides it: adjacent items of the sorted list when the
    items sort, every pair otherwise (the two can differ for nested booleans; this
    follows jsonschema, whose answer the contract is)."""
    try:
        ordered = sorted(_unbool(i) for i in items)  # type: ignore[type-var]
        return not any(equal(a, b) for a, b in itertools.pairwise(ordered))
    except (NotImplementedError, TypeError):
        seen: list[object] = []
        for each in map(_unbool, items):
            if any(equal(s, each) for s in seen):
                return False
            seen.append(each)
        return True


# -- the compiler --------------------------------------------------------------------------


class _Compiler:
    def __init__(self, root: object, types: Mapping[str, Callable[[object], bool]]) -> None:
        self._root = root
        self._types = types
        self._is_number = types["number"]
        self._refs: dict[str, Accept] = {}

    def root(self) -> Accept:
        if isinstance(self._root, dict):
            declared = self._root.get("$schema", DRAFT_2020_12)
            if declared != DRAFT_2020_12 or not isinstance(self._root.get("$id", ""), str):
                raise _Unsupported("$schema or $id")
        return self._schema(self._root, top=True)

    def _ref(self, pointer: object) -> Accept:
        """A ``$ref`` to a JSON pointer in this schema, compiled once and late (it may be
        recursive)."""
        if not isinstance(pointer, str) or not (pointer == "#" or pointer.startswith("#/")):
            raise _Unsupported("$ref")
        if pointer not in self._refs:
            target = self._root
            for escaped in pointer[2:].split("/") if pointer != "#" else []:
                if "%" in escaped:  # percent-encoded: jsonschema decodes it, we do not
                    raise _Unsupported(f"$ref {pointer}")
                token = escaped.replace("~1", "/").replace("~0", "~")
                if isinstance(target, dict) and token in target:
                    target = target[token]
                elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
                    target = target[int(token)]
                else:
                    raise _Unsupported(f"unresolvable $ref {pointer}")
            compiled: list[Accept] = []
            self._refs[pointer] = lambda v: compiled[0](v)  # noqa: PLW0108 - bound late
            compiled.append(self._schema(target, top=target is self._root))
        return self._refs[pointer]

    def _schemas(self, value: object) -> list[Accept]:
        if not isinstance(value, list) or not value:
            raise _Unsupported("a non-empty array of schemas")
        return [self._schema(s) for s in value]

    def _map(self, value: object) -> dict[str, Accept]:
        if not isinstance(value, dict):
            raise _Unsupported("an object of schemas")
        return {k: self._schema(s) for k, s in value.items()}

    def _schema(self, schema: object, *, top: bool = False) -> Accept:
        if schema is True:
            return lambda v: True
        if schema is False:
            return lambda v: False
        if not isinstance(schema, dict):
            raise _Unsupported("a schema is an object or a boolean")
        checks: list[Accept] = []
        for keyword, value in schema.items():
            if keyword in ("$schema", "$id"):
                if not top:
                    raise _Unsupported(f"{keyword} below the root")
            elif keyword in _ANNOTATIONS:
                self._annotation(keyword, value)
            elif keyword == "$defs":
                self._map(value)
            elif keyword not in VOCABULARY:
                continue  # not a keyword: asserts nothing
            else:
                checks.extend(self._keyword(keyword, value, schema))
        if not checks:
            return lambda v: True
        if len(checks) == 1:
            return checks[0]
        return lambda v: all(check(v) for check in checks)

    @staticmethod
    def _annotation(keyword: str, value: object) -> None:
        ok = {
            "$comment": isinstance(value, str),
            "title": isinstance(value, str),
            "description": isinstance(value, str),
            "format": isinstance(value, str),
            "examples": isinstance(value, list),
            "deprecated": isinstance(value, bool),
            "readOnly": isinstance(value, bool),
            "writeOnly": isinstance(value, bool),
        }.get(keyword, True)
        if not ok:
            raise _Unsupported(keyword)

    def _keyword(self, keyword: str, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        if keyword in _SIZES:
            return self._size(keyword, value)
        if keyword in _BOUNDS:
            return self._bound(keyword, value)
        compile_one = getattr(self, "_kw_" + keyword.lstrip("$"), None)
        if compile_one is None:
            raise _Unsupported(keyword)
        result: list[Accept] = compile_one(value, schema)
        return result

    # -- any instance

    def _kw_type(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not names or not all(n in _TYPES for n in names):
            raise _Unsupported("type")
        if len(set(names)) != len(names):
            raise _Unsupported("type")
        tests = [self._types[n] for n in names]
        return [lambda v: any(t(v) for t in tests)]

    def _kw_enum(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        if not isinstance(value, list):
            raise _Unsupported("enum")
        options = list(value)
        return [lambda v: any(equal(v, o) for o in options)]

    def _kw_const(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        return [lambda v: equal(v, value)]

    def _kw_ref(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        return [self._ref(value)]

    def _kw_allOf(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        parts = self._schemas(value)
        return [lambda v: all(p(v) for p in parts)]

    def _kw_anyOf(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        parts = self._schemas(value)
        return [lambda v: any(p(v) for p in parts)]

    def _kw_oneOf(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        parts = self._schemas(value)
        return [lambda v: sum(1 for p in parts if p(v)) == 1]

    def _kw_not(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        inner = self._schema(value)
        return [lambda v: not inner(v)]

    def _kw_if(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        cond = self._schema(value)
        then = self._schema(schema.get("then", True))
        other = self._schema(schema.get("else", True))
        return [lambda v: then(v) if cond(v) else other(v)]

    def _kw_then(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        self._schema(value)  # well-formed; "if" applies it (alone it does nothing)
        return []

    _kw_else = _kw_then

    # -- objects

    def _kw_properties(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        props = self._map(value)
        return [
            lambda v: (
                not isinstance(v, dict)
                or all(k not in v or check(v[k]) for k, check in props.items())
            )
        ]

    def _kw_patternProperties(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        pats = [(self._pattern(p), check) for p, check in self._map(value).items()]
        return [
            lambda v: (
                not isinstance(v, dict)
                or all(
                    check(item) for key, item in v.items() for rx, check in pats if rx.search(key)
                )
            )
        ]

    def _kw_additionalProperties(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        extra = self._schema(value)
        props = schema.get("properties")
        known = set(props) if isinstance(props, dict) else set()
        pats = [self._pattern(p) for p in schema.get("patternProperties") or ()]
        return [
            lambda v: (
                not isinstance(v, dict)
                or all(
                    extra(item)
                    for key, item in v.items()
                    if key not in known and not any(rx.search(key) for rx in pats)
                )
            )
        ]

    def _kw_propertyNames(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        names = self._schema(value)
        return [lambda v: not isinstance(v, dict) or all(names(k) for k in v)]

    def _kw_required(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        if not _unique_strings(value):
            raise _Unsupported("required")
        wanted = list(value)
        return [lambda v: not isinstance(v, dict) or all(k in v for k in wanted)]

    def _kw_dependentRequired(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        if not isinstance(value, dict) or not all(_unique_strings(x) for x in value.values()):
            raise _Unsupported("dependentRequired")
        deps = dict(value)
        return [
            lambda v: (
                not isinstance(v, dict)
                or all(all(k in v for k in need) for trigger, need in deps.items() if trigger in v)
            )
        ]

    def _kw_dependentSchemas(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        deps = self._map(value)
        return [
            lambda v: (
                not isinstance(v, dict)
                or all(check(v) for trigger, check in deps.items() if trigger in v)
            )
        ]

    # -- arrays, strings, numbers

    def _kw_items(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        each = self._schema(value)
        prefix = schema.get("prefixItems")
        skip = len(prefix) if isinstance(prefix, list) else 0
        return [lambda v: not isinstance(v, list) or all(each(i) for i in v[skip:])]

    def _kw_prefixItems(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        firsts = self._schemas(value)
        return [
            lambda v: (
                not isinstance(v, list)
                or all(check(item) for check, item in zip(firsts, v, strict=False))
            )
        ]

    def _kw_contains(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        match = self._schema(value)
        least, most = schema.get("minContains", 1), schema.get("maxContains")
        if not _is_count(least) or not (most is None or _is_count(most)):
            raise _Unsupported("minContains or maxContains")

        def contains(v: object) -> bool:
            if not isinstance(v, list):
                return True
            matches = sum(1 for item in v if match(item))
            return least <= matches and (most is None or matches <= most)

        return [contains]

    def _kw_minContains(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        return []  # read by "contains" (which checks it); alone it does nothing

    _kw_maxContains = _kw_minContains

    def _kw_multipleOf(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        if not _is_number(value) or not value > 0:
            raise _Unsupported("multipleOf")
        is_number = self._is_number
        return [lambda v: not is_number(v) or _multiple(v, value)]

    def _kw_uniqueItems(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        if not isinstance(value, bool):
            raise _Unsupported("uniqueItems")
        return [lambda v: not isinstance(v, list) or unique(v)] if value else []

    def _kw_pattern(self, value: Any, schema: Mapping[str, Any]) -> list[Accept]:
        rx = self._pattern(value)
        return [lambda v: not isinstance(v, str) or rx.search(v) is not None]

    def _size(self, keyword: str, value: Any) -> list[Accept]:
        if not _is_count(value):
            raise _Unsupported(keyword)
        kind, is_min = _SIZES[keyword]
        bound = int(value)
        if is_min:
            return [lambda v: not isinstance(v, kind) or len(cast(Sized, v)) >= bound]
        return [lambda v: not isinstance(v, kind) or len(cast(Sized, v)) <= bound]

    def _bound(self, keyword: str, value: Any) -> list[Accept]:
        if not _is_number(value):
            raise _Unsupported(keyword)
        holds, is_number = _BOUNDS[keyword], self._is_number
        return [lambda v: not is_number(v) or holds(v, value)]

    @staticmethod
    def _pattern(value: object) -> re.Pattern[str]:
        if not isinstance(value, str):
            raise _Unsupported("pattern")
        try:
            return re.compile(value)
        except re.error as exc:
            raise _Unsupported("pattern") from exc


def _multiple(value: Any, divisor: Any) -> bool:
    """``multipleOf`` as jsonschema computes it (a float divisor by the quotient, exactly
    by fractions where that overflows)."""
    if isinstance(divisor, float):
        quotient = value / divisor
        try:
            return bool(int(quotient) == quotient)
        except OverflowError:
            from fractions import Fraction  # rare; it imports decimal (memory, P8)

            return (Fraction(value) / Fraction(divisor)).denominator == 1
    return not value % divisor


_SIZES: dict[str, tuple[type | tuple[type, ...], bool]] = {
    "minLength": (str, True),
    "maxLength": (str, False),
    "minItems": (list, True),
    "maxItems": (list, False),
    "minProperties": (dict, True),
    "maxProperties": (dict, False),
}
# Written as jsonschema refuses (``instance < minimum`` fails), so that a NaN is judged alike.
_BOUNDS: dict[str, Callable[[Any, Any], bool]] = {
    "minimum": lambda v, b: not v < b,
    "maximum": lambda v, b: not v > b,
    "exclusiveMinimum": lambda v, b: not v <= b,
    "exclusiveMaximum": lambda v, b: not v >= b,
}
