"""Reusable Hypothesis strategies for config decoding (and later the real contract bundles).

``mutated_configs`` works on a tree in which JSON objects are lists of key/value pairs, so a
mutation can write the same key twice, which no ``dict`` can express.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, TypeVar

from hypothesis import strategies as st

MutationKind = Literal["drop", "add", "replace", "duplicate"]
MUTATION_KINDS: tuple[MutationKind, ...] = ("drop", "add", "replace", "duplicate")
T = TypeVar("T")


def json_scalars(*, allow_non_finite: bool = False) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        # Mostly plausible values, sometimes far outside int64.
        st.integers(min_value=-(2**15), max_value=2**15) | st.integers(),
        st.floats(allow_nan=allow_non_finite, allow_infinity=allow_non_finite),
        st.text(max_size=12),
    )


def json_values(
    keys: st.SearchStrategy[str] | None = None, *, allow_non_finite: bool = False
) -> st.SearchStrategy[Any]:
    """Arbitrary JSON values; pass ``keys`` to bias object keys towards a schema's names."""
    key_strategy = keys if keys is not None else st.text(max_size=8)
    return st.recursive(
        json_scalars(allow_non_finite=allow_non_finite),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(key_strategy, children, max_size=4)
        ),
        max_leaves=12,
    )


def schema_keys(schema: object) -> list[str]:
    """Every property name a schema mentions, sorted, for biasing generated keys."""
    found: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, Mapping):
            for keyword in ("properties", "dependentRequired"):
                if isinstance(node.get(keyword), Mapping):
                    found.update(node[keyword])
            if isinstance(node.get("required"), list):
                found.update(k for k in node["required"] if isinstance(k, str))
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    return sorted(found)


def keys_for(schema: object) -> st.SearchStrategy[str]:
    names = schema_keys(schema)
    return st.sampled_from(names) | st.text(max_size=8) if names else st.text(max_size=8)


def config_values(schema: object, *, allow_non_finite: bool = False) -> st.SearchStrategy[Any]:
    """``json_values`` with object keys biased towards ``schema``'s names, built once per
    schema: a property test that built it in its body got a new recursive strategy for
    every example, and Hypothesis validated each one again, which cost more than decoding
    the example (13.8 s of CPU against 5.3 s for 1,000 examples of one bundle)."""
    return _config_values(json.dumps(schema, sort_keys=True), allow_non_finite)


def arbitrary_configs(schema: object, *, allow_non_finite: bool = False) -> st.SearchStrategy[Any]:
    """An object of up to 6 of ``schema``'s keys (or others) with any JSON values, or any
    JSON value at all (built once per schema, like ``config_values``)."""
    return _arbitrary_configs(json.dumps(schema, sort_keys=True), allow_non_finite)


@cache
def _config_values(schema_json: str, allow_non_finite: bool) -> st.SearchStrategy[Any]:
    return json_values(keys_for(json.loads(schema_json)), allow_non_finite=allow_non_finite)


@cache
def _arbitrary_configs(schema_json: str, allow_non_finite: bool) -> st.SearchStrategy[Any]:
    values = _config_values(schema_json, allow_non_finite)
    return st.dictionaries(keys_for(json.loads(schema_json)), values, max_size=6) | values


@cache
def _any_values() -> st.SearchStrategy[Any]:
    return json_values()


def raw_inputs() -> st.SearchStrategy[bytes | str]:
    """Bytes, text, and text made of JSON's own characters (to get past the tokenizer)."""
    jsonish = st.text(alphabet='{}[]":,.-+0123456789eEtruefalsnNIiy\\/ \n\tu', max_size=80)
    nested = st.integers(min_value=0, max_value=40).map(lambda n: '{"a":' * n + "1" + "}" * n)
    return st.one_of(st.binary(max_size=200), st.text(max_size=80), jsonish, nested)


# --- mutations of a valid config ------------------------------------------------------------


@dataclass
class _Object:
    pairs: list[tuple[str, Any]]


def _tree(value: Any) -> Any:
    if isinstance(value, dict):
        return _Object([(k, _tree(v)) for k, v in value.items()])
    if isinstance(value, list):
        return [_tree(v) for v in value]
    return value


def _dump(node: Any) -> str:
    if isinstance(node, _Object):
        return "{" + ", ".join(f"{json.dumps(k)}: {_dump(v)}" for k, v in node.pairs) + "}"
    if isinstance(node, list):
        return "[" + ", ".join(_dump(v) for v in node) + "]"
    return json.dumps(node)


def _containers(node: Any) -> Iterator[Any]:
    if isinstance(node, _Object):
        yield node
        for _, value in node.pairs:
            yield from _containers(value)
    elif isinstance(node, list):
        yield node
        for value in node:
            yield from _containers(value)


def mutated_configs(
    valid: Mapping[str, Any], values: st.SearchStrategy[Any] | None = None
) -> st.SearchStrategy[tuple[MutationKind, str]]:
    """One mutation of ``valid``, as (kind, raw JSON text).

    ``duplicate`` always yields text with a repeated key in some object.

    Built once per (valid config, values): the property tests ask for it in every example,
    and Hypothesis labels a new composite strategy from its function's source (0.7 ms).
    """
    return _mutations(json.dumps(valid), values if values is not None else _any_values())


_MUTATION_KIND = st.sampled_from(MUTATION_KINDS)
_NEW_KEY = st.text(max_size=8)


def _pick(draw: st.DrawFn, items: Sequence[T]) -> T:
    """``draw(st.sampled_from(items))`` (the same draw: an index, shrinking towards the
    first) without a new strategy per example, which Hypothesis validated and labelled
    from the items' (a config tree's) repr."""
    return items[draw(st.integers(0, len(items) - 1))]


@cache
def _mutations(
    valid_json: str, new_values: st.SearchStrategy[Any]
) -> st.SearchStrategy[tuple[MutationKind, str]]:
    return _mutation(valid_json, new_values)


@st.composite
def _mutation(
    draw: st.DrawFn, valid_json: str, new_values: st.SearchStrategy[Any]
) -> tuple[MutationKind, str]:
    tree = _tree(json.loads(valid_json))
    containers = list(_containers(tree))
    objects = [c for c in containers if isinstance(c, _Object)]
    filled = [c for c in containers if (c.pairs if isinstance(c, _Object) else c)]
    kind = draw(_MUTATION_KIND)
    if kind in ("drop", "duplicate") and not any(o.pairs for o in objects):
        kind = "add"
    if kind == "replace" and not filled:
        kind = "add"
    if kind == "drop":
        target = _pick(draw, [o for o in objects if o.pairs])
        del target.pairs[draw(st.integers(0, len(target.pairs) - 1))]
    elif kind == "add":
        target = _pick(draw, objects)
        taken = {k for k, _ in target.pairs}
        key = draw(_NEW_KEY.filter(lambda k: k not in taken))
        target.pairs.append((key, _tree(draw(new_values))))
    elif kind == "replace":
        container = _pick(draw, filled)
        size = len(container.pairs) if isinstance(container, _Object) else len(container)
        index = draw(st.integers(0, size - 1))
        if isinstance(container, _Object):
            key, _ = container.pairs[index]
            container.pairs[index] = (key, _tree(draw(new_values)))
        else:
            container[index] = _tree(draw(new_values))
    else:
        target = _pick(draw, [o for o in objects if o.pairs])
        key, old = _pick(draw, target.pairs)
        # The old value or a new one, half and half, shrinking towards the old one (as
        # st.just(old) | new_values.map(_tree) did; building that one_of every example
        # walked the whole values strategy to see whether it was empty).
        value = _tree(draw(new_values)) if draw(st.booleans()) else old
        target.pairs.insert(draw(st.integers(0, len(target.pairs))), (key, value))
    return kind, _dump(tree)


# The three cross-field rule kinds, as the config tests and property tests use them.
CROSS_FIELD_RULES: list[dict[str, Any]] = [
    {
        "id": "vlan-forbids-mode",
        "kind": "forbids",
        "when": "/vlanId",
        "field": "/mode",
        "message": "mode cannot be set together with vlanId",
    },
    {
        "id": "qos-requires-vlan",
        "kind": "requires",
        "when": "/vf/qos",
        "field": "/vf/vlan",
        "minimum": 1,
        "message": "a non-zero qos needs a vlan >= 1",
    },
    {
        "id": "min-rate-le-max-rate",
        "kind": "lessOrEqual",
        "lower": "/vf/minTxRateMbps",
        "upper": "/vf/maxTxRateMbps",
        "message": "minTxRateMbps must not exceed maxTxRateMbps",
    },
]
