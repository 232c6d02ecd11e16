"""Documents for a JSON Schema, near its edge: mostly valid, often just not.

``SchemaDocuments`` builds a document by walking the schema the way a valid document
would satisfy it (``$ref``, ``allOf``, a ``oneOf``/``anyOf`` branch, ``if``/``then``/
``else``, required and optional properties, bounds, enums, patterns), then applies a few
mutations a careless author or a hostile client would make: a wrong type, an integral
float for an integer, a number one past its bound, a missing or extra key, a broken
string, a duplicated item. Sometimes it merges two ``oneOf`` branches, so a document
matches both (which ``oneOf`` must refuse).

It is a generator, not a validator: whether a document is valid is for jsonschema to
say (tests/unit/test_schema_differential.py); this only aims near the boundary so that
both answers come up often. All choices come from one ``random.Random``: Hypothesis's
``st.randoms()`` (each call a choice it can shrink) or a plain seeded one for bulk runs.

Strings for a ``pattern`` come from ``pattern_pools``: the candidate strings that match
it (Hypothesis's ``from_regex`` costs about a millisecond a string here, which the bulk
runs cannot afford). Values stay what the strict config parser takes (finite numbers,
integers within int64, no lone surrogates), so only the schema decides.
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

INT64 = (-(2**63), 2**63 - 1)
# Strings shaped like the values our formats hold; a pattern's pool is those that match it.
CANDIDATE_STRINGS = (
    "", "a", "z", "ab", "eth0", "eth1", "net0", "vf0", "bond0", "uplink-0", "a-b", "a_b", "a.b",
    "x" * 15, "x" * 16, "node-1", "node-1.example", "example.com", "example.com/net-a",
    "example.com/net_a", "dra.networking/macvlans", "0000:3b:00.1", "0000:3b:00.8",
    "02:00:00:00:00:01", "03:00:00:00:00:01", "v1", "v1alpha1", "v2beta3", "v0", "vlan/v1alpha1",
    "bond/v1alpha1", "Ethernet/v1", "3.11", "3.12", "3.9", "/usr/bin/python3", "/run/x.sock",
    "relative/path", "kernel+unix:///k.sock", "linux://", "abc_def", "aB1", "Ab", "A", "1", "0",
    "01", "123", "18446744073709551615", "-", "a-", "-a", "é", "eth 0", "eth/0", "eth:0", "\t",
    "bridge", "vepa", "private", "passthru", "802.3ad", "active-backup", "json", "text",
)  # fmt: skip
_TEXT_ALPHABET = "abcxyzABC019-_./: \té€\u2028"
_KEY_EXTRAS = ("extra", "x", "name", "mode", "vlan", "mtu", "type", "", "A", "é")


def pattern_pools(patterns: Iterable[str], extra: Iterable[str] = ()) -> dict[str, list[str]]:
    """Each pattern's candidates (``CANDIDATE_STRINGS`` and ``extra``) that it matches."""
    candidates = sorted(set(CANDIDATE_STRINGS) | set(extra))
    return {p: [s for s in candidates if re.search(p, s)] for p in set(patterns)}


def schema_patterns(schema: object) -> Iterator[str]:
    """Every ``pattern`` and ``patternProperties`` key in a schema, at any depth."""
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key == "patternProperties" and isinstance(value, Mapping):
                yield from value
            if key not in ("const", "enum", "default", "examples"):
                yield from schema_patterns(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from schema_patterns(item)


def schema_strings(value: object) -> Iterator[str]:
    """Every string in a JSON value (a document's own strings make good candidates)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield key
            yield from schema_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from schema_strings(item)


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Both schemas' constraints in one (roughly: enough to aim a document at both)."""
    out = dict(a)
    for key, value in b.items():
        mine = out.get(key)
        if key in ("properties", "patternProperties", "dependentSchemas") and isinstance(
            mine, Mapping
        ):
            both = dict(mine)
            for name, sub in value.items():
                both[name] = {"allOf": [both[name], sub]} if name in both else sub
            out[key] = both
        elif key == "required" and isinstance(mine, list):
            out[key] = mine + [name for name in value if name not in mine]
        elif key == "type" and mine is not None:
            a_types = set(mine if isinstance(mine, list) else [mine])
            b_types = value if isinstance(value, list) else [value]
            common = [t for t in b_types if t in a_types]
            out[key] = common or value
        else:
            out[key] = value
    return out


class SchemaDocuments:
    """Near-valid documents of one root schema, every choice from ``rnd``."""

    def __init__(
        self,
        root: Any,
        rnd: random.Random,
        pools: Mapping[str, Sequence[str]],
        *,
        key_names: Sequence[str] = (),
        max_depth: int = 6,
    ) -> None:
        self.root = root
        self.rnd = rnd
        self.pools = pools
        self.keys = tuple(key_names) + _KEY_EXTRAS
        self.max_depth = max_depth

    # --- a document aimed at validity -------------------------------------------------

    def document(self) -> Any:
        return self.value(self.root, 0)

    def value(self, schema: Any, depth: int) -> Any:
        if not isinstance(schema, Mapping) or depth > self.max_depth:
            return self.anything(depth)
        schema = self._flatten(schema)
        rnd = self.rnd
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return copy.deepcopy(rnd.choice(enum))
        kind = self._kind(schema)
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, depth)
        if kind == "string":
            return self._string(schema)
        if kind in ("integer", "number"):
            return self._number(schema, kind)
        if kind == "boolean":
            return rnd.random() < 0.5
        if kind == "null":
            return None
        return self.anything(depth)

    def _resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return True
        node = self.root
        for escaped in ref[1:].split("/")[1:]:
            token = escaped.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or token not in node:
                return True
            node = node[token]
        return node

    def _flatten(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        """``$ref``, ``allOf``, one ``oneOf``/``anyOf`` branch (two, sometimes) and a side
        of ``if`` merged into one schema; ``not`` dropped (rarely aimed at, left to chance)."""
        rnd = self.rnd
        out = dict(schema)
        for _ in range(16):
            if "$ref" in out:
                target = self._resolve(out.pop("$ref"))
                out = _merge(target, out) if isinstance(target, Mapping) else out
            elif "allOf" in out:
                for branch in out.pop("allOf"):
                    out = _merge(out, branch) if isinstance(branch, Mapping) else out
            elif "oneOf" in out or "anyOf" in out:
                branches = list(out.pop("oneOf", None) or out.pop("anyOf"))
                picked = rnd.sample(branches, 2 if len(branches) > 1 and rnd.random() < 0.2 else 1)
                for branch in picked:
                    out = _merge(out, branch) if isinstance(branch, Mapping) else out
            elif "if" in out:
                condition, then, otherwise = out.pop("if"), out.pop("then", {}), out.pop("else", {})
                side = [condition, then] if rnd.random() < 0.5 else [otherwise]
                for branch in side:
                    out = _merge(out, branch) if isinstance(branch, Mapping) else out
            else:
                break
        out.pop("not", None)
        return out

    def _kind(self, schema: Mapping[str, Any]) -> str | None:
        kind = schema.get("type")
        if isinstance(kind, list):
            return str(self.rnd.choice(kind)) if kind else None
        if isinstance(kind, str):
            return kind
        if any(
            k in schema
            for k in (
                "properties",
                "required",
                "additionalProperties",
                "patternProperties",
                "propertyNames",
                "minProperties",
            )
        ):
            return "object"  # fmt: skip
        if any(k in schema for k in ("items", "prefixItems", "minItems", "uniqueItems")):
            return "array"
        if any(k in schema for k in ("pattern", "minLength", "maxLength")):
            return "string"
        if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "multipleOf")):
            return "number"
        return None

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        rnd = self.rnd
        properties = schema.get("properties") or {}
        required = [k for k in schema.get("required") or [] if isinstance(k, str)]
        keys = required + [k for k in properties if k not in required and rnd.random() < 0.5]
        out: dict[str, Any] = {}
        extra_schema = schema.get("additionalProperties", True)
        for pattern, sub in (schema.get("patternProperties") or {}).items():
            pool = self.pools.get(pattern) or []
            for key in rnd.sample(pool, min(len(pool), rnd.randint(0, 2))):
                out[key] = self.value(sub, depth + 1)
        if extra_schema is not False and rnd.random() < 0.3:
            names = schema.get("propertyNames")
            pool = self.pools.get(names.get("pattern", ""), []) if isinstance(names, dict) else []
            for key in rnd.sample(pool or list(self.keys), rnd.randint(1, 2)):
                out[key] = self.value(extra_schema, depth + 1)
        for key in keys:
            out[key] = self.value(properties.get(key, extra_schema), depth + 1)
        for trigger, names in (schema.get("dependentRequired") or {}).items():
            if trigger in out:
                for name in names:
                    out.setdefault(name, self.value(properties.get(name, True), depth + 1))
        for trigger, sub in (schema.get("dependentSchemas") or {}).items():
            if trigger in out and isinstance(sub, Mapping):
                more = self.value({"type": "object", **sub}, depth + 1)
                if isinstance(more, dict):
                    out.update(more)
        while len(out) < schema.get("minProperties", 0):
            out[f"k{len(out)}"] = self.value(extra_schema, depth + 1)
        return out

    def _array(self, schema: Mapping[str, Any], depth: int) -> list[Any]:
        rnd = self.rnd
        prefix = schema.get("prefixItems") or []
        items = schema.get("items", True)
        low = max(int(schema.get("minItems", 0)), 0)
        high = int(schema.get("maxItems", low + 3))
        size = rnd.randint(low, max(low, min(high, low + 3)))
        out = [self.value(prefix[i] if i < len(prefix) else items, depth + 1) for i in range(size)]
        if schema.get("uniqueItems") and rnd.random() < 0.8:
            unique: list[Any] = []
            for item in out:
                if item not in unique or isinstance(item, bool):
                    unique.append(item)
            out = unique
        return out

    def _string(self, schema: Mapping[str, Any]) -> str:
        rnd = self.rnd
        pattern = schema.get("pattern")
        low = int(schema.get("minLength", 0))
        high = int(schema.get("maxLength", low + 12))
        if isinstance(pattern, str):
            pool = [s for s in self.pools.get(pattern, []) if low <= len(s) <= high]
            if pool:
                return str(rnd.choice(pool))
        size = rnd.randint(low, max(low, min(high, low + 12)))
        return "".join(rnd.choice(_TEXT_ALPHABET) for _ in range(size))

    def _number(self, schema: Mapping[str, Any], kind: str) -> int | float:
        rnd = self.rnd
        low = schema.get("minimum", schema.get("exclusiveMinimum", -100))
        high = schema.get("maximum", schema.get("exclusiveMaximum", 10_000))
        low, high = int(max(low, INT64[0])), int(min(high, INT64[1]))
        if "exclusiveMinimum" in schema:
            low += 1
        if "exclusiveMaximum" in schema:
            high -= 1
        value: int | float = rnd.choice([low, high, rnd.randint(min(low, high), max(low, high))])
        step = schema.get("multipleOf")
        if isinstance(step, int | float) and step > 0 and not isinstance(step, bool):
            value = round(value / step) * step
        if kind == "number" and rnd.random() < 0.3:
            value = float(value) + rnd.choice([0.0, 0.5, 0.25])
        return value

    def anything(self, depth: int) -> Any:
        rnd = self.rnd
        roll = rnd.random()
        if roll < 0.7 or depth >= self.max_depth:
            return self.scalar()
        if roll < 0.85:
            return [self.scalar() for _ in range(rnd.randint(0, 3))]
        return {rnd.choice(self.keys): self.scalar() for _ in range(rnd.randint(0, 3))}

    def scalar(self) -> Any:
        rnd = self.rnd
        return rnd.choice(
            [None, True, False, 0, 1, -1, 2, 68, 4094, 4095, 65535, 65536, INT64[0], INT64[1],
             0.5, 1.0, 1500.0, -0.0, 2.5, 1e300, "", "a", "eth0", "x" * 16, rnd.choice(self.keys),
             rnd.randint(-5, 5000), rnd.choice(CANDIDATE_STRINGS)]
        )  # fmt: skip

    # --- mutations ---------------------------------------------------------------------

    def mutate(self, document: Any, count: int) -> Any:
        """``document`` (a copy) with ``count`` random edits; the root keeps its type."""
        document = copy.deepcopy(document)
        for _ in range(count):
            nodes = list(_nodes(document))
            parent, key = nodes[self.rnd.randrange(len(nodes))]
            self._edit(document if parent is None else parent, key)
        return document

    def _edit(self, parent: Any, key: Any) -> None:
        rnd = self.rnd
        action = rnd.choice(
            ["replace", "retype", "bump", "delete", "add", "add", "duplicate", "text"]
        )
        if key is None:  # the root itself: edit its contents
            action = "add" if action not in ("add", "duplicate") else action
            holder = parent
        else:
            holder = parent[key]
        if action == "add" or (key is None and action == "duplicate"):
            if isinstance(holder, dict):
                holder[rnd.choice(self.keys)] = self.anything(self.max_depth - 1)
            elif isinstance(holder, list):
                holder.append(self.anything(self.max_depth - 1))
            return
        if action == "duplicate":
            if isinstance(holder, list) and holder:
                holder.append(copy.deepcopy(rnd.choice(holder)))
            return
        if action == "delete":
            del parent[key]
        elif action == "replace":
            parent[key] = self.anything(self.max_depth - 1)
        elif action == "retype":
            parent[key] = _retyped(holder, rnd)
        elif action == "bump" and isinstance(holder, int | float) and not isinstance(holder, bool):
            bumped = holder + rnd.choice([-1, 1, 0.5])
            parent[key] = bumped if INT64[0] <= bumped <= INT64[1] else holder
        elif action == "text" and isinstance(holder, str):
            parent[key] = rnd.choice([holder + rnd.choice(_TEXT_ALPHABET), holder[:-1],
                                      holder.upper(), "", " " + holder])  # fmt: skip


def _retyped(value: Any, rnd: random.Random) -> Any:
    """The same value in another JSON type (1 -> 1.0, "1", True, [1], ...)."""
    if isinstance(value, bool):
        return rnd.choice([int(value), str(value).lower(), None])
    if isinstance(value, int):
        return rnd.choice([float(value), str(value), value != 0, [value]])
    if isinstance(value, float):
        whole = int(value) if INT64[0] <= value <= INT64[1] else 0
        return rnd.choice([whole, str(value), [value]])
    if isinstance(value, str):
        return rnd.choice([[value], {value: value}, len(value), None])
    if isinstance(value, list):
        return rnd.choice([value[0] if value else None, {str(i): v for i, v in enumerate(value)}])
    if isinstance(value, dict):
        return rnd.choice([list(value.values()), list(value), None])
    return rnd.choice([0, "", False])


def _nodes(value: Any, parent: Any = None, key: Any = None) -> Iterator[tuple[Any, Any]]:
    """(container, key) of every node; (None, None) for the root."""
    yield parent, key
    if isinstance(value, dict):
        for name, item in value.items():
            yield from _nodes(item, value, name)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _nodes(item, value, index)
