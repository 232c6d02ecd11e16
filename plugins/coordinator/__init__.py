"""The node coordinator: topology, exposure-policy and inventory manifests, validation, CEL
allocation, and its journal (the call states are public: the rig checks that none is left open);
and the coordinator as a program (``networkplugin-coordinator``: ``run``, ``serve``), with its
config (``CoordinatorConfig``), its requests (``CoordinatorService``) and its client
(``CoordinatorClient``), which checks who answers on each plugin socket
(``CheckedPluginClient``)."""

from typing import TYPE_CHECKING

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
from ._kube_config import KubernetesConfig
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
from ._pod_values import (
    ClaimDevice,
    ClaimProblem,
    ClaimSource,
    ClaimSourceUnavailable,
    DeviceNetwork,
    GateRefused,
    KubeClaim,
    NamespaceResolver,
    PodSandboxInfo,
    StatusSink,
    attachment_for,
)
from ._pods import CLAIM_KIND, SANDBOX_KIND, PodCounters, PodNetworks, claim_unit, sandbox_unit
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

if TYPE_CHECKING:
    from ._kube_node import KubernetesNode


def __getattr__(name: str) -> object:
    # The Kubernetes clients load only for a node that serves Kubernetes.
    if name == "KubernetesNode":
        from ._kube_node import KubernetesNode

        return KubernetesNode
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "API_VERSION",
    "APPLICATION_STATES",
    "CLAIM_KIND",
    "CLOSED_CALL_STATES",
    "DRIVER_DOMAIN",
    "OPEN_CALL_STATES",
    "RESERVED_INTERFACE_NAMES",
    "SANDBOX_KIND",
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
    "ClaimDevice",
    "ClaimProblem",
    "ClaimSource",
    "ClaimSourceUnavailable",
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
    "DeviceNetwork",
    "Execution",
    "Exposure",
    "FieldProblem",
    "GateRefused",
    "Inventory",
    "KubeClaim",
    "KubernetesConfig",
    "KubernetesNode",
    "ManifestError",
    "NamespaceResolver",
    "NetworkTopology",
    "NodeAuthority",
    "OpenCall",
    "OutputHandle",
    "PeerMismatch",
    "PluginEndpoint",
    "PluginRef",
    "PodCounters",
    "PodNetworks",
    "PodSandboxInfo",
    "PortSource",
    "PublishedDevice",
    "RemoveResult",
    "RequestPolicy",
    "Selector",
    "SelectorError",
    "StatusSink",
    "Step",
    "StepFailed",
    "StepReceipt",
    "SupportedPlugin",
    "TopologyError",
    "TopologyErrors",
    "YAMLLoadError",
    "allocate",
    "attachment_for",
    "check_plugins",
    "claim_unit",
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
    "sandbox_unit",
    "serve",
    "validate_topology",
]
