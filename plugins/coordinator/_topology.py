"""``NetworkTopology`` manifests (``networking.dra.io/v1alpha1``) as frozen dataclasses.

Parsing checks shape only, against the JSON Schema
``plugins/coordinator/schemas/network-topology.schema.json``: every key known, every
value of the right type and form, enumerations from the supported set. Whether the steps fit together (plugins, ports,
cardinality, cycles, names, configs, shared-parent quantities) is
:func:`plugins.coordinator.validate_topology`'s job.

Shape, with the field names of the manifest::

    apiVersion: networking.dra.io/v1alpha1
    kind: NetworkTopology
    metadata: {name: <dns-subdomain>, labels: {..}, annotations: {..}}
    spec:
      runtimeProfile: nri-secondary-v1
      attachmentPolicy: SinglePod
      execution: {maxParallelSteps: 1.., primaryNetworkPolicy: Preserve}
      steps:                                   # non-empty, in author order
        - name: <dns-label>
          kind: Allocation | Operation
          pluginRef: {name: <dns-label>, contractVersion: v1alpha1}
          allocation:                          # Allocation steps only
            sharing: Exclusive | Shared
            selector: {cel: <CEL expression>}
            capacityRequests: {<domain>/<name>: <quantity>}   # optional
          inputs:                              # optional: port -> one source or a list
            <port>: {from: {step: <step>, output: <port>}}
            <port>: [{from: {step: <step>, output: <port>}}, ...]
          interfaceName: <linux ifname>        # optional here, required by most plugins
          config: {...}                        # the plugin's JSON config object
      exports:                                 # optional
        <name>: {from: {step: <step>, output: <port>}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from plugins.sdk import Sharing, StepKind

from ._yaml import (
    FieldProblem,
    ManifestError,
    Problems,
    check_shape,
    child_path,
    load_yaml_file,
)

__all__ = [
    "API_VERSION",
    "TOPOLOGY_SCHEMA",
    "Allocation",
    "Execution",
    "NetworkTopology",
    "PluginRef",
    "PortSource",
    "Selector",
    "Step",
    "load_topology",
    "parse_topology",
]

API_VERSION = "networking.dra.io/v1alpha1"


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Selector:
    """A CEL expression over one device (``device.attributes["dra.networking"].type``)."""

    cel: str


@dataclass(frozen=True)
class PluginRef:
    name: str
    contract_version: str


@dataclass(frozen=True)
class PortSource:
    """``from: {step, output}``: one output port of another step."""

    step: str
    output: str

    def __str__(self) -> str:
        return f"{self.step}.{self.output}"


@dataclass(frozen=True)
class Allocation:
    sharing: Sharing
    selector: Selector
    capacity_requests: Mapping[str, str] = field(default_factory=dict)
    """Qualified capacity name -> whole-number quantity (decimal string)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacity_requests", _frozen(self.capacity_requests))


@dataclass(frozen=True)
class Execution:
    max_parallel_steps: int
    primary_network_policy: str


@dataclass(frozen=True)
class Step:
    name: str
    kind: StepKind
    plugin_ref: PluginRef
    allocation: Allocation | None
    inputs: Mapping[str, tuple[PortSource, ...]]
    """Input port -> its sources, in manifest order (a single ``from`` is a 1-tuple)."""
    interface_name: str | None
    config_json: str
    """The config object as compact JSON, exactly what the plugin's validator receives."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", _frozen(self.inputs))

    @property
    def config(self) -> dict[str, Any]:
        """A fresh copy of the config object."""
        value: dict[str, Any] = json.loads(self.config_json)
        return value


@dataclass(frozen=True)
class NetworkTopology:
    name: str
    runtime_profile: str
    attachment_policy: str
    execution: Execution
    steps: tuple[Step, ...]
    exports: Mapping[str, PortSource]
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("exports", "labels", "annotations"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    def step(self, name: str) -> Step | None:
        return next((s for s in self.steps if s.name == name), None)

    @property
    def step_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.steps)


# --- parsing ---------------------------------------------------------------------------

TOPOLOGY_SCHEMA = "network-topology.schema.json"


def read_metadata(meta: Mapping[str, Any]) -> tuple[str, dict[str, str], dict[str, str]]:
    return meta["name"], dict(meta.get("labels", {})), dict(meta.get("annotations", {}))


def read_source(value: Mapping[str, Any]) -> PortSource:
    """``{from: {step, output}}``, already checked by the schema."""
    return PortSource(value["from"]["step"], value["from"]["output"])


def _read_inputs(step: Mapping[str, Any]) -> dict[str, tuple[PortSource, ...]]:
    return {
        port: tuple(read_source(s) for s in (value if isinstance(value, list) else [value]))
        for port, value in step.get("inputs", {}).items()
    }


def _read_allocation(step: Mapping[str, Any]) -> Allocation | None:
    alloc = step.get("allocation")
    if alloc is None:
        return None
    requests = {name: str(q) for name, q in alloc.get("capacityRequests", {}).items()}
    return Allocation(Sharing(alloc["sharing"]), Selector(alloc["selector"]["cel"]), requests)


def _read_config(problems: Problems, path: str, step: Mapping[str, Any]) -> str:
    try:
        return json.dumps(
            step.get("config", {}), separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except ValueError:  # only from a document built in code: the YAML loader refuses .nan
        problems.add(child_path(path, "config"), "numbers must be finite (no .nan or .inf)")
        return "{}"


def _read_step(problems: Problems, path: str, step: Mapping[str, Any]) -> Step:
    ref = step["pluginRef"]
    return Step(
        step["name"],
        StepKind(step["kind"]),
        PluginRef(ref["name"], ref["contractVersion"]),
        _read_allocation(step),
        _read_inputs(step),
        step.get("interfaceName"),
        _read_config(problems, path, step),
    )


def parse_topology(doc: object, source: str = "<topology>") -> NetworkTopology:
    """Check one loaded YAML document against the schema (plugins/coordinator/schemas/
    network-topology.schema.json) and build it; :class:`ManifestError` lists every problem."""
    check_shape(TOPOLOGY_SCHEMA, doc, source)
    assert isinstance(doc, dict)  # the schema says so
    problems = Problems()
    name, labels, annotations = read_metadata(doc["metadata"])
    spec = doc["spec"]
    steps = tuple(
        _read_step(problems, f"spec.steps[{i}]", step) for i, step in enumerate(spec["steps"])
    )
    exports = {name: read_source(value) for name, value in spec.get("exports", {}).items()}
    problems.raise_if_any(source)
    execution = Execution(
        spec["execution"]["maxParallelSteps"], spec["execution"]["primaryNetworkPolicy"]
    )
    return NetworkTopology(
        name,
        spec["runtimeProfile"],
        spec["attachmentPolicy"],
        execution,
        steps,
        exports,
        labels,
        annotations,
    )


def load_topology(path: str | Path) -> NetworkTopology:
    """Load a file holding exactly one ``NetworkTopology`` document."""
    documents = load_yaml_file(path)
    if len(documents) != 1:
        message = f"expected exactly one NetworkTopology document, found {len(documents)}"
        raise ManifestError(str(path), [FieldProblem("$", message)])
    return parse_topology(documents[0], str(path))
