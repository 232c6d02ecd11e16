"""Every schema the product validates against, judged as jsonschema judges it.

The product decides acceptance through its own entry points: a request config through
``ConfigValidator.check`` (every contract bundle's config schema, and the descriptor of
the independent example plugin), a file people write through ``DocumentSchema``, a
bundle's shape through the bundle loader, an effect payload through
``EffectRegistry.payload_problem``. Each is fed documents near the schema's boundary
(tests/schema_documents.py: built the way a valid document satisfies the schema, then
mutated: wrong types, missing and extra keys, numbers one past a bound, broken
patterns, two ``oneOf`` branches at once) and its verdict must equal
``jsonschema.Draft202012Validator``'s. The one deviation is documented
(plugins/sdk/_config.py): configs and files take no integral float (``1.0``) for an
``integer``, so a document holding one is judged by jsonschema with that type rule
alone changed.

Families (at least 10,000 documents each, per run): ``configs``, ``file-formats``,
``bundle-format``, ``effect-payloads``, and ``keywords``: schemas written here to use
every keyword the shipped ones do not (``oneOf``, ``anyOf``, ``not``,
``unevaluatedProperties``, ``prefixItems``, ``contains``, ``dependentRequired``, ...).
Hypothesis picks the schema and seeds a batch; the batch's documents come from a plain
``random.Random`` (one Hypothesis choice per document costs ~50 us, and a document
takes dozens). A smaller run draws every choice through Hypothesis, so a failure there
shrinks. The seed is fixed and printed; planted mutants (``oneOf`` read as ``anyOf``,
...) prove the harness finds a wrong verdict.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import random
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import jsonschema.validators
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from plugins.effects.linux import linux_effects
from plugins.sdk import ConfigError, ConfigValidator, DocumentSchema, RegistrationError
from plugins.sdk._accept import VOCABULARY, compile_accept
from plugins.sdk._contracts import BUNDLE_SCHEMA, BundleStore, _parse_bundle
from plugins.sdk._plan import thaw_json
from plugins.sdk.runner import EffectRegistry
from tests.runner.toy import ToyKernel, toy_effects
from tests.schema_documents import (
    SchemaDocuments,
    pattern_pools,
    schema_patterns,
    schema_strings,
)

REPO = Path(__file__).resolve().parents[2]
SEED = 20260126
DOCUMENTS_PER_FAMILY = 10_000
BATCH = 25  # documents per Hypothesis example in the bulk run
SHRINKABLE_EXAMPLES = 120  # per family, every choice through Hypothesis

Verdict = Callable[[Any], bool]


# --- the reference: jsonschema ---------------------------------------------------------


def _integer(_checker: object, instance: object) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


_StrictIntegers = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _integer),
)


def _has_integral_float(value: Any) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_has_integral_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_integral_float(v) for v in value)
    return False


@dataclass(frozen=True)
class Case:
    """One schema, the product's verdict on a document, and jsonschema's."""

    name: str
    schema: Any
    product: Verdict
    strict: bool  # the product takes no integral float for an integer
    objects_only: bool  # its entry point takes JSON objects only
    seeds: tuple[Any, ...] = ()

    @functools.cached_property
    def _plain(self) -> Any:
        jsonschema.Draft202012Validator.check_schema(self.schema)
        return jsonschema.Draft202012Validator(self.schema)

    @functools.cached_property
    def _strict(self) -> Any:
        return _StrictIntegers(self.schema)

    @functools.cached_property
    def compiled(self) -> Callable[[object], bool] | None:
        """The product's compiled accept path alone (plugins/sdk/_accept.py): the
        product asks jsonschema about every value it refuses, so only this shows a
        wrong refusal of its own."""
        return compile_accept(self.schema, strict=self.strict)

    def reference(self, document: Any) -> bool:
        if self.strict and _has_integral_float(document):
            return bool(self._strict.is_valid(document))
        return bool(self._plain.is_valid(document))

    @functools.cached_property
    def pools(self) -> dict[str, list[str]]:
        extra = [*schema_strings(self.schema), *(s for d in self.seeds for s in schema_strings(d))]
        return pattern_pools(schema_patterns(self.schema), extra)

    @functools.cached_property
    def key_names(self) -> tuple[str, ...]:
        return tuple(sorted(set(_property_names(self.schema))))


def _property_names(schema: Any) -> Iterator[str]:
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            if key in ("properties", "dependentRequired", "dependentSchemas") and isinstance(
                value, Mapping
            ):
                yield from (k for k in value if isinstance(k, str))
            if key == "required" and isinstance(value, list):
                yield from (k for k in value if isinstance(k, str))
            if key not in ("const", "enum", "default", "examples"):
                yield from _property_names(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _property_names(item)


# --- the product's entry points --------------------------------------------------------


def config_verdict(validator: ConfigValidator) -> Verdict:
    """Accepted by the runner's check of a request config, as far as the schema goes:
    the cross-field rules run after the schema, so their refusal means it passed."""

    def accepts(document: Any) -> bool:
        try:
            validator.check(json.dumps(document))
        except ConfigError as error:
            return error.rule.startswith("cross-field:")
        return True

    return accepts


def document_verdict(schema: Any) -> Verdict:
    check = DocumentSchema(schema)
    return lambda document: check.problems(document) == ()


def bundle_verdict(document: Any) -> bool:
    try:
        _parse_bundle("differential", json.dumps(document).encode())
    except RegistrationError:
        return False
    return True


def payload_verdict(registry: EffectRegistry, kind: str) -> Verdict:
    return lambda document: registry.payload_problem(kind, document) is None


# --- the families ----------------------------------------------------------------------


def _bundle_stores() -> list[BundleStore]:
    """Every bundle root of the repository (each directory with a pins.json)."""
    roots = sorted(p.parent for p in REPO.glob("**/contracts/pins.json") if ".venv" not in p.parts)
    return [BundleStore(root) for root in roots]


def _bundles() -> Iterator[tuple[str, Any]]:
    for store in _bundle_stores():
        for schema_id in store.schema_ids:
            yield f"{store.root.relative_to(REPO)}:{schema_id}", store.load(schema_id)


def config_cases() -> list[Case]:
    cases = []
    for name, bundle in _bundles():
        seeds = (*bundle.valid_examples, *(bad["config"] for bad in bundle.invalid_examples))
        schema = dict(bundle.data["configSchema"])
        cases.append(Case(name, schema, config_verdict(bundle.validator), True, True, seeds))
    for path in sorted(REPO.glob("examples/**/descriptor.json")):
        data = json.loads(path.read_text())
        schema = data["configSchema"]
        validator = ConfigValidator(schema, data.get("crossFieldRules", ()))
        seeds = tuple(data.get("examples", {}).get("valid", ()))
        name = str(path.relative_to(REPO))
        cases.append(Case(name, schema, config_verdict(validator), True, True, seeds))
    return cases


def file_format_cases() -> list[Case]:
    cases = []
    for path in sorted(REPO.glob("*/**/schemas/*.schema.json")):
        if ".venv" not in path.parts:
            schema = json.loads(path.read_text())
            name = str(path.relative_to(REPO))
            cases.append(Case(name, schema, document_verdict(schema), True, False))
    return cases


def bundle_format_cases() -> list[Case]:
    # The real bundles, their example lists cut to two entries each: the shape is the
    # same, and a whole bundle of examples costs both validators ten times as much.
    seeds = tuple(
        {
            **bundle.data,
            "examples": {k: list(v[:2]) for k, v in bundle.data["examples"].items()},
            "crossFieldRules": list(bundle.data["crossFieldRules"][:2]),
        }
        for _, bundle in _bundles()
    )
    return [Case("bundle format", BUNDLE_SCHEMA, bundle_verdict, False, True, seeds)]


class _NoKernel:
    """The executors are only asked for their payload schemas, never called."""


def payload_cases() -> list[Case]:
    cases = []
    for registry in (linux_effects(_NoKernel()), toy_effects(ToyKernel(None))):  # type: ignore[arg-type]
        for kind in sorted(registry.kinds):
            executor = registry.get(kind)
            assert executor is not None
            schema = thaw_json(executor.payload_schema)
            cases.append(Case(kind, schema, payload_verdict(registry, kind), False, True))
    return cases


# Keywords the shipped schemas do not use (yet): a plugin's own bundle may.
ONE_OF_OBJECTS: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "oneOf": [
        {"required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}}},
        {"required": ["index"], "properties": {"index": {"type": "integer", "minimum": 0}}},
        {"required": ["mac"], "properties": {"mac": {"pattern": "^[0-9a-f]{2}(:[0-9a-f]{2}){5}$"}}},
    ],
    "properties": {"mtu": {"type": "integer", "minimum": 68, "maximum": 9000}},
    "unevaluatedProperties": False,
}
KEYWORDS: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["name", "vf"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 15, "pattern": "^[a-z][a-z0-9-]*$"},
        "vlanId": {"type": "integer", "minimum": 1, "maximum": 4094},
        "mode": {"enum": ["bridge", "vepa", 1, True, None]},
        "mtu": {"type": "integer", "exclusiveMinimum": 67, "exclusiveMaximum": 9001},
        "ratio": {"type": "number", "multipleOf": 0.25},
        "vf": {"$ref": "#/$defs/vf"},
        "tags": {"type": "array", "uniqueItems": True, "maxItems": 3, "items": {"type": "string"}},
        "members": {
            "type": "array",
            "prefixItems": [{"$ref": "#/$defs/member"}],
            "items": {"$ref": "#/$defs/member"},
            "minItems": 1,
            "contains": {"required": ["index"]},
            "maxContains": 2,
        },
        "labels": {
            "type": "object",
            "maxProperties": 2,
            "patternProperties": {"^[a-z]+$": {"type": "string"}},
            "propertyNames": {"maxLength": 8},
            "additionalProperties": False,
        },
        "version": {"const": 1},
        "legacy": False,
        "weight": {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^[0-9]+$"}]},
        "parity": {
            "oneOf": [{"type": "integer", "multipleOf": 2}, {"type": "integer", "minimum": 10}]
        },
        "notEmpty": {"not": {"enum": ["", [], {}]}},
    },
    "dependentRequired": {"mtu": ["vlanId"]},
    "dependentSchemas": {
        "ratio": {"properties": {"mode": {"const": "bridge"}}, "required": ["mode"]}
    },
    "allOf": [
        {"if": {"required": ["vlanId"]}, "then": {"properties": {"vlanId": {"maximum": 4000}}}}
    ],
    "unevaluatedProperties": False,
    "$defs": {
        "vf": {
            "type": "object",
            "required": ["vfIndex"],
            "properties": {
                "vfIndex": {"type": "integer", "minimum": 0, "maximum": 127},
                "spoofCheck": {"type": "boolean"},
                "trust": {"type": ["boolean", "null"]},
            },
            "if": {"required": ["trust"]},
            "then": {"properties": {"spoofCheck": {"const": False}}},
            "else": {"properties": {"qos": {"type": "integer", "maximum": 7}}},
            "unevaluatedProperties": False,
        },
        "member": {
            "type": "object",
            "oneOf": [
                {"required": ["name"], "properties": {"name": {"type": "string"}}},
                {"required": ["index"], "properties": {"index": {"type": "integer"}}},
            ],
            "unevaluatedProperties": False,
        },
    },
}
KEYWORDS_VALID: dict[str, Any] = {
    "name": "uplink-0",
    "vlanId": 100,
    "mtu": 1500,
    "ratio": 0.75,
    "mode": "bridge",
    "vf": {"vfIndex": 3, "spoofCheck": False, "trust": True},
    "tags": ["a", "b"],
    "members": [{"name": "m0"}, {"index": 1}],
    "labels": {"team": "net"},
    "version": 1,
    "weight": "10",
    "parity": 4,
}
SCALAR_ONE_OF: dict[str, Any] = {
    "oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}, {"multipleOf": 3}],
}


def without_unevaluated(schema: Any) -> Any:
    """``schema`` with every ``unevaluatedProperties`` dropped: one the product compiles
    (plugins/sdk/_accept.py) instead of asking jsonschema, so that the same keywords are
    judged on both paths."""
    if isinstance(schema, dict):
        return {
            k: without_unevaluated(v) for k, v in schema.items() if k != "unevaluatedProperties"
        }
    if isinstance(schema, list):
        return [without_unevaluated(v) for v in schema]
    return schema


def keyword_cases() -> list[Case]:
    cases = []
    one_of_seeds = ({"name": "a", "mtu": 1500}, {"index": 0})
    for name, schema, seeds in [
        ("keywords", KEYWORDS, (KEYWORDS_VALID,)),
        ("oneOf objects", ONE_OF_OBJECTS, one_of_seeds),
        ("keywords compiled", without_unevaluated(KEYWORDS), (KEYWORDS_VALID,)),
        ("oneOf objects compiled", without_unevaluated(ONE_OF_OBJECTS), one_of_seeds),
    ]:
        validator = ConfigValidator(schema)
        cases.append(Case(f"{name} (config)", schema, config_verdict(validator), True, True, seeds))
        cases.append(Case(f"{name} (file)", schema, document_verdict(schema), True, False, seeds))
    cases.append(
        Case("scalar oneOf (file)", SCALAR_ONE_OF, document_verdict(SCALAR_ONE_OF), True, False)
    )
    for name, schema in [
        ("oneOf objects", ONE_OF_OBJECTS),
        ("oneOf objects compiled", without_unevaluated(ONE_OF_OBJECTS)),
    ]:
        registry = EffectRegistry([_Executor("test/one-of/v1", schema)])
        cases.append(Case(f"{name} (payload)", schema,
                          payload_verdict(registry, "test/one-of/v1"), False, True))  # fmt: skip
    return cases


@dataclass(frozen=True)
class _Executor:
    kind: str
    payload_schema: Mapping[str, Any]
    outputs: tuple[str, ...] = ()


FAMILIES: dict[str, Callable[[], list[Case]]] = {
    "configs": config_cases,
    "file-formats": file_format_cases,
    "bundle-format": bundle_format_cases,
    "effect-payloads": payload_cases,
    "keywords": keyword_cases,
}


@functools.cache
def family(name: str) -> tuple[Case, ...]:
    return tuple(FAMILIES[name]())


# --- documents -------------------------------------------------------------------------


def near_valid(case: Case, rnd: random.Random) -> Any:
    """A document for ``case``: a seed or a generated one, then 0 to 3 mutations."""
    documents = SchemaDocuments(case.schema, rnd, case.pools, key_names=case.key_names)
    for _ in range(8):
        if case.seeds and rnd.random() < 0.3:
            document = rnd.choice(case.seeds)
        else:
            document = documents.document()
        document = documents.mutate(document, rnd.choice([0, 0, 0, 1, 1, 2, 3]))
        if isinstance(document, dict) or not case.objects_only:
            return document
    return {}


@dataclass
class Tally:
    documents: int = 0
    valid: int = 0
    per_case: Counter[str] = field(default_factory=Counter)

    def add(self, case: Case, valid: bool) -> None:
        self.documents += 1
        self.valid += valid
        self.per_case[case.name] += 1


def judge(case: Case, document: Any) -> tuple[bool, bool]:
    """(the product's verdict, jsonschema's)."""
    return case.product(document), case.reference(document)


def _show(document: Any) -> str:
    return json.dumps(document, ensure_ascii=True)[:2000]


# --- the tests -------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_schema_of_the_family_is_judged_as_jsonschema_judges_it(name: str) -> None:
    cases = family(name)
    assert cases, f"family {name} has no schema"
    tally = Tally()

    @seed(SEED)
    @settings(
        max_examples=math.ceil(DOCUMENTS_PER_FAMILY / BATCH) + 10,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(st.integers(0, len(cases) - 1), st.randoms(use_true_random=True))
    def batch(index: int, rnd: random.Random) -> None:
        case = cases[index]
        for _ in range(BATCH):
            document = near_valid(case, rnd)
            product, reference = judge(case, document)
            tally.add(case, reference)
            if case.compiled is not None:
                assert case.compiled(document) == reference, (
                    f"{name} / {case.name}: the compiled path disagrees with jsonschema "
                    f"(seed {SEED}): {_show(document)}"
                )
            assert product == reference, (
                f"{name} / {case.name}: product {'accepts' if product else 'refuses'}, "
                f"jsonschema {'accepts' if reference else 'refuses'} (seed {SEED}): {_show(document)}"
            )

    batch()
    print(  # shown with -s or -rP: what the run covered
        f"{name}: seed {SEED}, {tally.documents} documents over {len(cases)} schemas, "
        f"{tally.valid} valid, {tally.documents - tally.valid} invalid, 0 disagreements"
    )
    assert tally.documents >= DOCUMENTS_PER_FAMILY
    # Aimed at the boundary: both verdicts come up often, or the family tests little.
    assert 0.15 <= tally.valid / tally.documents <= 0.85, (tally.valid, tally.documents)
    assert set(tally.per_case) == {c.name for c in cases}, "a schema got no document"


@pytest.mark.parametrize("name", list(FAMILIES))
@seed(SEED)
@settings(
    max_examples=SHRINKABLE_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_shrinkable_documents_are_judged_as_jsonschema_judges_them(
    name: str, data: st.DataObject
) -> None:
    """Every choice through Hypothesis: a failure here shrinks to a small document."""
    cases = family(name)
    case = cases[data.draw(st.integers(0, len(cases) - 1), label="schema")]
    document = near_valid(case, data.draw(st.randoms(), label="choices"))
    product, reference = judge(case, document)
    assert product == reference, (case.name, _show(document), product, reference)


def test_every_pattern_has_candidate_strings() -> None:
    """A pattern no candidate matches would get only invalid strings: add one that does."""
    for name in FAMILIES:
        for case in family(name):
            empty = sorted(p for p, pool in case.pools.items() if not pool)
            assert not empty, f"{case.name}: no candidate string matches {empty}"


# --- the compiled accept path is the one taken ---------------------------------------------


def test_every_shipped_schema_and_the_compiled_keywords_take_the_compiled_path() -> None:
    """The verdicts above come from plugins/sdk/_accept.py's closures wherever it vouches
    for a schema; the shipped ones must all be such, or the product would import
    jsonschema on its accept path after all (and this file would test the fallback)."""
    for name in FAMILIES:
        for case in family(name):
            compiled = compile_accept(case.schema, strict=case.strict) is not None
            # only the keywords family has schemas on jsonschema's path: theirs
            expected = name != "keywords" or "unevaluatedProperties" not in json.dumps(case.schema)
            assert compiled == expected, case.name


def test_jsonschema_acts_on_no_keyword_outside_the_compiled_vocabulary() -> None:
    """A key outside ``VOCABULARY`` is ignored by the compiled path; jsonschema must
    ignore it too."""
    assert set(jsonschema.Draft202012Validator.VALIDATORS) <= VOCABULARY


def test_a_refusal_is_still_explained_by_jsonschema() -> None:
    validator = ConfigValidator(without_unevaluated(ONE_OF_OBJECTS))
    with pytest.raises(ConfigError) as caught:
        validator.validate(json.dumps({"name": "a", "index": 2}))
    assert caught.value.rule == "oneOf", caught.value


EDGE_SCHEMAS: list[tuple[Any, list[Any]]] = [
    ({"multipleOf": 0.1}, [1e308, 0.3, 3, 1e-320]),  # a quotient that overflows int()
    ({"multipleOf": 3}, [9, 9.0, 10, 4.5, True]),
    ({"enum": [1, [True], {"a": 0}]}, [1, 1.0, True, [1], [True], {"a": False}, {"a": 0.0}]),
    ({"const": False}, [False, 0, 0.0, None]),
    ({"uniqueItems": True}, [[1, True], [1, 1.0], [[1, True], [1, 1], [1, True]], [{}, {}]]),
    ({"type": "integer"}, [1, 1.0, 1.5, True]),
    ({"minimum": 1, "exclusiveMaximum": 2}, [1, 1.5, 2, True, "a"]),
    ({"prefixItems": [{"type": "string"}], "items": False}, [[], ["a"], ["a", 1], [1]]),
    ({"contains": {"type": "null"}, "minContains": 0, "maxContains": 1}, [[], [None, None]]),
]


@pytest.mark.parametrize(("schema", "values"), EDGE_SCHEMAS, ids=str)
def test_edge_values_are_judged_as_jsonschema_judges_them(schema: Any, values: list[Any]) -> None:
    plain = jsonschema.Draft202012Validator(schema)
    accept = compile_accept(schema, strict=False)
    assert accept is not None
    for value in values:
        assert accept(value) == plain.is_valid(value), (schema, value)


def test_what_the_compiled_path_does_not_vouch_for_goes_to_jsonschema() -> None:
    for schema in (
        {"$ref": "#/$defs/a%25b", "$defs": {"a%b": {}}},  # percent-encoded pointer
        {"unevaluatedProperties": False},
        {"$anchor": "x"},
        {"minLength": 1.0},  # a count as a float: valid for the metaschema, left to it
        {"type": "nonsense"},
        {"pattern": "("},
        {"properties": {"a": {"$schema": "x"}}},
    ):
        assert compile_accept(schema) is None, schema
    assert compile_accept({"x-vendor": {"type": "nonsense"}}) is not None  # not a keyword


ACCEPT_PATH_IMPORTS = """
import json, sys
from pathlib import Path
from plugins.effects.linux import linux_effects
from plugins.sdk import ConfigValidator, DocumentSchema
from plugins.sdk._contracts import BundleStore
store = BundleStore(Path("plugins/contracts"))
accepted = 0
for schema_id in store.schema_ids:
    bundle = store.load(schema_id)
    for example in bundle.valid_examples:
        bundle.validator.check(json.dumps(example))
        accepted += 1
config = DocumentSchema.packaged("plugins.sdk", "service-config.schema.json")
valid = {"socketDir": "/run/s", "stateDir": "/var/lib/s", "tokenFile": "t", "kernel": "linux:///x"}
assert not config.problems(valid)
registry = linux_effects(None)
assert registry.payload_problem("linux/set-link-mtu/v1", {}) is not None
print(accepted, "jsonschema" in sys.modules)
"""


def test_the_accept_path_never_imports_jsonschema() -> None:
    """P8 (docs/benchmarks.md): a service that sees only valid configs, bundles and
    payloads never imports jsonschema (~6 MB); the refused payload above is what imports
    it, so the check runs on the accepted ones first."""
    accepted_only = ACCEPT_PATH_IMPORTS.replace(
        'assert registry.payload_problem("linux/set-link-mtu/v1", {}) is not None', ""
    )
    out = subprocess.run(
        [sys.executable, "-c", accepted_only], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert int(out[0]) > 0, out
    assert out[1] == "False", "jsonschema was imported on the accept path"
    out = subprocess.run(
        [sys.executable, "-c", ACCEPT_PATH_IMPORTS], cwd=REPO, capture_output=True, text=True,
        check=True,
    ).stdout.split()  # fmt: skip
    assert out[1] == "True", "the refusal did not reach jsonschema: the test proves nothing"


# --- oneOf: exactly one branch -----------------------------------------------------------


ONE_OF_VERDICTS = [
    ({"name": "a"}, True),
    ({"index": 2, "mtu": 1500}, True),
    ({"mac": "02:00:00:00:00:01"}, True),
    ({"name": "a", "index": 2}, False),  # two branches: refused
    ({"name": "a", "mac": "02:00:00:00:00:01"}, False),
    ({"name": "a", "index": 2, "mac": "02:00:00:00:00:01"}, False),
    ({"mtu": 1500}, False),  # no branch
    ({"name": ""}, False),
]


@pytest.mark.parametrize(("document", "valid"), ONE_OF_VERDICTS, ids=str)
def test_one_of_takes_exactly_one_branch_at_every_entry_point(
    document: dict[str, Any], valid: bool
) -> None:
    cases = [c for c in family("keywords") if c.name.startswith("oneOf objects")]
    assert len(cases) == 6  # config, file, payload; compiled and jsonschema's path each
    for case in cases:
        assert judge(case, document) == (valid, valid), case.name


@pytest.mark.parametrize(
    ("value", "valid"),
    [(-3, False), (-2, True), (2.5, True), (4, False), (-1.5, False), (-3.0, True), ("a", True)],
    ids=str,
)
def test_one_of_over_scalars(value: Any, valid: bool) -> None:
    """-3: an integer and a multiple of 3, refused; 4: an integer and >= 0; -1.5: none;
    "a": only ``multipleOf`` applies (to numbers alone). -3.0 is an integer to plain
    jsonschema (two branches) but not to the strict validator of files: one branch."""
    (case,) = [c for c in family("keywords") if c.name == "scalar oneOf (file)"]
    assert judge(case, value) == (valid, valid)


def test_two_members_matching_both_branches_are_refused_with_a_clear_line() -> None:
    (case,) = [c for c in family("keywords") if c.name == "keywords (config)"]
    document = {**KEYWORDS_VALID, "members": [{"name": "m0", "index": 1}]}
    assert judge(case, document) == (False, False)
    with pytest.raises(ConfigError) as info:
        ConfigValidator(KEYWORDS).validate(json.dumps(document))
    assert (info.value.path, info.value.rule) == ("$.members[0]", "oneOf")
    assert "valid under each of" in info.value.message


# --- the harness can fail ----------------------------------------------------------------


def _mutant(changes: Mapping[str, Any]) -> Callable[[Any], Verdict]:
    """A jsonschema that gets one keyword wrong, as a hand-written validator might."""
    wrong = jsonschema.validators.extend(jsonschema.Draft202012Validator, validators=changes)  # type: ignore[no-untyped-call]

    def verdict(schema: Any) -> Verdict:
        return wrong(schema).is_valid  # type: ignore[no-any-return]

    return verdict


MUTANTS = {
    "oneOf read as anyOf": {"oneOf": jsonschema.Draft202012Validator.VALIDATORS["anyOf"]},
    "additionalProperties ignored": {"additionalProperties": lambda *_: iter(())},
    "required ignored": {"required": lambda *_: iter(())},
    "maximum read as exclusive": {
        "maximum": jsonschema.Draft202012Validator.VALIDATORS["exclusiveMaximum"]
    },
}


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_a_validator_with_one_wrong_keyword_is_caught(mutant: str) -> None:
    """The same documents, judged by a deliberately wrong validator: disagreements show."""
    make = _mutant(MUTANTS[mutant])
    rnd = random.Random(SEED)
    cases = [*family("keywords"), *family("configs")]
    found = 0
    for case in cases:
        wrong = make(case.schema)
        for _ in range(100):
            document = near_valid(case, rnd)
            if case.strict and _has_integral_float(document):
                continue
            found += wrong(document) != case.reference(document)
    assert found > 0, f"{mutant}: never caught"


# --- what the product adds: messages -----------------------------------------------------


_LISTED = re.compile(r"\((.*) (?:was|were) unexpected\)$")


def _jsonschema_unexpected(schema: Any, document: Any) -> set[tuple[Any, ...]]:
    """The paths of the keys jsonschema's own ``unevaluatedProperties`` messages list."""
    paths: set[tuple[Any, ...]] = set()
    for error in _StrictIntegers(schema).iter_errors(document):
        match = (
            _LISTED.search(error.message) if error.validator == "unevaluatedProperties" else None
        )
        if match:
            keys = ast.literal_eval("[" + match.group(1) + "]")
            paths |= {(*error.absolute_path, key) for key in keys}
    return paths


@pytest.mark.parametrize(
    ("document", "unknown"),
    [
        ({"name": "a", "x": 1}, ("x",)),
        ({"index": 1, "name": 1}, ("name",)),  # the name branch failed: name not evaluated
        ({"index": 1, "mtu": 1500, "zz": 1, "yy": 2, "xx": 3}, ("xx", "yy", "zz")),
        ({"mac": "02:00:00:00:00:01", "index": "no"}, ("index",)),
    ],
    ids=str,
)
def test_each_unevaluated_key_is_named_at_its_path(document: Any, unknown: tuple[str, ...]) -> None:
    assert _jsonschema_unexpected(ONE_OF_OBJECTS, document) == {(k,) for k in unknown}
    problems = DocumentSchema(ONE_OF_OBJECTS).problems(document)
    named = {p.parts[-1] for p in problems if p.rule == "unknown-key"}
    assert named == set(unknown), problems
    assert all(
        p.message == f"unknown key '{p.parts[-1]}'" for p in problems if p.rule == "unknown-key"
    )


@seed(SEED)
@settings(max_examples=100, deadline=None, database=None)
@given(st.randoms(use_true_random=True))
def test_unknown_keys_named_are_the_keys_jsonschema_names(rnd: random.Random) -> None:
    """Through $ref, if/then/else, oneOf, dependentSchemas and nesting: the keys the
    product names one by one are the keys jsonschema lists, object by object."""
    case = next(c for c in family("keywords") if c.name == "keywords (file)")
    document = near_valid(case, rnd)
    problems = DocumentSchema(KEYWORDS).problems(document)
    named = {p.parts for p in problems if p.rule == "unknown-key"}
    listed = _jsonschema_unexpected(KEYWORDS, document)
    # The product names the keys additionalProperties refuses (under labels) too.
    assert {p for p in named if p[:1] != ("labels",)} == listed, (named, listed, _show(document))


def test_a_refusal_stands_when_no_problem_can_be_explained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The verdict is jsonschema's even if the explanation maps nothing."""
    from plugins.sdk import _config

    check = _config.SchemaCheck({"type": "integer"})
    monkeypatch.setattr(_config, "_candidates", lambda error: iter(()))
    assert [p.rule for p in check.problems("a")] == ["schema"]
    assert check.problems(1) == ()


def test_an_object_of_many_unknown_keys_keeps_jsonschemas_one_error() -> None:
    """Naming each key costs jsonschema a pass of the object per probe: past
    _MAX_NAMED_KEYS keys the refusal is jsonschema's own line at the object."""
    from plugins.sdk import _config

    schema = {
        "type": "object",
        "allOf": [{"properties": {"a": {}}}],
        "unevaluatedProperties": False,
    }
    validator = ConfigValidator(schema)
    few = {"a": 1, **{f"k{i}": i for i in range(_config._MAX_NAMED_KEYS - 1)}}
    problems = DocumentSchema(schema).problems(few)
    assert [p.path() for p in problems] == [f"$.k{i}" for i in sorted(range(63), key=str)]
    many = {"a": 1, **{f"k{i}": i for i in range(3000)}}
    with pytest.raises(ConfigError) as info:
        validator.validate(json.dumps(many))
    assert (info.value.path, info.value.rule) == ("$", "unknown-key")
    assert "$: Unevaluated properties are not allowed ('k0', 'k1', " in info.value.message
    assert "'k2999'" not in info.value.message  # cut short: one line, not 3,000 keys


@pytest.mark.parametrize(
    ("ref", "where"),
    [
        ("https://example.invalid/mtu.json", "#/properties/mtu/$ref"),
        ("mtu.json#/$defs/mtu", "#/properties/mtu/$ref"),
    ],
)
def test_a_schema_that_references_anything_outside_itself_is_refused(ref: str, where: str) -> None:
    """jsonschema's default registry would fetch a remote $ref at validation time: a
    contract schema is self-contained, refused at compile time otherwise."""
    schema = {"type": "object", "properties": {"mtu": {"$ref": ref}}}
    with pytest.raises(ValueError, match=re.escape(f"{where} is {ref!r}")):
        ConfigValidator(schema)


def test_a_reference_within_the_schema_resolves() -> None:
    schema = {
        "type": "object",
        "$defs": {"mtu": {"type": "integer", "minimum": 68}},
        "properties": {"mtu": {"$ref": "#/$defs/mtu"}},
    }
    check = DocumentSchema(schema)
    assert check.problems({"mtu": 1500}) == ()
    assert [p.path() for p in check.problems({"mtu": 10})] == ["$.mtu"]
