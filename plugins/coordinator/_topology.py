"""``NetworkTopology`` manifests (``networking.dra.io/v1alpha1``) as frozen dataclasses.

Parsing checks shape only: every key known, every value of the right type and form,
enumerations from the supported set. Whether the steps fit together (plugins, ports,
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
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from plugins.sdk import Sharing, StepKind

from ._yaml import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    QUALIFIED_NAME,
    FieldProblem,
    Fields,
    ManifestError,
    Problems,
    child_path,
    kind_of,
    load_yaml_file,
    parse_quantity,
)

__all__ = [
    "API_VERSION",
    "ATTACHMENT_POLICIES",
    "PRIMARY_NETWORK_POLICIES",
    "RUNTIME_PROFILES",
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
RUNTIME_PROFILES = ("nri-secondary-v1",)
ATTACHMENT_POLICIES = ("SinglePod",)
PRIMARY_NETWORK_POLICIES = ("Preserve",)
MAX_PARALLEL_STEPS = 64
CONTRACT_VERSION = re.compile(r"^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$")
_PORT = re.compile(r"^[a-z][A-Za-z0-9]{0,62}$")


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


def read_header(problems: Problems, doc: object, kind: str) -> tuple[Fields, Fields]:
    """Check ``apiVersion``/``kind`` and return the (metadata, spec) views."""
    top = Fields(problems, "", doc)
    top.only("apiVersion", "kind", "metadata", "spec")
    top.string("apiVersion", choices=(API_VERSION,))
    top.string("kind", choices=(kind,))
    return top.mapping("metadata"), top.mapping("spec")


def read_metadata(meta: Fields) -> tuple[str, dict[str, str], dict[str, str]]:
    meta.only("name", "labels", "annotations")
    name = meta.string("name", pattern=DNS_SUBDOMAIN, what="resource name (DNS subdomain)")
    return name, meta.string_map("labels"), meta.string_map("annotations")


def read_selector(parent: Fields, key: str = "selector") -> Selector:
    sel = parent.mapping(key)
    sel.only("cel")
    return Selector(sel.string("cel"))


def read_source(problems: Problems, path: str, value: object) -> PortSource:
    """``{from: {step, output}}`` at ``path``."""
    wrapper = Fields(problems, path, value)
    wrapper.only("from")
    ref = wrapper.mapping("from")
    ref.only("step", "output")
    step = ref.string("step", pattern=DNS_LABEL, what="step name")
    output = ref.string("output", pattern=_PORT, what="port name")
    return PortSource(step, output)


def _read_inputs(problems: Problems, step: Fields) -> dict[str, tuple[PortSource, ...]]:
    inputs = step.mapping("inputs", required=False)
    out: dict[str, tuple[PortSource, ...]] = {}
    for port, value in inputs.data.items():
        path = inputs.at(port)
        if not _PORT.match(port):
            problems.add(path, f"{port!r} is not a valid port name")
            continue
        if isinstance(value, list):
            if not value:
                problems.add(path, "must list at least one source")
            out[port] = tuple(
                read_source(problems, child_path(path, i), item) for i, item in enumerate(value)
            )
        else:
            out[port] = (read_source(problems, path, value),)
    return out


def _read_allocation(problems: Problems, step: Fields) -> Allocation | None:
    if not step.has("allocation"):
        return None
    alloc = step.mapping("allocation")
    alloc.only("sharing", "selector", "capacityRequests")
    sharing = alloc.string("sharing", choices=tuple(s.value for s in Sharing))
    selector = read_selector(alloc)
    requests = alloc.mapping("capacityRequests", required=False)
    quantities: dict[str, str] = {}
    for name, value in requests.data.items():
        path = requests.at(name)
        if not QUALIFIED_NAME.match(name):
            problems.add(path, f"{name!r} is not a qualified capacity name (domain/name)")
            continue
        quantities[name] = parse_quantity(problems, path, value)
    return Allocation(Sharing(sharing) if sharing else Sharing.EXCLUSIVE, selector, quantities)


def _read_config(problems: Problems, step: Fields) -> str:
    if not step.has("config"):
        return "{}"
    value = step.data["config"]
    if not isinstance(value, dict):
        problems.add(step.at("config"), f"must be a mapping (a JSON object), got {kind_of(value)}")
        return "{}"
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        problems.add(step.at("config"), "numbers must be finite (no .nan or .inf)")
        return "{}"


def _read_step(problems: Problems, path: str, value: object) -> Step:
    step = Fields(problems, path, value)
    step.only("name", "kind", "pluginRef", "allocation", "inputs", "interfaceName", "config")
    name = step.string("name", pattern=DNS_LABEL, what="step name (DNS label)")
    kind = step.string("kind", choices=tuple(k.value for k in StepKind))
    ref = step.mapping("pluginRef")
    ref.only("name", "contractVersion")
    plugin = PluginRef(
        ref.string("name", pattern=DNS_LABEL, what="plugin name"),
        ref.string("contractVersion", pattern=CONTRACT_VERSION, what="contract version"),
    )
    allocation = _read_allocation(problems, step)
    inputs = _read_inputs(problems, step)
    interface_name = step.string("interfaceName", required=False) or None
    config = _read_config(problems, step)
    return Step(
        name,
        StepKind(kind) if kind else StepKind.OPERATION,
        plugin,
        allocation,
        inputs,
        interface_name,
        config,
    )


def parse_topology(doc: object, source: str = "<topology>") -> NetworkTopology:
    """Parse one loaded YAML document; raise :class:`ManifestError` listing every problem."""
    problems = Problems()
    meta, spec = read_header(problems, doc, "NetworkTopology")
    name, labels, annotations = read_metadata(meta)
    spec.only("runtimeProfile", "attachmentPolicy", "execution", "steps", "exports")
    profile = spec.string("runtimeProfile", choices=RUNTIME_PROFILES)
    attachment = spec.string("attachmentPolicy", choices=ATTACHMENT_POLICIES)
    ex = spec.mapping("execution")
    ex.only("maxParallelSteps", "primaryNetworkPolicy")
    execution = Execution(
        ex.integer("maxParallelSteps", low=1, high=MAX_PARALLEL_STEPS),
        ex.string("primaryNetworkPolicy", choices=PRIMARY_NETWORK_POLICIES),
    )
    steps_path = spec.at("steps")
    steps = tuple(
        _read_step(problems, child_path(steps_path, i), item)
        for i, item in enumerate(spec.items("steps"))
    )
    exports_view = spec.mapping("exports", required=False)
    exports: dict[str, PortSource] = {}
    for export, value in exports_view.data.items():
        path = exports_view.at(export)
        if not DNS_LABEL.match(export):
            problems.add(path, f"{export!r} is not a valid export name (DNS label)")
            continue
        exports[export] = read_source(problems, path, value)
    problems.raise_if_any(source)
    return NetworkTopology(
        name, profile, attachment, execution, steps, exports, labels, annotations
    )


def load_topology(path: str | Path) -> NetworkTopology:
    """Load a file holding exactly one ``NetworkTopology`` document."""
    documents = load_yaml_file(path)
    if len(documents) != 1:
        message = f"expected exactly one NetworkTopology document, found {len(documents)}"
        raise ManifestError(str(path), [FieldProblem("$", message)])
    return parse_topology(documents[0], str(path))
