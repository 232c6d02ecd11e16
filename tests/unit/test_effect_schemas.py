"""Effect payload schemas are compiled at first use, not at start-up; a bad one is still named.

``EffectRegistry`` no longer checks every executor's payload schema against the
metaschema when it is built (that cost the service's start-up ~5 ms per kind and the
import of jsonschema). These tests hold what the eager check guaranteed: every
executor the services ship has a valid schema, and an invalid one is refused with the
kind named, before any plan that uses it gets an intent.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from fakekernel.model import FakeKernelModel
from plugins.effects.linux import linux_effects
from plugins.sdk import RegistrationError
from plugins.sdk.runner import EffectRegistry
from tests.runner.toy import ToyKernel, toy_effects


def test_every_shipped_executor_has_a_valid_payload_schema(tmp_path: Path) -> None:
    for registry in (linux_effects(FakeKernelModel()), toy_effects(ToyKernel(tmp_path / "toy"))):
        for kind in sorted(registry.kinds):
            assert registry.payload_validator(kind) is not None, kind


class _BadSchema:
    kind = "test/bad-schema/v1"
    payload_schema: Mapping[str, Any] = {"type": "nonsense"}
    outputs: tuple[str, ...] = ()


def test_an_invalid_payload_schema_is_refused_naming_the_kind() -> None:
    registry = EffectRegistry([_BadSchema()])  # type: ignore[list-item]
    assert registry.kinds == {_BadSchema.kind}
    with pytest.raises(RegistrationError, match=r"test/bad-schema/v1.*invalid payload schema"):
        registry.payload_problem(_BadSchema.kind, {})
    # Refused again, not cached as valid.
    with pytest.raises(RegistrationError, match="invalid payload schema"):
        registry.payload_validator(_BadSchema.kind)


def test_a_payload_is_checked_against_its_kind_schema() -> None:
    registry = linux_effects(FakeKernelModel())
    kind = "linux/set-link-mtu/v1"
    assert kind in registry.kinds
    assert registry.payload_problem(kind, {}) is not None
