"""Validate a parsed ``NetworkTopology`` against the pinned plugin contracts and compile it.

:func:`validate_topology` performs every static check of the blueprint's validation list
(step kinds, input references, acyclicity, port cardinality, assigned-name uniqueness,
profile config, shared-parent quantities and groups) and collects *all* problems into
one :class:`TopologyErrors`; each problem is a :class:`TopologyError` naming the step (or
``None`` for topology-level fields such as exports) and the field, with a path relative
to the step (``pluginRef.contractVersion``, ``inputs.members[1].from.output``).

The result, :class:`CompiledTopology`, carries the hook order the coordinator follows:

* ``prepare_order``: the Allocation roots, in step order (NodePrepare);
* ``connect_order``: a topological order of every step, ties broken by step order
  (ConnectNetwork), so the result is deterministic;
* ``remove_order``: ``connect_order`` reversed (RemoveNetwork);
* ``unprepare_order``: ``prepare_order`` reversed (NodeUnprepare).
"""

from __future__ import annotations

import graphlib
import heapq
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from plugins.sdk import (
    ConfigError,
    ConfigValidator,
    Descriptor,
    InvalidArgument,
    PortSpec,
    Registration,
    Sharing,
    StepKind,
    check_interface_name,
)

from ._cel import SelectorError, compile_selector
from ._policy import DeviceExposurePolicy
from ._topology import NetworkTopology, PortSource, Step

__all__ = [
    "RESERVED_INTERFACE_NAMES",
    "CompiledStep",
    "CompiledTopology",
    "TopologyError",
    "TopologyErrors",
    "validate_topology",
]

RESERVED_INTERFACE_NAMES = ("lo",)
"""Never assignable: every sandbox has them."""
PRIMARY_INTERFACE_NAME = "eth0"
"""The runtime's primary interface; not assignable while primaryNetworkPolicy is Preserve."""


class TopologyError(InvalidArgument):
    """One validation problem: ``step`` (None for topology-level fields) and ``field``."""

    def __init__(
        self, step: str | None, field: str, message: str, *, path: str | None = None
    ) -> None:
        where = f"step {step!r} field {field!r}" if step is not None else f"field {field!r}"
        super().__init__(
            f"{where}: {message}",
            details={"step": step or "", "field": field, **({"path": path} if path else {})},
        )
        self.step = step
        self.field = field
        self.path = path


class TopologyErrors(InvalidArgument):
    """Every problem of one topology: by step (manifest order), then topology-level ones."""

    def __init__(self, topology: str, errors: Sequence[TopologyError]) -> None:
        lines = "\n".join(f"  - {e}" for e in errors)
        count = f"{len(errors)} problem" + ("" if len(errors) == 1 else "s")
        super().__init__(f"topology {topology!r} is invalid ({count}):\n{lines}")
        self.topology = topology
        self.errors = tuple(errors)

    def where(self) -> list[tuple[str | None, str]]:
        """(step, field) of every error; convenient in tests and reports."""
        return [(e.step, e.field) for e in self.errors]


@dataclass(frozen=True)
class CompiledStep:
    step: Step
    descriptor: Descriptor
    inputs: Mapping[str, tuple[PortSource, ...]]
    """Every declared input port of the plugin -> its sources (empty for optional ports)."""
    dependencies: tuple[str, ...]
    """The steps whose outputs this step consumes, in step order, without repeats."""
    interface_names: Mapping[str, str]
    """Descriptor name slot -> assigned Linux name (``{"interface": "net1"}``)."""
    config: Mapping[str, Any]
    """The config as the plugin's strict validator returned it."""
    capacity_requests: Mapping[str, int]
    """Effective capacity per allocation (qualified name -> count), defaults applied."""
    policies: tuple[str, ...] = ()
    """Names of the exposure policies that may serve this (Shared) step."""

    def __post_init__(self) -> None:
        for name in ("inputs", "interface_names", "config", "capacity_requests"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @property
    def name(self) -> str:
        return self.step.name

    @property
    def plugin(self) -> str:
        return self.descriptor.name

    @property
    def is_root(self) -> bool:
        return self.step.kind is StepKind.ALLOCATION

    @property
    def config_json(self) -> str:
        return self.step.config_json


@dataclass(frozen=True)
class CompiledTopology:
    topology: NetworkTopology
    steps: Mapping[str, CompiledStep]
    """In step (manifest) order."""
    prepare_order: tuple[str, ...]
    connect_order: tuple[str, ...]
    remove_order: tuple[str, ...]
    unprepare_order: tuple[str, ...]
    exports: Mapping[str, PortSource] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", MappingProxyType(dict(self.steps)))
        object.__setattr__(self, "exports", MappingProxyType(dict(self.exports)))

    @property
    def name(self) -> str:
        return self.topology.name

    def step(self, name: str) -> CompiledStep:
        return self.steps[name]

    def roots(self) -> tuple[CompiledStep, ...]:
        return tuple(self.steps[name] for name in self.prepare_order)


# --- validation ------------------------------------------------------------------------

_VALIDATORS: dict[str, ConfigValidator] = {}


def _validator(descriptor: Descriptor) -> ConfigValidator:
    """The descriptor's strict validator, built once per contract digest."""
    key = descriptor.contract_digest
    if key not in _VALIDATORS:
        _VALIDATORS[key] = ConfigValidator(descriptor.config_schema, descriptor.cross_field_rules)
    return _VALIDATORS[key]


@dataclass
class _Context:
    topology: NetworkTopology
    descriptors: Mapping[str, Descriptor]
    validators: Mapping[str, ConfigValidator]
    policies: Sequence[DeviceExposurePolicy]
    errors: list[TopologyError] = field(default_factory=list)
    by_name: dict[str, Step] = field(default_factory=dict)

    def error(self, step: str | None, field_: str, message: str, path: str | None = None) -> None:
        self.errors.append(TopologyError(step, field_, message, path=path))

    def descriptor_of(self, step: Step) -> Descriptor | None:
        d = self.descriptors.get(step.plugin_ref.name)
        if d is not None and d.contract_version == step.plugin_ref.contract_version:
            return d
        return None


def validate_topology(
    topology: NetworkTopology,
    descriptors: Mapping[str, Descriptor | Registration],
    policies: Sequence[DeviceExposurePolicy] = (),
) -> CompiledTopology:
    """Validate ``topology`` against the plugins' pinned descriptors and compile it.

    ``descriptors`` maps plugin name to its complete descriptor or to its
    :class:`~plugins.sdk.Registration` (whose validator is then used for configs).
    ``policies`` are the exposure policies that may serve Shared steps; when none are
    given, a Shared step must state its capacity request explicitly.
    Raises :class:`TopologyErrors` listing every problem.
    """
    plain: dict[str, Descriptor] = {}
    validators: dict[str, ConfigValidator] = {}
    for name, item in descriptors.items():
        descriptor = item.descriptor if isinstance(item, Registration) else item
        if descriptor.name != name:
            raise ValueError(f"descriptors[{name!r}] describes plugin {descriptor.name!r}")
        plain[name] = descriptor
        validators[name] = (
            item.validator if isinstance(item, Registration) else _validator(descriptor)
        )
    ctx = _Context(topology, plain, validators, policies)
    _check_step_names(ctx)
    compiled: dict[str, CompiledStep] = {}
    for step in topology.steps:
        if ctx.by_name.get(step.name) is not step:
            continue  # a duplicate name, already reported
        result = _check_step(ctx, step)
        if result is not None:
            compiled[step.name] = result
    _check_interface_names(ctx)
    connect_order = _order(ctx)
    _check_exports(ctx)
    if ctx.errors:
        position = {name: i for i, name in enumerate(ctx.by_name)}
        ranked = sorted(ctx.errors, key=lambda e: position.get(e.step or "", len(position)))
        raise TopologyErrors(topology.name, ranked)
    prepare = tuple(s.name for s in topology.steps if s.kind is StepKind.ALLOCATION)
    return CompiledTopology(
        topology,
        compiled,
        prepare,
        connect_order,
        tuple(reversed(connect_order)),
        tuple(reversed(prepare)),
        topology.exports,
    )


def _check_step_names(ctx: _Context) -> None:
    for step in ctx.topology.steps:
        if step.name in ctx.by_name:
            ctx.error(step.name, "name", "another step has the same name")
        else:
            ctx.by_name[step.name] = step


def _check_step(ctx: _Context, step: Step) -> CompiledStep | None:
    descriptor = _check_plugin_ref(ctx, step)
    _check_selector(ctx, step)
    if descriptor is None:
        _check_references(ctx, step, None)  # still report dangling references
        return None
    _check_kind(ctx, step, descriptor)
    requests, policies = _check_allocation(ctx, step, descriptor)
    inputs = _check_inputs(ctx, step, descriptor)
    names = _check_interface_slot(ctx, step, descriptor)
    config = _check_config(ctx, step, descriptor)
    order = list(ctx.by_name)
    producers = {s.step for sources in step.inputs.values() for s in sources}
    deps = [name for name in order if name in producers]
    return CompiledStep(step, descriptor, inputs, tuple(deps), names, config, requests, policies)


def _check_plugin_ref(ctx: _Context, step: Step) -> Descriptor | None:
    ref = step.plugin_ref
    descriptor = ctx.descriptors.get(ref.name)
    if descriptor is None:
        known = ", ".join(sorted(ctx.descriptors)) or "none"
        ctx.error(step.name, "pluginRef.name", f"unknown plugin {ref.name!r} (known: {known})")
        return None
    if ref.contract_version != descriptor.contract_version:
        ctx.error(
            step.name,
            "pluginRef.contractVersion",
            f"plugin {ref.name!r} implements contract {descriptor.contract_version!r}, "
            f"not {ref.contract_version!r}",
        )
        return None
    return descriptor


def _check_selector(ctx: _Context, step: Step) -> None:
    if step.allocation is None:
        return
    try:
        compile_selector(step.allocation.selector.cel, step=step.name)
    except SelectorError as exc:
        ctx.error(step.name, "allocation.selector.cel", exc.reason)


def _check_kind(ctx: _Context, step: Step, descriptor: Descriptor) -> None:
    if step.kind not in descriptor.step_kinds:
        kinds = ", ".join(str(k) for k in descriptor.step_kinds)
        ctx.error(
            step.name,
            "kind",
            f"plugin {descriptor.name!r} runs only as {kinds} steps, not {step.kind}",
        )
    if step.kind is StepKind.ALLOCATION and step.allocation is None:
        ctx.error(step.name, "allocation", "an Allocation step needs an allocation")
    if step.kind is StepKind.OPERATION and step.allocation is not None:
        ctx.error(
            step.name,
            "allocation",
            "an Operation step allocates nothing; it consumes other steps' outputs",
        )


# --- allocation: sharing, capacity, policies -----------------------------------------------

_SEMANTICS = {"exclusive-device": Sharing.EXCLUSIVE, "shared-unit": Sharing.SHARED}


def _check_allocation(
    ctx: _Context, step: Step, descriptor: Descriptor
) -> tuple[dict[str, int], tuple[str, ...]]:
    alloc = step.allocation
    if alloc is None:
        return {}, ()
    if step.kind is not StepKind.ALLOCATION or StepKind.ALLOCATION not in descriptor.step_kinds:
        return {}, ()  # the kind error says it all
    wanted = _SEMANTICS.get(descriptor.preparation.semantics)
    if wanted is not None and alloc.sharing is not wanted:
        ctx.error(
            step.name,
            "allocation.sharing",
            f"plugin {descriptor.name!r} prepares {descriptor.preparation.semantics} "
            f"allocations, so sharing must be {wanted}, not {alloc.sharing}",
        )
        return {}, ()
    if alloc.sharing is Sharing.EXCLUSIVE:
        for name in alloc.capacity_requests:
            ctx.error(
                step.name,
                f'allocation.capacityRequests["{name}"]',
                "an Exclusive allocation takes the whole device and requests no capacity",
            )
        return {}, ()
    return _check_shared(ctx, step, descriptor)


def _check_shared(
    ctx: _Context, step: Step, descriptor: Descriptor
) -> tuple[dict[str, int], tuple[str, ...]]:
    assert step.allocation is not None
    capacity = descriptor.preparation.capacity
    field_ = "allocation.capacityRequests"
    if capacity is None:  # a shared-unit contract always names its capacity
        ctx.error(step.name, field_, f"plugin {descriptor.name!r} declares no shared capacity")
        return {}, ()
    requests = step.allocation.capacity_requests
    for name in requests:
        if name != capacity:
            ctx.error(
                step.name,
                f'{field_}["{name}"]',
                f"plugin {descriptor.name!r} consumes {capacity!r}, not {name!r}",
            )
    requested = requests.get(capacity)
    if requested is not None and requested != "1":
        ctx.error(
            step.name,
            f'{field_}["{capacity}"]',
            f"must request exactly 1 {capacity} (one child per allocation), got {requested}",
        )
    candidates = [p for p in ctx.policies if p.supports(descriptor.name) is not None]
    if ctx.policies and not candidates:
        ctx.error(
            step.name,
            "allocation",
            f"no DeviceExposurePolicy lists {descriptor.name!r} in supportedNetworkPlugins",
        )
    if requested is None and not candidates:
        ctx.error(
            step.name,
            field_,
            f'must request {capacity}: "1" (omission is accepted only when an exposure '
            "policy's requestPolicy.default is 1)",
        )
    for policy in candidates:
        _check_policy(ctx, step, descriptor, capacity, policy, omitted=requested is None)
    return {capacity: 1}, tuple(p.name for p in candidates)


def _check_policy(
    ctx: _Context,
    step: Step,
    descriptor: Descriptor,
    capacity: str,
    policy: DeviceExposurePolicy,
    *,
    omitted: bool,
) -> None:
    """Every policy offering the plugin must agree with the step: the scheduler may pick
    a device from any of them, so one disagreeing policy makes the step unsafe."""
    who = f"DeviceExposurePolicy {policy.name!r}"
    supported = policy.supports(descriptor.name)
    assert supported is not None
    consumes = supported.consumes()
    if consumes != {capacity: "1"}:
        shown = json.dumps(dict(supported.consume_per_allocation))
        ctx.error(
            step.name,
            "allocation",
            f"{who} consumes {shown} per {descriptor.name} allocation; "
            f"the step needs exactly 1 {capacity}",
        )
    if not policy.exposure.allow_multiple_allocations:
        ctx.error(step.name, "allocation.sharing", f"{who} does not allow multiple allocations")
    if not policy.groups_naming(descriptor.name):
        ctx.error(
            step.name,
            "allocation",
            f"{who} has no compatibility group naming {descriptor.name!r}",
        )
    if omitted:
        spec = policy.exposure.qualified_capacity().get(capacity)
        rp = spec.request_policy if spec is not None else None
        if rp is None or rp.default != "1":
            default = rp.default if rp is not None else None
            ctx.error(
                step.name,
                "allocation.capacityRequests",
                f'omitted, but {who} has requestPolicy.default {default!r} for {capacity}, not "1"',
            )


# --- ports ---------------------------------------------------------------------------------


def _output_of(ctx: _Context, step: Step, path: str, source: PortSource) -> PortSpec | None:
    """Resolve one source to the producer's connection output; report when it does not."""
    producer = ctx.by_name.get(source.step)
    if producer is None:
        ctx.error(step.name, f"{path}.from.step", f"no step named {source.step!r}")
        return None
    descriptor = ctx.descriptor_of(producer)
    if descriptor is None:
        return None  # the producer's own pluginRef error says why
    port = descriptor.output_port(source.output)
    if port is not None:
        return port
    prepared = {p.name for p in descriptor.preparation.outputs}
    outputs = ", ".join(p.name for p in descriptor.outputs) or "none"
    if source.output in prepared:
        message = (
            f"{source.output!r} is a NodePrepare output of {descriptor.name!r}, handed only "
            f"to that root's own ConnectNetwork; connection outputs: {outputs}"
        )
    else:
        message = f"plugin {descriptor.name!r} has no output {source.output!r} ({outputs})"
    ctx.error(step.name, f"{path}.from.output", message)
    return None


def _check_references(ctx: _Context, step: Step, descriptor: Descriptor | None) -> None:
    for port, sources in step.inputs.items():
        spec = descriptor.input_port(port) if descriptor is not None else None
        for index, source in enumerate(sources):
            path = f"inputs.{port}[{index}]"
            output = _output_of(ctx, step, path, source)
            if output is not None and spec is not None and output.type != spec.type:
                ctx.error(
                    step.name,
                    f"{path}.from.output",
                    f"{source} is a {output.type}, but port {port!r} takes {spec.type}",
                )
            if source in sources[:index]:
                ctx.error(step.name, path, f"{source} is connected to {port!r} twice")


def _check_inputs(
    ctx: _Context, step: Step, descriptor: Descriptor
) -> dict[str, tuple[PortSource, ...]]:
    declared = {p.name: p for p in descriptor.inputs}
    for port, sources in step.inputs.items():
        spec = declared.get(port)
        if spec is None:
            names = ", ".join(declared) or "none"
            ctx.error(
                step.name,
                f"inputs.{port}",
                f"plugin {descriptor.name!r} has no input port {port!r} (input ports: {names})",
            )
            continue
        if not spec.min <= len(sources) <= spec.max:
            span = f"{spec.min}" if spec.min == spec.max else f"{spec.min}..{spec.max}"
            ctx.error(
                step.name,
                f"inputs.{port}",
                f"port {port!r} of {descriptor.name!r} takes {span} {spec.type} "
                f"sources, got {len(sources)}",
            )
    for spec in descriptor.inputs:
        if spec.min > 0 and spec.name not in step.inputs:
            ctx.error(
                step.name,
                f"inputs.{spec.name}",
                f"required input port {spec.name!r} of {descriptor.name!r} is not connected "
                f"(needs {spec.min}..{spec.max} {spec.type})",
            )
    _check_references(ctx, step, descriptor)
    return {spec.name: tuple(step.inputs.get(spec.name, ())) for spec in descriptor.inputs}


def _check_interface_slot(ctx: _Context, step: Step, descriptor: Descriptor) -> dict[str, str]:
    slots = descriptor.interface_names
    if not slots:
        if step.interface_name is not None:
            ctx.error(
                step.name,
                "interfaceName",
                f"plugin {descriptor.name!r} creates no named interface",
            )
        return {}
    if len(slots) > 1:  # one interfaceName per step cannot fill several slots
        ctx.error(
            step.name,
            "interfaceName",
            f"plugin {descriptor.name!r} names {len(slots)} interfaces; topologies support one",
        )
        return {}
    if step.interface_name is None:
        ctx.error(
            step.name,
            "interfaceName",
            f"plugin {descriptor.name!r} needs an assigned interface name",
        )
        return {}
    return {slots[0]: step.interface_name}


def _check_interface_names(ctx: _Context) -> None:
    owner: dict[str, str] = {}
    preserve = ctx.topology.execution.primary_network_policy == "Preserve"
    for step in ctx.topology.steps:
        name = step.interface_name
        if name is None:
            continue
        problem = check_interface_name(name)
        if problem is not None:
            ctx.error(step.name, "interfaceName", f"not a valid Linux interface name: {problem}")
        elif name in RESERVED_INTERFACE_NAMES:
            ctx.error(step.name, "interfaceName", f"{name!r} is reserved in every sandbox")
        elif preserve and name == PRIMARY_INTERFACE_NAME:
            ctx.error(
                step.name,
                "interfaceName",
                f"{name!r} is the primary interface, which primaryNetworkPolicy Preserve keeps",
            )
        elif name in owner:
            ctx.error(
                step.name,
                "interfaceName",
                f"{name!r} is already assigned by step {owner[name]!r}",
            )
        else:
            owner[name] = step.name


def _check_config(ctx: _Context, step: Step, descriptor: Descriptor) -> dict[str, Any]:
    validator = ctx.validators[descriptor.name]
    try:
        return dict(validator.validate(step.config_json))
    except ConfigError as exc:
        ctx.error(
            step.name,
            "config",
            f"{descriptor.name} config {exc.path}: {_config_message(exc)} [{exc.rule}]",
            path=exc.path,
        )
        return {}


def _config_message(exc: ConfigError) -> str:
    prefix = f"config {exc.path}: "
    text = exc.message.removeprefix(prefix)
    return text.removesuffix(f" [{exc.rule}]")


# --- graph ---------------------------------------------------------------------------------


def _edges(ctx: _Context) -> dict[str, list[str]]:
    """consumer -> producers, over steps that exist (dangling references are reported)."""
    deps: dict[str, list[str]] = {name: [] for name in ctx.by_name}
    for name, step in ctx.by_name.items():
        for sources in step.inputs.values():
            for source in sources:
                if source.step in ctx.by_name and source.step not in deps[name]:
                    deps[name].append(source.step)
    return deps


def _order(ctx: _Context) -> tuple[str, ...]:
    """A topological order that always takes the earliest ready step; reports a cycle."""
    index = {name: i for i, name in enumerate(ctx.by_name)}
    sorter = graphlib.TopologicalSorter(_edges(ctx))
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        cycle = _earliest_first(exc.args[1][:-1], index)  # graphlib repeats the first step
        ctx.error(
            cycle[0],
            "inputs",
            "the step graph has a cycle: " + " -> ".join([*cycle, cycle[0]]),
        )
        return ()  # unused: the cycle fails validation
    # graphlib hands out ready steps as a set; a heap keyed by step order makes the
    # result deterministic (ties broken by step order, as the module docstring promises).
    ready = [(index[name], name) for name in sorter.get_ready()]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        sorter.done(name)
        for consumer in sorter.get_ready():
            heapq.heappush(ready, (index[consumer], consumer))
    return tuple(order)


def _earliest_first(cycle: Sequence[str], index: Mapping[str, int]) -> list[str]:
    """The cycle (producer -> consumer, as graphlib gives it) from its earliest step."""
    first = min(range(len(cycle)), key=lambda i: index[cycle[i]])
    return [*cycle[first:], *cycle[:first]]


def _check_exports(ctx: _Context) -> None:
    for name, source in ctx.topology.exports.items():
        producer = ctx.by_name.get(source.step)
        if producer is None:
            ctx.error(None, f"exports.{name}.from.step", f"no step named {source.step!r}")
            continue
        descriptor = ctx.descriptor_of(producer)
        if descriptor is None:
            continue
        if descriptor.output_port(source.output) is None:
            outputs = ", ".join(p.name for p in descriptor.outputs) or "none"
            ctx.error(
                None,
                f"exports.{name}.from.output",
                f"step {source.step!r} ({descriptor.name}) has no connection output "
                f"{source.output!r} ({outputs})",
            )
