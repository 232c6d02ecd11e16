"""Helpers for the coordinator tests: the five pinned registrations and the example manifests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from plugins.coordinator import (
    CompiledTopology,
    DeviceExposurePolicy,
    Inventory,
    TopologyErrors,
    load_inventory,
    load_policies,
    load_yaml_file,
    parse_policy,
    parse_topology,
    validate_topology,
)
from plugins.sdk import Registration
from tests.factories import registrations

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = ROOT / "topologies"

_REGISTRATIONS = registrations()
_RAW = {
    name: load_yaml_file(TOPOLOGIES / f"{name}.yaml")[0]
    for name in ("vf-bond-vlan", "macvlan", "ipvlan")
}
_RAW_POLICIES = load_yaml_file(TOPOLOGIES / "policies.yaml")
_POLICIES = load_policies(TOPOLOGIES / "policies.yaml")
_INVENTORY = load_inventory(TOPOLOGIES / "inventory.yaml")


def regs() -> dict[str, Registration]:
    return dict(_REGISTRATIONS)


def raw(name: str) -> dict[str, Any]:
    """A fresh, mutable copy of an example topology as loaded from YAML."""
    return copy.deepcopy(_RAW[name])


def raw_policies() -> list[dict[str, Any]]:
    return copy.deepcopy(_RAW_POLICIES)


def policies(docs: list[dict[str, Any]] | None = None) -> tuple[DeviceExposurePolicy, ...]:
    if docs is None:
        return _POLICIES
    return tuple(parse_policy(d) for d in docs)


def inventory() -> Inventory:
    return _INVENTORY


def steps(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The raw step mappings of a topology document, by name (mutating them mutates doc)."""
    return {s["name"]: s for s in doc["spec"]["steps"]}


def compile_doc(
    doc: dict[str, Any], pols: tuple[DeviceExposurePolicy, ...] | None = None
) -> CompiledTopology:
    return validate_topology(parse_topology(doc), regs(), _POLICIES if pols is None else pols)


def errors(
    doc: dict[str, Any], pols: tuple[DeviceExposurePolicy, ...] | None = None
) -> TopologyErrors:
    with pytest.raises(TopologyErrors) as info:
        compile_doc(doc, pols)
    return info.value


def where(
    doc: dict[str, Any], pols: tuple[DeviceExposurePolicy, ...] | None = None
) -> list[tuple[str | None, str]]:
    return errors(doc, pols).where()


def message(doc: dict[str, Any], step: str | None, field: str) -> str:
    """The message of the one error at (step, field)."""
    found = [e.message for e in errors(doc).errors if (e.step, e.field) == (step, field)]
    assert len(found) == 1, found
    return found[0]
