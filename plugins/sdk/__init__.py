"""The NetworkPlugin SDK: the public facade plugin authors import.

Everything here is re-exported from private modules; import from
``plugins.sdk`` only, never from its underscore modules.

Each name is imported from its module on first use (``__getattr__``), not all at once:
a program that needs a few names (the fake kernel server: the codec, the YAML loader,
the namespace handle; the coordinator) does not pay for the runner, the store and
every dataclass of the hooks at start-up. Every process start of the fake tier paid
~0.15 s of CPU for them. A service still imports what its start path uses, at start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._calls import (
        ConnectCall,
        PrepareCall,
        RemoveCall,
        SharedUnit,
        UnprepareCall,
        VFAllocation,
        check_interface_name,
    )
    from ._codec import JSONCodecError, from_json_value, to_json_value
    from ._config import ConfigValidator, SchemaProblem, decode_into, json_path, parse_config_json
    from ._contracts import DEFAULT_BUNDLE_ROOT, Bundle, BundleStore
    from ._descriptor import Descriptor, DescriptorRef, PortSpec, Preparation
    from ._documents import DocumentError, DocumentSchema, load_service_config
    from ._errors import (
        Aborted,
        AlreadyExists,
        Code,
        ConfigError,
        DataLoss,
        FailedPrecondition,
        InvalidArgument,
        NetworkPluginError,
        NotFound,
        PlanError,
        PrerequisiteError,
        RegistrationError,
        Unauthenticated,
        Unavailable,
        WrongStepKind,
    )
    from ._handler import (
        AllocationRoot,
        Handler,
        OperationOnly,
        undo_connect,
        undo_prepare,
        wrong_step_kind,
    )
    from ._linux_names import IFNAMSIZ, PCI_ADDRESS, kernel_name_problem
    from ._plan import (
        CleanupPlan,
        EffectRef,
        EffectSpec,
        OutputRef,
        Plan,
        PlanBuilder,
        PlannedEffect,
        Subplan,
        canonical_json,
        digest,
        effect,
        new_plan,
    )
    from ._registry import Endpoint, Registration, Registry
    from ._requests import (
        CleanupRequest,
        CleanupResponse,
        CleanupStatus,
        ConnectRequest,
        ConnectResponse,
        EffectState,
        EffectStatus,
        EndpointInfo,
        InspectResponse,
        OperationState,
        PrepareRequest,
        PrepareResponse,
    )
    from ._types import (
        KERNEL_INTERFACE,
        PREPARED_VF,
        SHARED_PARENT,
        AllocationBinding,
        Grant,
        Hook,
        NamespaceHandle,
        OperationEnvelope,
        PreparedState,
        Requirements,
        ResourceHandle,
        SandboxHandle,
        Sharing,
        StepKind,
    )
    from ._yaml import (
        MAX_YAML_BYTES,
        YAMLLoadError,
        load_yaml_documents,
        load_yaml_file,
        load_yaml_mapping,
    )


_EXPORTS: dict[str, tuple[str, ...]] = {
    "_calls": (
        "ConnectCall",
        "PrepareCall",
        "RemoveCall",
        "SharedUnit",
        "UnprepareCall",
        "VFAllocation",
        "check_interface_name",
    ),
    "_codec": ("JSONCodecError", "from_json_value", "to_json_value"),
    "_config": (
        "ConfigValidator",
        "SchemaProblem",
        "decode_into",
        "json_path",
        "parse_config_json",
    ),
    "_contracts": ("DEFAULT_BUNDLE_ROOT", "Bundle", "BundleStore"),
    "_descriptor": ("Descriptor", "DescriptorRef", "PortSpec", "Preparation"),
    "_documents": ("DocumentError", "DocumentSchema", "load_service_config"),
    "_errors": (
        "Aborted",
        "AlreadyExists",
        "Code",
        "ConfigError",
        "DataLoss",
        "FailedPrecondition",
        "InvalidArgument",
        "NetworkPluginError",
        "NotFound",
        "PlanError",
        "PrerequisiteError",
        "RegistrationError",
        "Unauthenticated",
        "Unavailable",
        "WrongStepKind",
    ),
    "_handler": (
        "AllocationRoot",
        "Handler",
        "OperationOnly",
        "undo_connect",
        "undo_prepare",
        "wrong_step_kind",
    ),
    "_linux_names": ("IFNAMSIZ", "PCI_ADDRESS", "kernel_name_problem"),
    "_plan": (
        "CleanupPlan",
        "EffectRef",
        "EffectSpec",
        "OutputRef",
        "Plan",
        "PlanBuilder",
        "PlannedEffect",
        "Subplan",
        "canonical_json",
        "digest",
        "effect",
        "new_plan",
    ),
    "_registry": ("Endpoint", "Registration", "Registry"),
    "_requests": (
        "CleanupRequest",
        "CleanupResponse",
        "CleanupStatus",
        "ConnectRequest",
        "ConnectResponse",
        "EffectState",
        "EffectStatus",
        "EndpointInfo",
        "InspectResponse",
        "OperationState",
        "PrepareRequest",
        "PrepareResponse",
    ),
    "_types": (
        "KERNEL_INTERFACE",
        "PREPARED_VF",
        "SHARED_PARENT",
        "AllocationBinding",
        "Grant",
        "Hook",
        "NamespaceHandle",
        "OperationEnvelope",
        "PreparedState",
        "Requirements",
        "ResourceHandle",
        "SandboxHandle",
        "Sharing",
        "StepKind",
    ),
    "_yaml": (
        "MAX_YAML_BYTES",
        "YAMLLoadError",
        "load_yaml_documents",
        "load_yaml_file",
        "load_yaml_mapping",
    ),
}
"""Each private module and the names the root re-exports from it."""

_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


# Hidden from mypy: with a module ``__getattr__`` in sight it would accept any name
# imported from the root (a typo included); the TYPE_CHECKING imports above type them.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        module = _MODULE_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        # __import__, not importlib.import_module: ``-X importtime`` reports this one.
        value = getattr(__import__(f"{__name__}.{module}", fromlist=[name]), name)
        globals()[name] = value  # the next lookup is a plain module attribute
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})


__all__ = [
    "DEFAULT_BUNDLE_ROOT",
    "IFNAMSIZ",
    "KERNEL_INTERFACE",
    "MAX_YAML_BYTES",
    "PCI_ADDRESS",
    "PREPARED_VF",
    "SHARED_PARENT",
    "Aborted",
    "AllocationBinding",
    "AllocationRoot",
    "AlreadyExists",
    "Bundle",
    "BundleStore",
    "CleanupPlan",
    "CleanupRequest",
    "CleanupResponse",
    "CleanupStatus",
    "Code",
    "ConfigError",
    "ConfigValidator",
    "ConnectCall",
    "ConnectRequest",
    "ConnectResponse",
    "DataLoss",
    "Descriptor",
    "DescriptorRef",
    "DocumentError",
    "DocumentSchema",
    "EffectRef",
    "EffectSpec",
    "EffectState",
    "EffectStatus",
    "Endpoint",
    "EndpointInfo",
    "FailedPrecondition",
    "Grant",
    "Handler",
    "Hook",
    "InspectResponse",
    "InvalidArgument",
    "JSONCodecError",
    "NamespaceHandle",
    "NetworkPluginError",
    "NotFound",
    "OperationEnvelope",
    "OperationOnly",
    "OperationState",
    "OutputRef",
    "Plan",
    "PlanBuilder",
    "PlanError",
    "PlannedEffect",
    "PortSpec",
    "Preparation",
    "PrepareCall",
    "PrepareRequest",
    "PrepareResponse",
    "PreparedState",
    "PrerequisiteError",
    "Registration",
    "RegistrationError",
    "Registry",
    "RemoveCall",
    "Requirements",
    "ResourceHandle",
    "SandboxHandle",
    "SchemaProblem",
    "SharedUnit",
    "Sharing",
    "StepKind",
    "Subplan",
    "Unauthenticated",
    "Unavailable",
    "UnprepareCall",
    "VFAllocation",
    "WrongStepKind",
    "YAMLLoadError",
    "canonical_json",
    "check_interface_name",
    "decode_into",
    "digest",
    "effect",
    "from_json_value",
    "json_path",
    "kernel_name_problem",
    "load_service_config",
    "load_yaml_documents",
    "load_yaml_file",
    "load_yaml_mapping",
    "new_plan",
    "parse_config_json",
    "to_json_value",
    "undo_connect",
    "undo_prepare",
    "wrong_step_kind",
]
