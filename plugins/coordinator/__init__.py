"""The node coordinator: topology, exposure-policy and inventory manifests, validation, CEL
allocation, and its journal (the call states are public: the rig checks that none is left open)."""

from ._allocate import AllocatedDevice, AllocationError, Allocator, allocate
from ._authority import NodeAuthority
from ._cel import CompiledSelector, SelectorError, compile_selector
from ._compile import (
    RESERVED_INTERFACE_NAMES,
    CompiledStep,
    CompiledTopology,
    TopologyError,
    TopologyErrors,
    validate_topology,
)
from ._inventory import AttributeValue, Device, Inventory, load_inventory, parse_inventory
from ._journal import CLOSED_CALL_STATES, OPEN_CALL_STATES, Call, CoordinatorJournal
from ._policy import (
    DRIVER_DOMAIN,
    CapacitySpec,
    CompatibilityRule,
    DeviceExposurePolicy,
    Exposure,
    RequestPolicy,
    SupportedPlugin,
    load_policies,
    parse_policy,
    qualify,
)
from ._publish import PublishedDevice, publish
from ._runtime import Coordinator, StepFailed, operation_id, root_id
from ._topology import (
    API_VERSION,
    Allocation,
    Execution,
    NetworkTopology,
    PluginRef,
    PortSource,
    Selector,
    Step,
    load_topology,
    parse_topology,
)
from ._yaml import (
    FieldProblem,
    ManifestError,
    YAMLLoadError,
    load_yaml_documents,
    load_yaml_file,
)

__all__ = [
    "API_VERSION",
    "CLOSED_CALL_STATES",
    "DRIVER_DOMAIN",
    "OPEN_CALL_STATES",
    "RESERVED_INTERFACE_NAMES",
    "AllocatedDevice",
    "Allocation",
    "AllocationError",
    "Allocator",
    "AttributeValue",
    "Call",
    "CapacitySpec",
    "CompatibilityRule",
    "CompiledSelector",
    "CompiledStep",
    "CompiledTopology",
    "Coordinator",
    "CoordinatorJournal",
    "Device",
    "DeviceExposurePolicy",
    "Execution",
    "Exposure",
    "FieldProblem",
    "Inventory",
    "ManifestError",
    "NetworkTopology",
    "NodeAuthority",
    "PluginRef",
    "PortSource",
    "PublishedDevice",
    "RequestPolicy",
    "Selector",
    "SelectorError",
    "Step",
    "StepFailed",
    "SupportedPlugin",
    "TopologyError",
    "TopologyErrors",
    "YAMLLoadError",
    "allocate",
    "compile_selector",
    "load_inventory",
    "load_policies",
    "load_topology",
    "load_yaml_documents",
    "load_yaml_file",
    "operation_id",
    "parse_inventory",
    "parse_policy",
    "parse_topology",
    "publish",
    "qualify",
    "root_id",
    "validate_topology",
]
