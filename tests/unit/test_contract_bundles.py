"""Every pinned contract bundle: its examples hold, and nothing but ConfigError escapes it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plugins import bond, links, vf
from plugins.sdk import BundleStore, ConfigError
from tests.strategies import arbitrary_configs, config_values, mutated_configs

BUNDLES = BundleStore()
TYPED = {
    "sriov-kernel/v1alpha1": vf.Config,
    "bond/v1alpha1": bond.Config,
    "vlan/v1alpha1": links.VLANConfig,
    "macvlan/v1alpha1": links.SharedChildConfig,
    "ipvlan/v1alpha1": links.SharedChildConfig,
}
PROPERTY = settings(max_examples=1000, deadline=None)


def test_every_plugin_bundle_is_covered() -> None:
    assert sorted(BUNDLES.schema_ids) == sorted(TYPED)


def invalid_cases() -> list[Any]:
    return [
        pytest.param(schema_id, case, id=f"{schema_id}:{case['path']}:{case['rule']}")
        for schema_id in BUNDLES.schema_ids
        for case in BUNDLES.load(schema_id).invalid_examples
    ]


@pytest.mark.parametrize("schema_id", BUNDLES.schema_ids)
def test_valid_examples_decode_into_the_plugin_config(schema_id: str) -> None:
    bundle = BUNDLES.load(schema_id)
    for example in bundle.valid_examples:
        assert isinstance(
            bundle.validator.decode(json.dumps(example), TYPED[schema_id]), TYPED[schema_id]
        )


@pytest.mark.parametrize(("schema_id", "case"), invalid_cases())
def test_invalid_examples_name_their_path_and_rule(schema_id: str, case: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as info:
        BUNDLES.load(schema_id).validator.validate(json.dumps(case["config"]))
    assert (info.value.path, info.value.rule) == (case["path"], case["rule"])


def accept_or_config_error(schema_id: str, raw: str) -> None:
    """Either a ConfigError, or a config that also decodes into the plugin's typed config."""
    bundle = BUNDLES.load(schema_id)
    rejection: ConfigError | None = None
    try:
        bundle.validator.decode(raw, TYPED[schema_id])
    except ConfigError as error:  # a rejection is one of the two fine outcomes
        rejection = error
    if rejection is not None:
        assert rejection.path.startswith("$")
        assert rejection.rule


@pytest.mark.parametrize("schema_id", BUNDLES.schema_ids)
@PROPERTY
@given(data=st.data())
def test_arbitrary_json_against_the_bundle(schema_id: str, data: st.DataObject) -> None:
    schema = BUNDLES.load(schema_id).data["configSchema"]
    value = data.draw(arbitrary_configs(schema, allow_non_finite=True))
    if isinstance(value, dict) and data.draw(st.booleans()):
        value = {**BUNDLES.load(schema_id).valid_examples[0], **value}
    accept_or_config_error(schema_id, json.dumps(value))


@pytest.mark.parametrize("schema_id", BUNDLES.schema_ids)
@PROPERTY
@given(data=st.data())
def test_mutations_of_valid_examples(schema_id: str, data: st.DataObject) -> None:
    bundle = BUNDLES.load(schema_id)
    valid = data.draw(st.sampled_from(bundle.valid_examples))
    kind, raw = data.draw(mutated_configs(valid, config_values(bundle.data["configSchema"])))
    if kind == "duplicate":
        with pytest.raises(ConfigError, match="duplicate-key"):
            bundle.validator.validate(raw)
    else:
        accept_or_config_error(schema_id, raw)
