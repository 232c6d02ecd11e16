"""The documentation's example is the code the tests run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from examples.dummy_plugin import Config, DummyPlugin, registry
from plugins.sdk import ConfigError, ConnectCall, Hook, WrongStepKind
from tests import factories as f

ROOT = Path(__file__).resolve().parents[2]


def test_writing_a_plugin_shows_the_example_verbatim() -> None:
    doc = (ROOT / "docs" / "writing-a-plugin.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.DOTALL)
    assert (ROOT / "examples" / "dummy_plugin" / "__init__.py").read_text() in blocks


def example_call(config: object) -> ConnectCall:
    (reg,) = registry().seal()
    return ConnectCall(
        f.envelope(Hook.CONNECT_NETWORK),
        reg.descriptor,
        reg.validator,
        json.dumps(config),
        sandbox=f.SANDBOX,
        interface_names={"interface": "dummy0"},
    )


def test_example_plugin_registers_with_its_own_pinned_bundle() -> None:
    (reg,) = registry().seal()
    assert reg.name == "dummy"
    assert reg.contract_digest.startswith("sha256:")


def test_example_plugin_plans() -> None:
    plan = DummyPlugin().connect_network(example_call({"mtu": 1500}))
    assert [e.id for e in plan.effects] == ["create-dummy", "activate"]
    assert plan.effects[0].payload["name"] == "dummy0"
    assert example_call({"mtu": 9000}).config(Config) == Config(mtu=9000)


def test_example_plugin_config_is_strict() -> None:
    with pytest.raises(ConfigError) as info:
        DummyPlugin().connect_network(example_call({"mtu": 1500, "mac": "01:00:00:00:00:01"}))
    assert (info.value.path, info.value.rule) == ("$.mac", "pattern")


def test_example_plugin_refuses_root_hooks() -> None:
    (reg,) = registry().seal()
    with pytest.raises(WrongStepKind):
        DummyPlugin().node_prepare(f.prepare_call("bond", {}, None))
    assert reg.descriptor.preparation.semantics == "none"
