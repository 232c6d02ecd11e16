"""Property tests: for any input, strict decoding either succeeds or raises ConfigError.

Each test is parametrized over (schema, cross-field rules, valid example) cases, so more
cases (such as the real plugin contract bundles) are added by extending ``CASES``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from plugins.sdk._config import ConfigValidator, JSONValue, decode_into
from plugins.sdk._errors import ConfigError
from tests.strategies import (
    CROSS_FIELD_RULES,
    arbitrary_configs,
    config_values,
    mutated_configs,
    raw_inputs,
)

RICH_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "vf"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 15, "pattern": "^[a-z][a-z0-9-]*$"},
        "vlanId": {"type": "integer", "minimum": 1, "maximum": 4094},
        "mode": {"enum": ["bridge", "vepa", "private"]},
        "mtu": {"type": "integer", "exclusiveMinimum": 67, "exclusiveMaximum": 9001},
        "ratio": {"type": "number", "multipleOf": 0.25},
        "vf": {"$ref": "#/$defs/vf"},
        "tags": {
            "type": "array",
            "uniqueItems": True,
            "maxItems": 3,
            "items": {"type": "string"},
        },
        "members": {
            "type": "array",
            "prefixItems": [{"$ref": "#/$defs/member"}],
            "items": {"$ref": "#/$defs/member"},
            "minItems": 1,
        },
        "labels": {
            "type": "object",
            "maxProperties": 2,
            "patternProperties": {"^[a-z]+$": {"type": "string"}},
            "additionalProperties": False,
        },
        "version": {"type": "integer", "const": 1},
    },
    "dependentRequired": {"mtu": ["vlanId"]},
    "$defs": {
        "vf": {
            "type": "object",
            "required": ["vfIndex"],
            "properties": {
                "vfIndex": {"type": "integer", "minimum": 0, "maximum": 127},
                "vlan": {"type": "integer", "minimum": 0, "maximum": 4094},
                "qos": {"type": "integer", "minimum": 0, "maximum": 7},
                "spoofCheck": {"type": "boolean"},
                "trust": {"type": ["boolean", "null"]},
                "minTxRateMbps": {"type": "integer", "minimum": 0},
                "maxTxRateMbps": {"type": "integer", "minimum": 0},
            },
            "if": {"required": ["trust"]},
            "then": {"properties": {"spoofCheck": {"const": False}}},
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

RICH_RULES = CROSS_FIELD_RULES

RICH_VALID: dict[str, Any] = {
    "name": "uplink-0",
    "vlanId": 100,
    "mtu": 1500,
    "ratio": 0.75,
    "vf": {
        "vfIndex": 3,
        "vlan": 100,
        "qos": 2,
        "spoofCheck": False,
        "trust": True,
        "minTxRateMbps": 10,
        "maxTxRateMbps": 100,
    },
    "tags": ["a", "b"],
    "members": [{"name": "m0"}, {"index": 1}],
    "labels": {"team": "net"},
    "version": 1,
}

CASES = [pytest.param(RICH_SCHEMA, RICH_RULES, RICH_VALID, id="rich-test-schema")]
PROPERTY = settings(max_examples=1000, deadline=None, derandomize=False)


_VALIDATORS: dict[tuple[int, int], tuple[object, object, ConfigValidator]] = {}


def validator_for(schema: dict[str, Any], rules: list[dict[str, Any]]) -> ConfigValidator:
    """One validator per case: construction checks the schema, which is slow-ish. Found by
    the case's own objects (kept alive in the entry, so their ids stay theirs): a key of
    their JSON text cost a dump of the schema for every example."""
    key = (id(schema), id(rules))
    if key not in _VALIDATORS:
        _VALIDATORS[key] = (schema, rules, ConfigValidator(schema, rules))
    return _VALIDATORS[key][2]


def check_only_config_errors(
    validator: ConfigValidator, raw: bytes | str
) -> dict[str, JSONValue] | None:
    """Validate ``raw``; any exception other than ConfigError fails the test."""
    try:
        return validator.validate(raw)
    except ConfigError as error:
        rejected = error
    assert rejected.path.startswith("$"), rejected
    assert rejected.rule, rejected
    return None


def check_accepted_is_valid(
    validator: ConfigValidator, schema: dict[str, Any], raw: bytes | str
) -> dict[str, JSONValue] | None:
    """Like ``check_only_config_errors``; an accepted config must also satisfy plain
    jsonschema and survive a round trip through the validator unchanged."""
    accepted = check_only_config_errors(validator, raw)
    if accepted is not None:
        assert Draft202012Validator(schema).is_valid(accepted)
        assert validator.validate(json.dumps(accepted)) == accepted
    return accepted


@pytest.mark.parametrize(("schema", "rules", "valid"), CASES)
def test_valid_example_is_accepted(
    schema: dict[str, Any], rules: list[dict[str, Any]], valid: dict[str, Any]
) -> None:
    assert validator_for(schema, rules).validate(json.dumps(valid)) == valid


@pytest.mark.parametrize(("schema", "rules", "valid"), CASES)
@PROPERTY
@given(data=st.data())
def test_arbitrary_json_values(
    schema: dict[str, Any], rules: list[dict[str, Any]], valid: dict[str, Any], data: st.DataObject
) -> None:
    validator = validator_for(schema, rules)
    value = data.draw(arbitrary_configs(schema, allow_non_finite=True))
    # Objects mixing the valid example with arbitrary keys reach the deeper schema paths.
    if isinstance(value, dict) and data.draw(st.booleans()):
        value = {**valid, **value}
    check_accepted_is_valid(validator, schema, json.dumps(value))


@pytest.mark.parametrize(("schema", "rules", "valid"), CASES)
@PROPERTY
@given(raw=raw_inputs())
def test_arbitrary_bytes_and_text(
    schema: dict[str, Any], rules: list[dict[str, Any]], valid: dict[str, Any], raw: bytes | str
) -> None:
    check_only_config_errors(validator_for(schema, rules), raw)


@pytest.mark.parametrize(("schema", "rules", "valid"), CASES)
@PROPERTY
@given(data=st.data())
def test_mutations_of_a_valid_config(
    schema: dict[str, Any], rules: list[dict[str, Any]], valid: dict[str, Any], data: st.DataObject
) -> None:
    validator = validator_for(schema, rules)
    kind, raw = data.draw(mutated_configs(valid, config_values(schema)))
    if kind == "duplicate":
        with pytest.raises(ConfigError) as info:
            validator.validate(raw)
        assert info.value.rule == "duplicate-key"
    else:
        check_accepted_is_valid(validator, schema, raw)


# Typed decoding of whatever the rich schema accepts must never fail.


@dataclass(frozen=True)
class Vf:
    vf_index: int
    vlan: int | None = None
    qos: int | None = None
    spoof_check: bool | None = None
    trust: bool | None = None
    min_tx_rate_mbps: int | None = None
    max_tx_rate_mbps: int | None = None


@dataclass(frozen=True)
class Member:
    name: str | None = None
    index: int | None = None


@dataclass(frozen=True)
class Labels:
    team: str | None = None


@dataclass(frozen=True)
class RichConfig:
    name: str
    vf: Vf
    vlan_id: int | None = None
    mode: Literal["bridge", "vepa", "private"] | None = None
    mtu: int | None = None
    ratio: float | None = None
    tags: tuple[str, ...] = ()
    members: tuple[Member, ...] = ()
    labels: Labels | None = None
    version: Literal[1] | None = None


@PROPERTY
@given(data=st.data())
def test_accepted_mutations_decode(data: st.DataObject) -> None:
    validator = validator_for(RICH_SCHEMA, RICH_RULES)
    _, raw = data.draw(mutated_configs(RICH_VALID, config_values(RICH_SCHEMA)))
    accepted = check_only_config_errors(validator, raw)
    labels = accepted.get("labels") if accepted is not None else None
    if accepted is not None and (labels is None or set(cast(dict[str, Any], labels)) <= {"team"}):
        assert isinstance(decode_into(accepted, RichConfig), RichConfig)
