"""Reusable Hypothesis strategies for config decoding and the real contract bundles.

``mutated_configs`` works on a tree in which JSON objects are lists of key/value pairs, so a
mutation can write the same key twice, which no ``dict`` can express.

Why JSON values are drawn by hand rather than with ``st.recursive``: the property tests run
1,000 examples each, and their CPU went to Hypothesis's draw machinery, not to the code under
test. Each ``data.draw`` of a strategy costs a span, and each choice about 50 us of engine
work (the choice tree, replay, mutation); ``st.recursive`` over ``st.one_of`` spent about 7
strategy draws per leaf (the recursion level, its ``one_of``, a sampled branch, the scalar's
``one_of``, its sampled branch, the scalar). Here one draw picks a node's whole shape (a
leaf's kind, or a container's kind, size and depth) from a table weighted like
``st.recursive``'s, so a leaf costs one or two choices, a container one, and an object's key
one or two.
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


@dataclass(frozen=True)
class _Leaf:
    """A scalar: ``constant`` itself, or a draw from ``strategy`` when there is one."""

    constant: Any = None
    strategy: st.SearchStrategy[Any] | None = None


@dataclass(frozen=True)
class _Container:
    is_object: bool
    size: int
    child_bound: int  # children are drawn with this depth bound


class JSONTrees:
    """Lists and objects of ``leaves``, shaped like ``st.recursive(st.one_of(leaves),
    lambda c: st.lists(c, max_size=max_items) | st.dictionaries(keys, c, max_size=max_items),
    max_leaves=max_leaves)``, drawn as plain recursion inside one ``st.composite``.

    ``leaves`` are equally likely (repeat one to weigh it); a strategy is drawn, anything
    else is that constant, which costs no draw. Object keys are ``key_names`` and text
    half and half, or text alone when there are no names; ``objects=False`` makes lists
    alone (``extend`` of ``st.lists`` only).
    """

    def __init__(
        self,
        leaves: Sequence[object],
        *,
        key_names: Sequence[str] = (),
        key_size: int = 8,
        max_leaves: int = 12,
        max_items: int = 4,
        objects: bool = True,
    ) -> None:
        self._max_leaves = max_leaves
        # st.recursive nests its extension while 2 ** depth <= max_leaves.
        self._max_depth = max_leaves.bit_length()
        table = [
            _Leaf(strategy=leaf) if isinstance(leaf, st.SearchStrategy) else _Leaf(leaf)
            for leaf in leaves
        ]
        self._shapes = [
            self._shapes_within(bound, table, max_items, objects)
            for bound in range(self._max_depth + 1)
        ]
        self._key_names = tuple(key_names)
        # One draw for a schema's name; a text key draws once more.
        self._key_index = st.integers(0, 2 * len(key_names) - 1) if key_names else None
        self._key_text = st.text(max_size=key_size)
        self.values: st.SearchStrategy[Any] = _values_of(self)

    @staticmethod
    def _shapes_within(
        bound: int, leaves: list[_Leaf], max_items: int, objects: bool
    ) -> st.SearchStrategy[_Leaf | _Container]:
        """A node drawn with depth bound ``bound`` picks k in 0..bound uniformly, as
        ``st.recursive``'s ``one_of`` of its ``bound + 1`` nesting levels does: k = 0 is a
        leaf, otherwise a list or an object (half and half) of 0 to ``max_items`` items
        whose children have bound k - 1. One draw, from a table in which an entry's count
        is its weight: the leaves weigh as much as each depth level's containers."""
        sizes = range(max_items + 1)
        kinds = (False, True) if objects else (False,)
        containers = [
            _Container(is_object, size, child_bound)
            for child_bound in range(bound)
            for is_object in kinds
            for size in sizes
        ]
        # As many entries for the leaves as for each depth level's containers.
        per_level = len(leaves) * len(sizes) * len(kinds)
        return st.sampled_from(
            [*leaves * (per_level // len(leaves)), *[c for c in containers for _ in leaves]]
        )

    def key(self, draw: st.DrawFn) -> str:
        if self._key_index is not None:
            index = draw(self._key_index)
            if index < len(self._key_names):
                return self._key_names[index]
        return draw(self._key_text)

    def value(self, draw: st.DrawFn) -> Any:
        # The leaves left, in a list that the whole recursion counts down.
        return self._node(draw, self._max_depth, [self._max_leaves])

    def _node(self, draw: st.DrawFn, bound: int, leaves_left: list[int]) -> Any:
        shape = draw(self._shapes[bound])
        if isinstance(shape, _Leaf):
            leaves_left[0] -= 1
            return shape.constant if shape.strategy is None else draw(shape.strategy)
        # Past max_leaves a container stops growing (st.recursive drew the whole value
        # again, which cost the draws made so far).
        if shape.is_object:
            found: dict[str, Any] = {}
            for _ in range(shape.size):
                if leaves_left[0] <= 0:
                    break
                key = self.key(draw)
                found[key] = self._node(draw, shape.child_bound, leaves_left)
            return found
        items: list[Any] = []
        for _ in range(shape.size):
            if leaves_left[0] <= 0:
                break
            items.append(self._node(draw, shape.child_bound, leaves_left))
        return items


@st.composite
def _values_of(draw: st.DrawFn, trees: JSONTrees) -> Any:
    return trees.value(draw)


def lists_of(elements: st.SearchStrategy[T], *, max_size: int) -> st.SearchStrategy[list[T]]:
    """``st.lists(elements, max_size=max_size)`` whose size is one draw (0 to ``max_size``,
    the same mean), not one boolean choice per element and one more to stop."""
    return _sized(elements, st.integers(0, max_size))


def dicts_of(
    keys: st.SearchStrategy[str], values: st.SearchStrategy[T], *, max_size: int
) -> st.SearchStrategy[dict[str, T]]:
    """``st.dictionaries`` sized like ``lists_of``; a repeated key keeps its last value
    (``st.dictionaries`` drew the key again)."""
    return lists_of(st.tuples(keys, values), max_size=max_size).map(dict)


@st.composite
def _sized(
    draw: st.DrawFn, elements: st.SearchStrategy[T], sizes: st.SearchStrategy[int]
) -> list[T]:
    return [draw(elements) for _ in range(draw(sizes))]


def _config_leaves(allow_non_finite: bool) -> list[object]:
    """None, a boolean, a small int, any int, a float or a text, one time in six each,
    as ``st.one_of`` of their six strategies made them; None first, as shrinking goes."""
    return [
        None,
        None,
        False,
        True,
        # Mostly plausible values, sometimes far outside int64.
        *[st.integers(min_value=-(2**15), max_value=2**15)] * 2,
        *[st.integers()] * 2,
        *[st.floats(allow_nan=allow_non_finite, allow_infinity=allow_non_finite)] * 2,
        *[st.text(max_size=12)] * 2,
    ]


def json_values(
    key_names: Sequence[str] = (), *, allow_non_finite: bool = False
) -> st.SearchStrategy[Any]:
    """Arbitrary JSON values; pass ``key_names`` to bias object keys towards a schema's."""
    return JSONTrees(_config_leaves(allow_non_finite), key_names=key_names).values


MAX_TOP_KEYS = 6  # an arbitrary config's own keys


@st.composite
def _configs_of(draw: st.DrawFn, trees: JSONTrees) -> Any:
    """An object of up to ``MAX_TOP_KEYS`` keys with any values, or any value at all."""
    if not draw(_IS_WHOLE_OBJECT):
        return trees.value(draw)
    return {trees.key(draw): trees.value(draw) for _ in range(draw(_TOP_KEYS))}


_IS_WHOLE_OBJECT = st.booleans()
_TOP_KEYS = st.integers(0, MAX_TOP_KEYS)


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


def config_values(schema: object, *, allow_non_finite: bool = False) -> st.SearchStrategy[Any]:
    """``json_values`` with object keys biased towards ``schema``'s names, built once per
    schema: a property test that built it in its body got a new strategy for every
    example, and Hypothesis validated each one again, which cost more than decoding the
    example (13.8 s of CPU against 5.3 s for 1,000 examples of one bundle)."""
    return _trees(json.dumps(schema, sort_keys=True), allow_non_finite).values


def arbitrary_configs(schema: object, *, allow_non_finite: bool = False) -> st.SearchStrategy[Any]:
    """An object of up to 6 of ``schema``'s keys (or others) with any JSON values, or any
    JSON value at all (built once per schema, like ``config_values``)."""
    return _configs_of(_trees(json.dumps(schema, sort_keys=True), allow_non_finite))


@cache
def _trees(schema_json: str, allow_non_finite: bool) -> JSONTrees:
    return JSONTrees(
        _config_leaves(allow_non_finite), key_names=schema_keys(json.loads(schema_json))
    )


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
        # A taken key is lengthened until it is new: a ``.filter`` built a new strategy
        # every example and drew again on a collision.
        key = draw(_NEW_KEY)
        while key in taken:
            key += "_"
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
