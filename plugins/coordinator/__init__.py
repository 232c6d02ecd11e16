"""The node coordinator: topology, exposure-policy and inventory manifests, validation, CEL
allocation, and its journal (the call states are public: the rig checks that none is left open);
and the coordinator as a program (``networkplugin-coordinator``: ``run``, ``serve``), with its
config (``CoordinatorConfig``), its requests (``CoordinatorService``) and its client
(``CoordinatorClient``), which checks who answers on each plugin socket
(``CheckedPluginClient``)."""

from ._allocate import AllocatedDevice, AllocationError, Allocator, allocate
from ._authority import NodeAuthority
from ._cel import CompiledSelector, SelectorError, compile_selector
from ._client import CoordinatorCallError, CoordinatorClient
from ._compile import (
    RESERVED_INTERFACE_NAMES,
    CompiledStep,
    CompiledTopology,
    TopologyError,
    TopologyErrors,
    validate_topology,
)
from ._inventory import AttributeValue, Device, Inventory, load_inventory, parse_inventory
from ._journal import (
    APPLICATION_STATES,
    CLOSED_CALL_STATES,
    OPEN_CALL_STATES,
    Application,
    Call,
    Claim,
    CoordinatorJournal,
)
from ._main import (
    check_plugins,
    load_manifests,
    main,
    pinned_descriptors,
    plugin_clients,
    run,
    serve,
)
from ._peers import CheckedPluginClient, PeerMismatch, identity_problem
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
from ._program import CoordinatorService
from ._program_config import CoordinatorConfig, PluginEndpoint
from ._program_values import (
    ApplicationStatus,
    ApplyRequest,
    ApplyResult,
    CoordinatorStatus,
    OpenCall,
    OutputHandle,
    RemoveResult,
    StepReceipt,
)
from ._publish import PublishedDevice, publish
from ._runtime import Coordinator, StepFailed, operation_id, root_id
from ._server import CoordinatorServer
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
    "APPLICATION_STATES",
    "CLOSED_CALL_STATES",
    "DRIVER_DOMAIN",
    "OPEN_CALL_STATES",
    "RESERVED_INTERFACE_NAMES",
    "AllocatedDevice",
    "Allocation",
    "AllocationError",
    "Allocator",
    "Application",
    "ApplicationStatus",
    "ApplyRequest",
    "ApplyResult",
    "AttributeValue",
    "Call",
    "CapacitySpec",
    "CheckedPluginClient",
    "Claim",
    "CompatibilityRule",
    "CompiledSelector",
    "CompiledStep",
    "CompiledTopology",
    "Coordinator",
    "CoordinatorCallError",
    "CoordinatorClient",
    "CoordinatorConfig",
    "CoordinatorJournal",
    "CoordinatorServer",
    "CoordinatorService",
    "CoordinatorStatus",
    "Device",
    "DeviceExposurePolicy",
    "Execution",
    "Exposure",
    "FieldProblem",
    "Inventory",
    "ManifestError",
    "NetworkTopology",
    "NodeAuthority",
    "OpenCall",
    "OutputHandle",
    "PeerMismatch",
    "PluginEndpoint",
    "PluginRef",
    "PortSource",
    "PublishedDevice",
    "RemoveResult",
    "RequestPolicy",
    "Selector",
    "SelectorError",
    "Step",
    "StepFailed",
    "StepReceipt",
    "SupportedPlugin",
    "TopologyError",
    "TopologyErrors",
    "YAMLLoadError",
    "allocate",
    "check_plugins",
    "compile_selector",
    "identity_problem",
    "load_inventory",
    "load_manifests",
    "load_policies",
    "load_topology",
    "load_yaml_documents",
    "load_yaml_file",
    "main",
    "operation_id",
    "parse_inventory",
    "parse_policy",
    "parse_topology",
    "pinned_descriptors",
    "plugin_clients",
    "publish",
    "qualify",
    "root_id",
    "run",
    "serve",
    "validate_topology",
]
