"""Strict config decoding: one test per rejection class, then typed decoding."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from plugins.sdk._config import (
    DEFAULT_MAX_BYTES,
    ConfigValidator,
    decode_into,
    parse_config_json,
)
from plugins.sdk._errors import ConfigError
from tests.strategies import CROSS_FIELD_RULES

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 15, "pattern": "^[a-z][a-z0-9-]*$"},
        "vlanId": {"type": "integer", "minimum": 1, "maximum": 4094},
        "mode": {"enum": ["bridge", "vepa"]},
        "vf": {
            "type": "object",
            "additionalProperties": False,
            "required": ["vfIndex"],
            "properties": {
                "vfIndex": {"type": "integer", "minimum": 0},
                "vlan": {"type": "integer", "minimum": 0, "maximum": 4094},
                "qos": {"type": "integer", "minimum": 0, "maximum": 7},
                "spoofCheck": {"type": "boolean"},
                "minTxRateMbps": {"type": "integer", "minimum": 0},
                "maxTxRateMbps": {"type": "integer", "minimum": 0},
            },
        },
        "members": {
            "type": "array",
            "maxItems": 4,
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}},
                "anyOf": [{"properties": {"weight": {"type": "number"}}}],
                "unevaluatedProperties": False,
            },
        },
    },
}

RULES = CROSS_FIELD_RULES


@pytest.fixture(scope="module")
def validator() -> ConfigValidator:
    return ConfigValidator(SCHEMA, RULES)


def rejection(validator: ConfigValidator, raw: bytes | str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validator.validate(raw)
    return info.value


def doc(**fields: Any) -> str:
    return json.dumps({"name": "eth0", **fields})


# --- bounds -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [bytes, str])
def test_max_bytes(kind: type[bytes] | type[str]) -> None:
    raw = '{"name": "' + "a" * DEFAULT_MAX_BYTES + '"}'
    with pytest.raises(ConfigError) as info:
        parse_config_json(raw.encode() if kind is bytes else raw)
    assert (info.value.path, info.value.rule) == ("$", "max-bytes")


def test_max_bytes_counts_utf8_bytes_of_str() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config_json('{"a": "' + "é" * 10 + '"}', max_bytes=20)
    assert (info.value.path, info.value.rule) == ("$", "max-bytes")


# Built inside the test, not passed as parameters: reporters must be able to write the
# parameters of a test to UTF-8 files, and a lone surrogate cannot be.
ENCODING_CASES: dict[str, bytes | str] = {
    "invalid-utf8-byte": b'{"name": "\xff"}',
    "lone-surrogate-char": '{"name": "' + chr(0xD800) + '"}',  # cannot be UTF-8
    "escaped-surrogate": '{"name": "\\ud800"}',  # nor can an escaped one
    "escaped-surrogate-key": '{"\\udc00": 1}',
}


@pytest.mark.parametrize(
    ("case", "path"),
    [
        ("invalid-utf8-byte", "$"),
        ("lone-surrogate-char", "$"),
        ("escaped-surrogate", "$.name"),
        ("escaped-surrogate-key", "$"),
    ],
)
def test_encoding(validator: ConfigValidator, case: str, path: str) -> None:
    error = rejection(validator, ENCODING_CASES[case])
    assert (error.path, error.rule) == (path, "encoding")


def test_max_depth_deep_array_never_recurses() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config_json("[" * 100_000, max_bytes=200_000)
    assert (info.value.path, info.value.rule) == ("$", "max-depth")


def test_max_depth_deep_object() -> None:
    raw = '{"a":' * 17 + "{}" + "}" * 17
    with pytest.raises(ConfigError) as info:
        parse_config_json(raw)
    assert (info.value.path, info.value.rule) == ("$", "max-depth")


def test_max_depth_boundary_and_brackets_inside_strings() -> None:
    # Exactly 16 levels is fine, and brackets or escaped quotes inside strings never count.
    raw = '{"a":' * 15 + '{"s": "\\"[[[[[[[[[[[[[[[[[[{{{{{{\\\\"}' + "}" * 15
    value = parse_config_json(raw)
    for _ in range(15):
        value = value["a"]  # type: ignore[assignment]
    assert value == {"s": '"[[[[[[[[[[[[[[[[[[{{{{{{\\'}


# --- JSON -------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ['{"name": }', "", "{", '{"a" 1}', "{'a': 1}", '{"a": 01}'])
def test_syntax(validator: ConfigValidator, raw: str) -> None:
    error = rejection(validator, raw)
    assert (error.path, error.rule) == ("$", "syntax")
    assert "line 1 column" in error.message


@pytest.mark.parametrize("raw", ["[]", '"config"', "42", "null", "true"])
def test_not_object(validator: ConfigValidator, raw: str) -> None:
    error = rejection(validator, raw)
    assert (error.path, error.rule) == ("$", "not-object")


@pytest.mark.parametrize("raw", ['{"name": "a"} {}', '{"name": "a"}x', '{"name": "a"},'])
def test_trailing_data(validator: ConfigValidator, raw: str) -> None:
    error = rejection(validator, raw)
    assert (error.path, error.rule) == ("$", "syntax")
    assert "after the JSON value" in error.message


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "-1e999"])
def test_non_finite(validator: ConfigValidator, literal: str) -> None:
    error = rejection(validator, '{"name": "a", "vf": {"vlan": [1, ' + literal + "]}}")
    assert (error.path, error.rule) == ("$.vf.vlan[1]", "non-finite")


@pytest.mark.parametrize("literal", [str(2**63), str(-(2**63) - 1), "9" * 5000])
def test_integer_outside_int64(validator: ConfigValidator, literal: str) -> None:
    error = rejection(validator, '{"vlanId": ' + literal + "}")
    assert (error.path, error.rule) == ("$.vlanId", "range")


def test_duplicate_key_top_level(validator: ConfigValidator) -> None:
    error = rejection(validator, '{"name": "a", "name": "b"}')
    assert (error.path, error.rule) == ("$.name", "duplicate-key")


def test_duplicate_key_inside_array_element() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config_json('{"a": [{"b": 1}, {"c": {}, "b": 1, "b": 2}]}')
    assert (info.value.path, info.value.rule) == ("$.a[1].b", "duplicate-key")


def test_path_quotes_unusual_keys() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config_json('{"a.b": {"x y": 1, "x y": 2}}')
    assert info.value.path == '$["a.b"]["x y"]'


# --- schema -----------------------------------------------------------------------------


def test_unknown_key_nested(validator: ConfigValidator) -> None:
    error = rejection(validator, doc(vf={"vfIndex": 0, "foo": 1}))
    assert (error.path, error.rule) == ("$.vf.foo", "unknown-key")
    assert "unknown key 'foo'" in error.message


def test_unknown_key_through_unevaluated_properties(validator: ConfigValidator) -> None:
    error = rejection(validator, doc(members=[{"name": "a", "weight": 2}, {"name": "b", "x": 1}]))
    assert (error.path, error.rule) == ("$.members[1].x", "unknown-key")


def test_unknown_key_preferred_over_required_at_same_depth(validator: ConfigValidator) -> None:
    error = rejection(validator, doc(vf={"vfindex": 0}))
    assert (error.path, error.rule) == ("$.vf.vfindex", "unknown-key")


def test_required_nested(validator: ConfigValidator) -> None:
    error = rejection(validator, doc(vf={"vlan": 5}))
    assert (error.path, error.rule) == ("$.vf.vfIndex", "required")
    assert "missing required field 'vfIndex'" in error.message


@pytest.mark.parametrize("value", ["100", 100.0, True, None, [1]])
def test_type(validator: ConfigValidator, value: object) -> None:
    error = rejection(validator, doc(vlanId=value))
    assert (error.path, error.rule) == ("$.vlanId", "type")
    assert "must be of type integer" in error.message


@pytest.mark.parametrize(
    ("value", "message"), [(0, "must be >= 1, got 0"), (5000, "must be <= 4094, got 5000")]
)
def test_range(validator: ConfigValidator, value: int, message: str) -> None:
    error = rejection(validator, doc(vlanId=value))
    assert (error.path, error.rule, error.message) == (
        "$.vlanId",
        "range",
        f"config $.vlanId: {message} [range]",
    )


def test_enum(validator: ConfigValidator) -> None:
    error = rejection(validator, doc(mode="tap"))
    assert (error.path, error.rule) == ("$.mode", "enum")


@pytest.mark.parametrize(
    ("fields", "path", "rule"),
    [
        ({"name": "a" * 16}, "$.name", "size"),
        ({"name": "Eth0"}, "$.name", "pattern"),
        ({"members": [{"name": "m"}] * 5}, "$.members", "size"),
        ({"members": [{"name": "m", "weight": "x"}]}, "$.members[0]", "anyOf"),
    ],
)
def test_other_keywords(
    validator: ConfigValidator, fields: dict[str, Any], path: str, rule: str
) -> None:
    error = rejection(validator, doc(**fields))
    assert (error.path, error.rule) == (path, rule)


@pytest.mark.parametrize(
    ("raw", "path", "rule"),
    [
        ('{"xa": 1, "b": 2}', "$.b", "unknown-key"),  # additionalProperties beside patterns
        ('{"forbidden": 1}', "$.forbidden", "not-allowed"),  # "key": false
        ('{"a": 1, "c": 1}', "$.b", "required"),  # dependentRequired
        ('{"ratio": 0.3}', "$.ratio", "range"),  # multipleOf
        ('{"fixed": 2}', "$.fixed", "enum"),  # const
    ],
)
def test_keyword_mapping(raw: str, path: str, rule: str) -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {},
            "c": {},
            "forbidden": False,
            "ratio": {"multipleOf": 0.25},
            "fixed": {"const": 1},
        },
        "patternProperties": {"^x": {}},
        "additionalProperties": False,
        "dependentRequired": {"a": ["b", "c"]},
    }
    error = rejection(ConfigValidator(schema), raw)
    assert (error.path, error.rule) == (path, rule)


def test_valid_config_is_returned_as_plain_json(validator: ConfigValidator) -> None:
    raw = doc(vlanId=10, vf={"vfIndex": 1, "qos": 3, "vlan": 7})
    assert validator.validate(raw.encode()) == json.loads(raw)


# --- cross-field rules ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "path", "rule_id"),
    [
        ({"vlanId": 10, "mode": "vepa"}, "$.mode", "vlan-forbids-mode"),
        ({"vf": {"vfIndex": 0, "qos": 3}}, "$.vf.vlan", "qos-requires-vlan"),
        ({"vf": {"vfIndex": 0, "qos": 3, "vlan": 0}}, "$.vf.vlan", "qos-requires-vlan"),
        (
            {"vf": {"vfIndex": 0, "minTxRateMbps": 200, "maxTxRateMbps": 100}},
            "$.vf.minTxRateMbps",
            "min-rate-le-max-rate",
        ),
    ],
)
def test_cross_field_violations(
    validator: ConfigValidator, fields: dict[str, Any], path: str, rule_id: str
) -> None:
    error = rejection(validator, doc(**fields))
    assert (error.path, error.rule) == (path, f"cross-field:{rule_id}")
    assert next(r["message"] for r in RULES if r["id"] == rule_id) in error.message


@pytest.mark.parametrize(
    "fields",
    [
        {"mode": "vepa"},
        {"vlanId": 10},
        {"vf": {"vfIndex": 0, "qos": 0}},
        {"vf": {"vfIndex": 0, "qos": 3, "vlan": 1}},
        {"vf": {"vfIndex": 0, "minTxRateMbps": 100, "maxTxRateMbps": 100}},
        {"vf": {"vfIndex": 0, "minTxRateMbps": 100}},
    ],
)
def test_cross_field_satisfied(validator: ConfigValidator, fields: dict[str, Any]) -> None:
    validator.validate(doc(**fields))


@pytest.mark.parametrize(
    "rule",
    [
        {"id": "x", "kind": "implies", "when": "/a", "field": "/b", "message": "m"},
        {"id": "x", "kind": "forbids", "when": "/a", "message": "m"},
        {"id": "x", "kind": "forbids", "when": "/a", "field": "/b", "message": "m", "extra": 1},
        {"id": "x", "kind": "forbids", "when": "a", "field": "/b", "message": "m"},
        {"id": "x", "kind": "forbids", "when": "/a~2", "field": "/b", "message": "m"},
        {
            "id": "x",
            "kind": "requires",
            "when": "/a",
            "field": "/b",
            "minimum": "1",
            "message": "m",
        },
        {"id": "x", "kind": "lessOrEqual", "lower": "/a", "upper": "/b"},
        {"kind": "forbids", "when": "/a", "field": "/b", "message": "m"},
        "forbids",
    ],
)
def test_malformed_rules_fail_at_construction(rule: Any) -> None:
    with pytest.raises(ValueError, match="cross-field rule"):
        ConfigValidator(SCHEMA, [rule])


def test_duplicate_rule_ids_and_invalid_schema_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        ConfigValidator(SCHEMA, [RULES[0], RULES[0]])
    with pytest.raises(ValueError, match="invalid JSON Schema"):
        ConfigValidator({"type": "nonsense"})
    with pytest.raises(ValueError, match="max_depth"):
        ConfigValidator(SCHEMA, max_depth=10_000)


# --- typed decoding ---------------------------------------------------------------------


@dataclass(frozen=True)
class Vf:
    vf_index: int
    vlan: int | None = None
    qos: int | None = None
    spoof_check: bool | None = None
    min_tx_rate_mbps: int | None = None
    max_tx_rate_mbps: int | None = None


@dataclass(frozen=True)
class Member:
    name: str
    weight: float = 1.0


@dataclass(frozen=True)
class Config:
    name: str
    vlan_id: int | None = None
    mode: Literal["bridge", "vepa"] | None = None
    vf: Vf | None = None
    members: tuple[Member, ...] = ()


@dataclass(frozen=True)
class Renamed:
    if_name: str = field(metadata={"json": "ifname"})
    monitor_interval_ms: int = 1000


def test_decode_omitted_optional_bool_is_none(validator: ConfigValidator) -> None:
    config = validator.decode(doc(vf={"vfIndex": 3}), Config)
    assert config.vf == Vf(vf_index=3)
    assert config.vf.spoof_check is None


def test_decode_explicit_false_stays_false(validator: ConfigValidator) -> None:
    config = validator.decode(doc(vf={"vfIndex": 3, "spoofCheck": False}), Config)
    assert config.vf is not None
    assert config.vf.spoof_check is False


def test_decode_nested_tuple_literal_and_camel_case(validator: ConfigValidator) -> None:
    raw = doc(
        vlanId=7,
        vf={"vfIndex": 1, "minTxRateMbps": 10, "maxTxRateMbps": 20},
        members=[{"name": "a", "weight": 2}, {"name": "b"}],
    )
    assert validator.decode(raw, Config) == Config(
        name="eth0",
        vlan_id=7,
        vf=Vf(vf_index=1, min_tx_rate_mbps=10, max_tx_rate_mbps=20),
        members=(Member("a", 2.0), Member("b")),
    )
    assert validator.decode(doc(mode="vepa"), Config).mode == "vepa"
    assert isinstance(validator.decode(raw, Config).members[0].weight, float)
    assert dataclasses.is_dataclass(validator.decode(raw, Config).vf)


def test_decode_metadata_override_and_defaults() -> None:
    assert decode_into({"ifname": "eth1"}, Renamed) == Renamed("eth1", 1000)
    assert decode_into({"ifname": "eth1", "monitorIntervalMs": 5}, Renamed).monitor_interval_ms == 5
    with pytest.raises(ConfigError) as info:
        decode_into({"ifName": "eth1"}, Renamed)
    assert (info.value.path, info.value.rule) == ("$.ifName", "unknown-key")


@pytest.mark.parametrize(
    ("obj", "path", "rule"),
    [
        ({}, "$.name", "required"),
        ({"name": "a", "extra": 1}, "$.extra", "unknown-key"),
        ({"name": 1}, "$.name", "type"),
        ({"name": "a", "vlanId": 1.0}, "$.vlanId", "type"),
        ({"name": "a", "vlanId": True}, "$.vlanId", "type"),
        ({"name": "a", "mode": "tap"}, "$.mode", "enum"),
        ({"name": "a", "vf": {}}, "$.vf.vfIndex", "required"),
        ({"name": "a", "vf": {"vfIndex": 0, "spoofCheck": 0}}, "$.vf.spoofCheck", "type"),
        (
            {"name": "a", "members": [{"name": "a"}, {"name": "b", "weight": "x"}]},
            "$.members[1].weight",
            "type",
        ),
        ({"name": "a", "members": {}}, "$.members", "type"),
    ],
)
def test_decode_into_rejections(obj: dict[str, Any], path: str, rule: str) -> None:
    with pytest.raises(ConfigError) as info:
        decode_into(obj, Config)
    assert (info.value.path, info.value.rule) == (path, rule)


def test_decode_into_rejects_unsupported_dataclasses() -> None:
    @dataclass(frozen=True)
    class BadDefault:
        enabled: bool | None = False

    @dataclass(frozen=True)
    class BadType:
        tags: list[str]

    with pytest.raises(TypeError, match="default to None"):
        decode_into({}, BadDefault)
    with pytest.raises(TypeError, match="unsupported"):
        decode_into({"tags": []}, BadType)

    @dataclass
    class Mutable:
        name: str

    with pytest.raises(TypeError, match="not a dataclass"):
        decode_into({}, dict)
    with pytest.raises(TypeError, match="frozen"):
        decode_into({"name": "a"}, Mutable)
