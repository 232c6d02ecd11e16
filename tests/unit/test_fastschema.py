"""plugins.sdk._fastschema against jsonschema: it may only say "certainly" when jsonschema agrees.

``instance_valid`` answering True must mean both validators (the strict one of configs
and documents, the plain one of effect payloads) find no error, and False that both find
one; ``schema_valid`` answering True must mean the metaschema check passes. Checked on
every schema we ship, with the documents we ship and seeded mutations of them, and on
schemas broken on purpose. The shipped schemas must also be ones it can vouch for, or
start-up would import jsonschema after all.
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from plugins.effects.linux import linux_effects
from plugins.sdk._config import compile_schema
from plugins.sdk._contracts import BUNDLE_SCHEMA, BundleStore
from plugins.sdk._fastschema import instance_valid, schema_valid
from plugins.sdk._plan import thaw_json
from tests.strategies import JSONTrees

REPO = Path(__file__).resolve().parents[2]
SERVICE_CONFIG = json.loads(
    resources.files("plugins.sdk").joinpath("schemas", "service-config.schema.json").read_text()
)


def _packaged_schemas() -> Iterator[tuple[str, Any]]:
    for path in sorted(REPO.glob("*/**/schemas/*.schema.json")):
        if ".venv" not in path.parts:
            yield str(path.relative_to(REPO)), json.loads(path.read_text())


def _bundles() -> list[Any]:
    store = BundleStore()
    return [store.load(schema_id) for schema_id in store.schema_ids]


def _payload_schemas() -> list[tuple[str, Any]]:
    effects = linux_effects(_NoKernel())  # type: ignore[arg-type]
    return [(kind, thaw_json(effects.get(kind).payload_schema)) for kind in sorted(effects.kinds)]  # type: ignore[union-attr]


class _NoKernel:
    """Executors are only built here, never called."""


def _start_schemas() -> list[tuple[str, Any]]:
    """What a service start and its hooks check: these must be vouched for."""
    schemas = [("service config", SERVICE_CONFIG), ("bundle format", BUNDLE_SCHEMA)]
    schemas += [(b.descriptor.config_schema_id, dict(b.data["configSchema"])) for b in _bundles()]
    return schemas + _payload_schemas()


def _all_schemas() -> list[tuple[str, Any]]:
    return [*_start_schemas(), *_packaged_schemas()]


@functools.cache
def _validators(schema_json: str) -> tuple[Any, Any]:
    schema = json.loads(schema_json)
    return compile_schema(schema), jsonschema.Draft202012Validator(schema)


def _strict_errors(schema: Any, value: Any) -> bool:
    strict, _ = _validators(json.dumps(schema, sort_keys=True))
    return next(iter(strict.iter_errors(value)), None) is not None


def _plain_errors(schema: Any, value: Any) -> bool:
    _, plain = _validators(json.dumps(schema, sort_keys=True))
    return next(plain.iter_errors(value), None) is not None


def _agrees(schema: Any, value: Any) -> None:
    answer = instance_valid(schema, value)
    if answer is None:
        return
    strict, plain = _strict_errors(schema, value), _plain_errors(schema, value)
    assert strict == plain == (not answer), (schema, value, answer, strict, plain)


# ---------------------------------------------------------------------- schemas


@pytest.mark.parametrize(("name", "schema"), _start_schemas(), ids=lambda x: str(x)[:40])
def test_the_schemas_of_a_start_and_its_hooks_are_vouched_for(name: str, schema: Any) -> None:
    """Start-up skips jsonschema only if these are certainly valid; and they are."""
    assert schema_valid(schema), name
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize(("name", "schema"), list(_packaged_schemas()), ids=lambda x: str(x)[:40])
def test_a_vouched_for_file_format_passes_the_metaschema(name: str, schema: Any) -> None:
    if schema_valid(schema):  # the others are checked by jsonschema, as before
        jsonschema.Draft202012Validator.check_schema(schema)


BROKEN_SCHEMAS = [
    {"type": "objekt"},
    {"type": []},
    {"type": ["string", "string"]},
    {"minLength": -1},
    {"maxItems": 1.5},
    {"required": ["a", "a"]},
    {"required": "a"},
    {"pattern": "("},
    {"patternProperties": {"(": {}}},
    {"properties": {"a": {"type": "nope"}}},
    {"properties": {"a": 1}},
    {"items": [{"type": "string"}]},
    {"enum": "a"},
    {"multipleOf": 0},
    {"minimum": "1"},
    {"allOf": []},
    {"anyOf": {}},
    {"$defs": {"x": {"type": 3}}},
    {"dependentRequired": {"a": ["b", "b"]}},
    {"uniqueItems": "yes"},
    {"$id": "#frag"},
    {"if": {"type": "bad"}, "then": {}},
    {"additionalProperties": {"minProperties": -2}},
]


@pytest.mark.parametrize("schema", BROKEN_SCHEMAS, ids=str)
def test_a_broken_schema_is_never_vouched_for(schema: Any) -> None:
    assert not schema_valid(schema)
    with pytest.raises(jsonschema.SchemaError):
        jsonschema.Draft202012Validator.check_schema(schema)


_KEYWORD_VALUES = st.sampled_from(
    [-1, 0, 1, 2, 1.5, True, False, None, "", "a", "(", "^[a-z]+$", "#/$defs/x", [], ["a"],
     ["a", "a"], ["string"], ["string", "null"], {}, {"type": "string"}, {"a": {}}, "objekt",
     "integer", [{}], [{"type": "integer"}]]
)  # fmt: skip
_KEYWORDS = st.sampled_from(
    ["type", "enum", "const", "minLength", "maxLength", "minimum", "exclusiveMinimum",
     "multipleOf", "pattern", "required", "properties", "items", "prefixItems", "allOf",
     "oneOf", "not", "if", "then", "additionalProperties", "patternProperties",
     "dependentRequired", "dependentSchemas", "uniqueItems", "$ref", "$defs", "minItems",
     "propertyNames", "format", "title", "contains", "$anchor", "unknownKeyword"]
)  # fmt: skip


@seed(20261201)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_KEYWORDS, _KEYWORD_VALUES, max_size=4))
def test_a_vouched_for_schema_passes_the_metaschema(schema: dict[str, Any]) -> None:
    if schema_valid(schema):
        jsonschema.Draft202012Validator.check_schema(schema)


# ---------------------------------------------------------------------- instances


def _documents() -> list[tuple[Any, Any]]:
    """(schema, a document it should accept) for every schema with a document we ship."""
    service = {
        "socketDir": "s",
        "stateDir": "state",
        "tokenFile": "token",
        "kernel": "fake:///k.sock",
        "shutdownGraceSeconds": 5,
        "runtimeDir": None,
        "logFormat": "json",
        "metrics": {"textfile": "m.prom", "textfileIntervalSeconds": 2.5},
    }
    pairs: list[tuple[Any, Any]] = [(SERVICE_CONFIG, service)]
    for bundle in _bundles():
        pairs.append((BUNDLE_SCHEMA, dict(bundle.data)))
        schema = dict(bundle.data["configSchema"])
        pairs += [(schema, example) for example in bundle.valid_examples]
        pairs += [(schema, bad["config"]) for bad in bundle.invalid_examples]
    return pairs


DOCUMENTS = _documents()


def test_the_documents_we_ship_are_decided_without_jsonschema() -> None:
    """Valid ones are certainly valid (so no jsonschema at start-up); none is misjudged."""
    assert instance_valid(*DOCUMENTS[0]) is True
    for schema, document in DOCUMENTS:
        _agrees(schema, document)
    assert all(instance_valid(BUNDLE_SCHEMA, dict(b.data)) is True for b in _bundles())


_NUMBERS = st.sampled_from([0, 1, -1, 68, 65535, 65536, 1.0, 0.5, -0.0, 2.5, 1e300])
_STRINGS = st.sampled_from(["", "a", "A", "eth0", "x" * 16, "bond/v1alpha1", "fake:///k", "text"])
_INTEGERS = st.integers(-(2**40), 2**40)
_TEXT = st.text(max_size=20)
# None, a boolean, an integer, a number we know, a text and a string we know, one time in
# six each (as st.one_of of their six strategies); one composite, not st.recursive over
# st.one_of, whose many nested draws were most of these tests' CPU.
_VALUES = JSONTrees(
    [None, None, False, True, *[_INTEGERS, _NUMBERS, _TEXT, _STRINGS] * 2],
    max_leaves=6,
    max_items=3,
).values


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


_DOCUMENT = st.sampled_from(DOCUMENTS)
_MUTATIONS = st.integers(1, 3)
_ACTION = st.sampled_from(["replace", "delete", "add"])
_NEW_KEY = st.sampled_from(["extra", "port", "textfile", "mode", "vlan"])


@st.composite
def _mutated(draw: st.DrawFn) -> tuple[Any, Any]:
    schema, document = draw(_DOCUMENT)
    document = copy.deepcopy(document)
    for _ in range(draw(_MUTATIONS)):
        paths = list(_paths(document))
        # An index, as st.sampled_from(paths) drew, without a new strategy every time.
        path = paths[draw(st.integers(0, len(paths) - 1))]
        if not path:
            continue
        parent = document
        for part in path[:-1]:
            parent = parent[part]
        action = draw(_ACTION)
        if action == "replace":
            parent[path[-1]] = draw(_VALUES)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(_NEW_KEY)] = draw(_VALUES)
        else:
            parent.append(draw(_VALUES))
    return schema, document


@seed(20261201)
@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
def test_mutated_documents_are_judged_as_jsonschema_judges_them(pair: tuple[Any, Any]) -> None:
    _agrees(*pair)


@seed(20261201)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([s for _, s in _all_schemas()]), _VALUES)
def test_any_value_is_judged_as_jsonschema_judges_it(schema: Any, value: Any) -> None:
    _agrees(schema, value)


@pytest.mark.parametrize(
    ("schema", "value", "answer"),
    [
        ({"type": "integer"}, 1, True),
        ({"type": "integer"}, True, False),
        ({"type": "integer"}, 1.0, None),  # strict: no; plain: yes
        ({"type": "number"}, False, False),
        ({"enum": [1, "a"]}, True, False),
        ({"enum": [1]}, 1.0, True),
        ({"const": [1]}, [1], None),
        ({"uniqueItems": True}, [1, 1.0], None),
        ({"uniqueItems": True}, ["a", "b"], True),
        ({"uniqueItems": True}, ["a", "a"], False),
        ({"maxLength": 2}, "ab", True),  # maxLength read as minLength passed all of the above
        ({"maxLength": 1}, "ab", False),
        ({"$ref": "https://example.com/s"}, 1, None),
        ({"contains": {"type": "string"}}, ["a"], None),
        ({"not": {"type": "string"}}, 1, True),
        ({"if": {"required": ["a"]}, "then": {"required": ["b"]}}, {"a": 1}, False),
        ({"format": "ipv4"}, "not an address", True),  # neither validator asserts formats
    ],
    ids=str,
)
def test_what_it_answers_at_the_edges(schema: Any, value: Any, answer: bool | None) -> None:
    assert instance_valid(schema, value) is answer
    _agrees(schema, value)


def test_a_service_start_imports_no_jsonschema(tmp_path: Path) -> None:
    """Loading the service config and sealing every service's registry: no jsonschema."""
    config = tmp_path / "service.yaml"
    config.write_text("socketDir: s\nstateDir: st\ntokenFile: t\nkernel: fake:///k.sock\n")
    program = f"""
import sys
from pathlib import Path
import plugins.services as services
from plugins.sdk import Registry
from plugins.sdk.service import ServiceConfig
ServiceConfig.load(Path({str(config)!r}))
for register in services.SERVICES.values():
    Registry.of(register).seal()
leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("jsonschema", "referencing"))
print(leaked)
"""
    out = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
