"""A fast, partial JSON Schema 2020-12 check: accept what is certainly valid, nothing else.

jsonschema's import is about a fifth of a service's start-up, and its metaschema checks
and first validations most of the rest of the schema work; yet at start-up every
document is normally valid: the administrator's service config, the pinned contract
bundles and their config schemas. This module answers two questions for the keywords
our schemas use, without jsonschema:

* ``instance_valid(schema, instance)``: ``True`` if ``instance`` is certainly valid,
  ``False`` if certainly invalid, ``None`` when this module cannot tell (a keyword it
  does not implement, a remote ``$ref``, a value whose meaning differs between the
  strict and the plain validator, such as ``1.0`` for ``integer``).
* ``schema_valid(schema)``: ``True`` if ``schema`` certainly passes the metaschema
  check (``Draft202012Validator.check_schema``), ``False`` when it cannot tell.

Callers go to jsonschema whenever the answer is not ``True``: it decides, and it
explains every problem in the messages it always gave (``_config``). So a document or
schema is refused exactly as before, with the same message, and only what is certainly
valid skips jsonschema. Both answers err only towards "cannot tell": a wrong ``True``
would accept what jsonschema refuses, which the differential tests
(tests/unit/test_fastschema.py) check against jsonschema on every schema we ship.

Types follow jsonschema's checkers: an object is a ``dict``, an array a ``list``, a
boolean is never a number, and ``integer`` is certain only for an ``int`` (the strict
validator of ``_config`` refuses ``1.0``, the plain one of effect payloads accepts it).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sized
from typing import Any, cast

__all__ = ["instance_valid", "schema_valid"]

Tri = bool | None  # True: certainly valid; False: certainly invalid; None: cannot tell

_ANNOTATIONS = frozenset(
    {"title", "description", "$comment", "default", "examples", "deprecated", "readOnly",
     "writeOnly", "$schema", "$defs", "definitions"}
)  # fmt: skip
_DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_matches(name: str, value: object) -> Tri:
    """Whether ``value`` has the JSON type ``name`` under both jsonschema type checkers."""
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "number":
        return _is_number(value)
    if name == "integer":
        if isinstance(value, int) and not isinstance(value, bool):
            return True
        if isinstance(value, float) and value.is_integer():
            return None  # an integer to the plain checker, not to the strict one
        return False
    return None


def _equal(a: object, b: object) -> Tri:
    """jsonschema's ``equal`` for scalars (booleans are not numbers, ``1 == 1.0``)."""
    a_container, b_container = isinstance(a, list | dict), isinstance(b, list | dict)
    if a_container or b_container:
        same_kind = a_container and b_container and isinstance(a, list) == isinstance(b, list)
        return None if same_kind else False  # containers themselves: left to jsonschema
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    if a is None or b is None:
        return a is None and b is None
    scalars = (int, float, str)
    return False if isinstance(a, scalars) and isinstance(b, scalars) else None


def _all(results: list[Tri]) -> Tri:
    if False in results:
        return False
    return None if None in results else True


def _any(results: list[Tri]) -> Tri:
    if True in results:
        return True
    return None if None in results else False


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except (re.error, TypeError):
        return None


class _Checker:
    """One instance check against one root schema (``$ref`` resolves within the root)."""

    def __init__(self, root: Any) -> None:
        self.root = root

    def check(self, schema: Any, value: Any, depth: int = 0) -> Tri:
        if schema is True:
            return True
        if schema is False:
            return False
        if not isinstance(schema, dict) or depth > 32:
            return None
        if "$id" in schema and schema is not self.root:
            return None  # a new base URI: leave $ref resolution to jsonschema
        results: list[Tri] = []
        for keyword, argument in schema.items():
            if keyword in _ANNOTATIONS or keyword in {"$id", "format"}:
                continue  # neither validator asserts formats (no format checker)
            rule = _RULES.get(keyword)
            if rule is None:
                if keyword in _PAIRED:
                    continue  # then/else: read with their "if"
                return None
            result = rule(self, argument, value, schema, depth + 1)
            if result is False:
                return False
            results.append(result)
        return None if None in results else True

    def ref(self, target: Any, depth: int) -> Any:
        if not isinstance(target, str) or not target.startswith("#"):
            return None
        if target == "#":
            return self.root
        if not target.startswith("#/"):
            return None  # an anchor
        node = self.root
        for escaped in target[2:].split("/"):
            token = escaped.replace("~1", "/").replace("~0", "~")
            if "%" in token or not isinstance(node, dict) or token not in node:
                return None
            node = node[token]
        return node


_Rule = Callable[[_Checker, Any, Any, Mapping[str, Any], int], Tri]


def _type(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    names = arg if isinstance(arg, list) else [arg]
    return _any([_type_matches(n, v) if isinstance(n, str) else None for n in names])


def _enum(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    return _any([_equal(v, m) for m in arg]) if isinstance(arg, list) else None


def _const(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    return _equal(v, arg)


def _ref(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    target = c.ref(arg, d)
    return None if target is None else c.check(target, v, d)


def _properties(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    if not isinstance(v, dict):
        return True
    if not isinstance(arg, dict):
        return None
    return _all([c.check(sub, v[k], d) for k, sub in arg.items() if k in v])


def _pattern_properties(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    if not isinstance(v, dict):
        return True
    if not isinstance(arg, dict):
        return None
    results: list[Tri] = []
    for pattern, sub in arg.items():
        regex = _regex(pattern)
        if regex is None:
            return None
        results.extend(c.check(sub, item, d) for k, item in v.items() if regex.search(k))
    return _all(results)


def _additional(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    if not isinstance(v, dict):
        return True
    known = s.get("properties", {})
    patterns = s.get("patternProperties", {})
    if not isinstance(known, dict) or not isinstance(patterns, dict):
        return None
    regexes = [_regex(p) for p in patterns]
    if None in regexes:
        return None
    extra = [
        k for k in v if k not in known and not any(r.search(k) for r in regexes if r is not None)
    ]
    return _all([c.check(arg, v[k], d) for k in extra])


def _required(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    if not isinstance(v, dict):
        return True
    if not isinstance(arg, list):
        return None
    return all(name in v for name in arg)


def _dependent_required(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    if not isinstance(v, dict):
        return True
    if not isinstance(arg, dict):
        return None
    return all(name in v for key, names in arg.items() if key in v for name in names)


def _dependent_schemas(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    if not isinstance(v, dict):
        return True
    if not isinstance(arg, dict):
        return None
    return _all([c.check(sub, v, d) for key, sub in arg.items() if key in v])


def _property_names(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    if not isinstance(v, dict):
        return True
    return _all([c.check(arg, k, d) for k in v])


def _count(kind: type, low: bool) -> _Rule:
    def rule(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
        if not isinstance(v, kind):
            return True
        if not isinstance(arg, int) or isinstance(arg, bool):
            return None
        size = len(cast(Sized, v))
        return size >= arg if low else size <= arg

    return rule


def _bound(test: Callable[[Any, Any], bool]) -> _Rule:
    def rule(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
        if not _is_number(v):
            return True
        if not _is_number(arg):
            return None
        return test(v, arg)

    return rule


def _multiple_of(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    if not _is_number(v):
        return True
    if isinstance(v, int) and isinstance(arg, int) and not isinstance(arg, bool) and arg > 0:
        return v % arg == 0
    return None  # float arithmetic: jsonschema's own rules decide


def _pattern(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    if not isinstance(v, str):
        return True
    regex = _regex(arg) if isinstance(arg, str) else None
    return None if regex is None else regex.search(v) is not None


def _items(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    if not isinstance(v, list):
        return True
    prefix = s.get("prefixItems", [])
    if not isinstance(prefix, list):
        return None
    return _all([c.check(arg, item, d) for item in v[len(prefix) :]])


def _prefix_items(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    if not isinstance(v, list):
        return True
    if not isinstance(arg, list):
        return None
    return _all([c.check(sub, item, d) for sub, item in zip(arg, v, strict=False)])


def _unique_items(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    if arg is False or not isinstance(v, list):
        return True
    if arg is not True:
        return None
    if all(isinstance(item, str) for item in v):
        return len(set(v)) == len(v)
    return None  # 1 and 1.0 are equal, 1 and True are not: left to jsonschema


def _all_of(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    return _all([c.check(sub, v, d) for sub in arg]) if isinstance(arg, list) else None


def _any_of(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    return _any([c.check(sub, v, d) for sub in arg]) if isinstance(arg, list) else None


def _one_of(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    if not isinstance(arg, list):
        return None
    results = [c.check(sub, v, d) for sub in arg]
    if None in results:
        return None
    return results.count(True) == 1


def _not(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    result = c.check(arg, v, d)
    return None if result is None else not result


def _if(c: _Checker, arg: Any, v: Any, s: Mapping[str, Any], d: int) -> Tri:
    condition = c.check(arg, v, d)
    if condition is None:
        return None
    branch = "then" if condition else "else"
    return c.check(s[branch], v, d) if branch in s else True


_PAIRED = frozenset({"then", "else"})
_RULES: dict[str, _Rule] = {
    "type": _type,
    "enum": _enum,
    "const": _const,
    "$ref": _ref,
    "properties": _properties,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional,
    "required": _required,
    "dependentRequired": _dependent_required,
    "dependentSchemas": _dependent_schemas,
    "propertyNames": _property_names,
    "minProperties": _count(dict, True),
    "maxProperties": _count(dict, False),
    "minItems": _count(list, True),
    "maxItems": _count(list, False),
    "minLength": _count(str, True),
    "maxLength": _count(str, False),
    "minimum": _bound(lambda v, a: v >= a),
    "maximum": _bound(lambda v, a: v <= a),
    "exclusiveMinimum": _bound(lambda v, a: v > a),
    "exclusiveMaximum": _bound(lambda v, a: v < a),
    "multipleOf": _multiple_of,
    "pattern": _pattern,
    "items": _items,
    "prefixItems": _prefix_items,
    "uniqueItems": _unique_items,
    "allOf": _all_of,
    "anyOf": _any_of,
    "oneOf": _one_of,
    "not": _not,
    "if": _if,
}


def instance_valid(schema: Any, instance: Any) -> Tri:
    """``True``: ``instance`` certainly satisfies ``schema``; ``False``: it certainly does
    not; ``None``: this module cannot tell (ask jsonschema)."""
    try:
        return _Checker(schema).check(schema, instance)
    except RecursionError:  # pragma: no cover - depth is bounded above
        return None


# --- the metaschema, for the keywords above ------------------------------------------------

_TYPES = frozenset({"null", "boolean", "object", "array", "number", "string", "integer"})


def _non_negative(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _schemas(value: Any, depth: int) -> bool:
    return isinstance(value, list) and len(value) > 0 and all(_schema(s, depth) for s in value)


def _schema_map(value: Any, depth: int) -> bool:
    return isinstance(value, dict) and all(_schema(s, depth) for s in value.values())


def _strings(value: Any) -> bool:
    return (
        isinstance(value, list)
        and all(isinstance(s, str) for s in value)
        and len(set(value)) == len(value)
    )


def _schema(schema: Any, depth: int = 0) -> bool:
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict) or depth > 32:
        return False
    for keyword, value in schema.items():
        rule = _SCHEMA_RULES.get(keyword)
        if rule is None or not rule(value, depth + 1):
            return False
    return True


_SCHEMA_RULES: dict[str, Callable[[Any, int], bool]] = {
    "type": lambda v, d: (
        v in _TYPES
        if isinstance(v, str)
        else isinstance(v, list) and len(v) > 0 and _strings(v) and set(v) <= _TYPES
    ),
    "enum": lambda v, d: isinstance(v, list),
    "const": lambda v, d: True,
    "$ref": lambda v, d: isinstance(v, str) and re.fullmatch(r"#(/[^\s#%]*)*", v) is not None,
    "$id": lambda v, d: isinstance(v, str) and re.fullmatch(r"[^#\s]*#?", v) is not None,
    "$schema": lambda v, d: v == _DRAFT_2020_12,
    "$comment": lambda v, d: isinstance(v, str),
    "title": lambda v, d: isinstance(v, str),
    "description": lambda v, d: isinstance(v, str),
    "default": lambda v, d: True,
    "examples": lambda v, d: isinstance(v, list),
    "deprecated": lambda v, d: isinstance(v, bool),
    "readOnly": lambda v, d: isinstance(v, bool),
    "writeOnly": lambda v, d: isinstance(v, bool),
    "format": lambda v, d: isinstance(v, str),
    "$defs": _schema_map,
    "properties": _schema_map,
    "patternProperties": lambda v, d: _schema_map(v, d) and all(_regex(p) is not None for p in v),
    "dependentSchemas": _schema_map,
    "additionalProperties": _schema,
    "propertyNames": _schema,
    "items": _schema,
    "not": _schema,
    "if": _schema,
    "then": _schema,
    "else": _schema,
    "prefixItems": _schemas,
    "allOf": _schemas,
    "anyOf": _schemas,
    "oneOf": _schemas,
    "required": lambda v, d: _strings(v),
    "dependentRequired": lambda v, d: (
        isinstance(v, dict) and all(_strings(names) for names in v.values())
    ),
    "minLength": lambda v, d: _non_negative(v),
    "maxLength": lambda v, d: _non_negative(v),
    "minItems": lambda v, d: _non_negative(v),
    "maxItems": lambda v, d: _non_negative(v),
    "minProperties": lambda v, d: _non_negative(v),
    "maxProperties": lambda v, d: _non_negative(v),
    "minimum": lambda v, d: _is_number(v),
    "maximum": lambda v, d: _is_number(v),
    "exclusiveMinimum": lambda v, d: _is_number(v),
    "exclusiveMaximum": lambda v, d: _is_number(v),
    "multipleOf": lambda v, d: _is_number(v) and v > 0,
    "pattern": lambda v, d: isinstance(v, str) and _regex(v) is not None,
    "uniqueItems": lambda v, d: isinstance(v, bool),
}


def schema_valid(schema: Any) -> bool:
    """``True``: ``schema`` certainly passes the Draft 2020-12 metaschema check; ``False``:
    this module cannot tell (ask ``Draft202012Validator.check_schema``)."""
    try:
        return _schema(schema)
    except RecursionError:  # pragma: no cover - depth is bounded above
        return False
