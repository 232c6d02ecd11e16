"""The one place where protobuf messages become SDK values and back.

Every function validates while it converts, in both directions, so a value that
crosses the wire is checked by the same rules whichever side built it:

* the envelope's hook must be the hook of the RPC carrying it;
* ``operation_id``, ``scope`` and ``step`` are 1..253 characters of ``[A-Za-z0-9._:-]``;
* ``generation`` is at least 1;
* enum values must be known and, where the SDK has no "unspecified", set;
* every handle's ``description_json`` is a JSON object;
* port names are non-empty and unique within a request or response;
* integers fit their wire type (``*_to_pb``).

Violations raise :class:`~plugins.sdk.InvalidArgument` whose message starts with the
wire field path (``envelope.hook``, ``allocation.sharing``,
``inputs[members][1].description_json``); the path is also in ``details["field"]``.

Absent optional messages become ``None`` (``allocation``, ``sandbox``, ``prepared``);
an absent ``requirements`` becomes ``Requirements()``. Required messages that are
absent (``envelope``, ``sandbox.network_namespace``, ``prepared_state``) are rejected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from plugins.api.networkplugin.v1alpha1 import pb
from plugins.sdk._errors import InvalidArgument
from plugins.sdk._requests import (
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
from plugins.sdk._types import (
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

__all__ = [
    "check_identifier",
    "cleanup_request_from_pb",
    "cleanup_request_to_pb",
    "cleanup_response_from_pb",
    "cleanup_response_to_pb",
    "connect_request_from_pb",
    "connect_request_to_pb",
    "connect_response_from_pb",
    "connect_response_to_pb",
    "envelope_from_pb",
    "envelope_to_pb",
    "info_from_pb",
    "info_to_pb",
    "inspect_request_from_pb",
    "inspect_request_to_pb",
    "inspect_response_from_pb",
    "inspect_response_to_pb",
    "prepare_request_from_pb",
    "prepare_request_to_pb",
    "prepare_response_from_pb",
    "prepare_response_to_pb",
    "remove_request_to_pb",
    "unprepare_request_to_pb",
]

MAX_IDENTIFIER = 253
_IDENTIFIER = re.compile(r"[A-Za-z0-9._:-]{1,253}")
_UINT32_MAX = 2**32 - 1
_UINT64_MAX = 2**64 - 1

_E = TypeVar("_E")
_V = TypeVar("_V")

# --------------------------------------------------------------------------- enums

_HOOKS: dict[Hook, pb.Hook.ValueType] = {
    Hook.NODE_PREPARE: pb.NODE_PREPARE,
    Hook.CONNECT_NETWORK: pb.CONNECT_NETWORK,
    Hook.REMOVE_NETWORK: pb.REMOVE_NETWORK,
    Hook.NODE_UNPREPARE: pb.NODE_UNPREPARE,
}
_STEP_KINDS: dict[StepKind, pb.StepKind.ValueType] = {
    StepKind.ALLOCATION: pb.ALLOCATION,
    StepKind.OPERATION: pb.OPERATION,
}
_SHARING: dict[Sharing, pb.Sharing.ValueType] = {
    Sharing.EXCLUSIVE: pb.EXCLUSIVE,
    Sharing.SHARED: pb.SHARED,
}
_CLEANUP: dict[CleanupStatus, pb.CleanupStatus.ValueType] = {
    CleanupStatus.CLEANED: pb.CLEANED,
    CleanupStatus.PENDING: pb.PENDING,
    CleanupStatus.QUARANTINED: pb.QUARANTINED,
}
_EFFECT_STATES: dict[EffectState, pb.EffectState.ValueType] = {
    EffectState.PLANNED: pb.PLANNED,
    EffectState.APPLYING: pb.APPLYING,
    EffectState.APPLIED: pb.APPLIED,
    EffectState.UNDOING: pb.UNDOING,
    EffectState.UNDONE: pb.UNDONE,
    EffectState.QUARANTINED: pb.EFFECT_QUARANTINED,
}
_OPERATION_STATES: dict[OperationState, pb.OperationState.ValueType] = {
    OperationState.RUNNING: pb.RUNNING,
    OperationState.SUCCEEDED: pb.SUCCEEDED,
    OperationState.FAILED: pb.FAILED,
    OperationState.CLEANUP_PENDING: pb.CLEANUP_PENDING,
    OperationState.CLEANED: pb.OPERATION_CLEANED,
    OperationState.QUARANTINED: pb.OPERATION_QUARANTINED,
}


def _invalid(path: str, reason: str) -> InvalidArgument:
    return InvalidArgument(f"{path}: {reason}", details={"field": path})


def _enum_from_pb(table: Mapping[_E, _V], value: int, path: str) -> _E:
    for sdk, wire in table.items():
        if wire == value:
            return sdk
    if value == 0:
        raise _invalid(path, "must be set (got the unspecified value 0)")
    raise _invalid(path, f"unknown enum value {value}")


def _enum_to_pb(table: Mapping[_E, _V], value: object, path: str) -> _V:
    try:
        return table[value]  # type: ignore[index]
    except (KeyError, TypeError):
        raise _invalid(path, f"unknown value {value!r}") from None


# --------------------------------------------------------------------------- scalars


def check_identifier(value: object, path: str) -> str:
    """Require 1..253 characters of ``[A-Za-z0-9._:-]`` (ids, scopes, step names)."""
    if not isinstance(value, str) or not value:
        raise _invalid(path, "must be a non-empty string")
    if len(value) > MAX_IDENTIFIER:
        raise _invalid(path, f"longer than {MAX_IDENTIFIER} characters")
    if _IDENTIFIER.fullmatch(value) is None:
        raise _invalid(path, "may only contain letters, digits and '.', '_', ':', '-'")
    return value


def _check_uint(value: object, maximum: int, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise _invalid(path, f"must be an integer in [0, {maximum}], got {value!r}")
    return value


def _check_str(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise _invalid(path, f"must be a string, got {type(value).__name__}")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_description(value: object, path: str) -> str:
    text = _check_str(value, path)
    try:
        parsed = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise _invalid(path, f"is not valid JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise _invalid(path, f"must be a JSON object, got {type(parsed).__name__}")
    return text


def _str_map(value: Mapping[str, str], path: str) -> dict[str, str]:
    return {_check_str(k, path): _check_str(v, f"{path}[{k}]") for k, v in value.items()}


# --------------------------------------------------------------------------- envelope


def _check_envelope(env: OperationEnvelope, hook: Hook, path: str) -> None:
    if env.hook != hook:
        raise _invalid(f"{path}.hook", f"{env.hook!s} does not match the {hook.value} RPC")
    check_identifier(env.operation_id, f"{path}.operation_id")
    check_identifier(env.scope, f"{path}.scope")
    check_identifier(env.step, f"{path}.step")
    generation = _check_uint(env.generation, _UINT64_MAX, f"{path}.generation")
    if generation < 1:
        raise _invalid(f"{path}.generation", "must be at least 1")
    _check_uint(env.coordinator_epoch, _UINT64_MAX, f"{path}.coordinator_epoch")
    _check_str(env.trace_id, f"{path}.trace_id")


def envelope_from_pb(
    msg: pb.OperationEnvelope, hook: Hook, path: str = "envelope"
) -> OperationEnvelope:
    env = OperationEnvelope(
        operation_id=msg.operation_id,
        hook=_enum_from_pb(_HOOKS, msg.hook, f"{path}.hook"),
        scope=msg.scope,
        step=msg.step,
        generation=msg.generation,
        coordinator_epoch=msg.coordinator_epoch,
        trace_id=msg.trace_id,
    )
    _check_envelope(env, hook, path)
    return env


def envelope_to_pb(
    env: OperationEnvelope, hook: Hook, path: str = "envelope"
) -> pb.OperationEnvelope:
    _check_envelope(env, hook, path)
    return pb.OperationEnvelope(
        operation_id=env.operation_id,
        hook=_HOOKS[env.hook],
        scope=env.scope,
        step=env.step,
        generation=env.generation,
        coordinator_epoch=env.coordinator_epoch,
        trace_id=env.trace_id,
    )


def _required_envelope(msg: Any, hook: Hook) -> OperationEnvelope:
    if not msg.HasField("envelope"):
        raise _invalid("envelope", "is required")
    return envelope_from_pb(msg.envelope, hook)


# --------------------------------------------------------------------------- handles


def _handle_from_pb(msg: pb.ResourceHandle, path: str) -> ResourceHandle:
    return ResourceHandle(
        id=msg.id,
        type=msg.type,
        owner_scope=msg.owner_scope,
        owner_step=msg.owner_step,
        attachment_id=msg.attachment_id,
        boot_id=msg.boot_id,
        root_provenance=msg.root_provenance,
        description_json=_check_description(msg.description_json, f"{path}.description_json"),
    )


def _handle_to_pb(handle: ResourceHandle, path: str) -> pb.ResourceHandle:
    return pb.ResourceHandle(
        id=_check_str(handle.id, f"{path}.id"),
        type=_check_str(handle.type, f"{path}.type"),
        owner_scope=_check_str(handle.owner_scope, f"{path}.owner_scope"),
        owner_step=_check_str(handle.owner_step, f"{path}.owner_step"),
        attachment_id=_check_str(handle.attachment_id, f"{path}.attachment_id"),
        boot_id=_check_str(handle.boot_id, f"{path}.boot_id"),
        root_provenance=_check_str(handle.root_provenance, f"{path}.root_provenance"),
        description_json=_check_description(handle.description_json, f"{path}.description_json"),
    )


def _handles_from_pb(msgs: Iterable[pb.ResourceHandle], path: str) -> tuple[ResourceHandle, ...]:
    return tuple(_handle_from_pb(m, f"{path}[{i}]") for i, m in enumerate(msgs))


def _handles_to_pb(handles: Iterable[ResourceHandle], path: str) -> list[pb.ResourceHandle]:
    return [_handle_to_pb(h, f"{path}[{i}]") for i, h in enumerate(handles)]


def _ports_from_pb(
    ports: Iterable[pb.InputPort | pb.OutputPort], path: str
) -> dict[str, tuple[ResourceHandle, ...]]:
    out: dict[str, tuple[ResourceHandle, ...]] = {}
    for i, port in enumerate(ports):
        if not port.port:
            raise _invalid(f"{path}[{i}].port", "port name must be non-empty")
        if port.port in out:
            raise _invalid(f"{path}[{i}].port", f"duplicate port {port.port!r}")
        out[port.port] = _handles_from_pb(port.handles, f"{path}[{port.port}]")
    return out


def _ports_to_pb(
    ports: Mapping[str, Sequence[ResourceHandle]], path: str
) -> list[tuple[str, list[pb.ResourceHandle]]]:
    out: list[tuple[str, list[pb.ResourceHandle]]] = []
    for i, (name, handles) in enumerate(ports.items()):
        if not isinstance(name, str) or not name:
            raise _invalid(f"{path}[{i}].port", "port name must be a non-empty string")
        out.append((name, _handles_to_pb(handles, f"{path}[{name}]")))
    return out


# --------------------------------------------------------------------------- nested values


def _allocation_from_pb(msg: pb.AllocationBinding, path: str) -> AllocationBinding:
    return AllocationBinding(
        root_id=msg.root_id,
        driver=msg.driver,
        pool=msg.pool,
        device=msg.device,
        device_type=msg.device_type,
        sharing=_enum_from_pb(_SHARING, msg.sharing, f"{path}.sharing"),
        attributes=dict(msg.attributes),
        capacity=dict(msg.capacity),
    )


def _allocation_to_pb(alloc: AllocationBinding, path: str) -> pb.AllocationBinding:
    return pb.AllocationBinding(
        root_id=_check_str(alloc.root_id, f"{path}.root_id"),
        driver=_check_str(alloc.driver, f"{path}.driver"),
        pool=_check_str(alloc.pool, f"{path}.pool"),
        device=_check_str(alloc.device, f"{path}.device"),
        device_type=_check_str(alloc.device_type, f"{path}.device_type"),
        sharing=_enum_to_pb(_SHARING, alloc.sharing, f"{path}.sharing"),
        attributes=_str_map(alloc.attributes, f"{path}.attributes"),
        capacity=_str_map(alloc.capacity, f"{path}.capacity"),
    )


def _prepared_from_pb(msg: pb.PreparedState, path: str) -> PreparedState:
    return PreparedState(
        root_id=msg.root_id,
        plugin=msg.plugin,
        preparation_id=msg.preparation_id,
        handles=_handles_from_pb(msg.handles, f"{path}.handles"),
    )


def _prepared_to_pb(state: PreparedState, path: str) -> pb.PreparedState:
    return pb.PreparedState(
        root_id=_check_str(state.root_id, f"{path}.root_id"),
        plugin=_check_str(state.plugin, f"{path}.plugin"),
        preparation_id=_check_str(state.preparation_id, f"{path}.preparation_id"),
        handles=_handles_to_pb(state.handles, f"{path}.handles"),
    )


def _sandbox_from_pb(msg: pb.SandboxHandle, path: str) -> SandboxHandle:
    if not msg.HasField("network_namespace"):
        raise _invalid(f"{path}.network_namespace", "is required")
    ns = msg.network_namespace
    return SandboxHandle(
        sandbox_id=msg.sandbox_id,
        namespace=NamespaceHandle(
            path=ns.path, device=ns.device, inode=ns.inode, boot_id=ns.boot_id
        ),
    )


def _sandbox_to_pb(sandbox: SandboxHandle, path: str) -> pb.SandboxHandle:
    ns = sandbox.namespace
    ns_path = f"{path}.network_namespace"
    return pb.SandboxHandle(
        sandbox_id=_check_str(sandbox.sandbox_id, f"{path}.sandbox_id"),
        network_namespace=pb.NamespaceHandle(
            path=_check_str(ns.path, f"{ns_path}.path"),
            device=_check_uint(ns.device, _UINT64_MAX, f"{ns_path}.device"),
            inode=_check_uint(ns.inode, _UINT64_MAX, f"{ns_path}.inode"),
            boot_id=_check_str(ns.boot_id, f"{ns_path}.boot_id"),
        ),
    )


def _effects_from_pb(msgs: Iterable[pb.EffectStatus], path: str) -> tuple[EffectStatus, ...]:
    return tuple(
        EffectStatus(
            effect_id=m.effect_id,
            kind=m.kind,
            state=_enum_from_pb(_EFFECT_STATES, m.state, f"{path}[{i}].state"),
            detail=m.detail,
        )
        for i, m in enumerate(msgs)
    )


def _effects_to_pb(effects: Iterable[EffectStatus], path: str) -> list[pb.EffectStatus]:
    return [
        pb.EffectStatus(
            effect_id=_check_str(e.effect_id, f"{path}[{i}].effect_id"),
            kind=_check_str(e.kind, f"{path}[{i}].kind"),
            state=_enum_to_pb(_EFFECT_STATES, e.state, f"{path}[{i}].state"),
            detail=_check_str(e.detail, f"{path}[{i}].detail"),
        )
        for i, e in enumerate(effects)
    ]


def _target_operation_id(value: str) -> str:
    if value:
        check_identifier(value, "target_operation_id")
    return value


# --------------------------------------------------------------------------- requests


def prepare_request_from_pb(msg: pb.NodePrepareRequest) -> PrepareRequest:
    envelope = _required_envelope(msg, Hook.NODE_PREPARE)
    allocation = (
        _allocation_from_pb(msg.allocation, "allocation") if msg.HasField("allocation") else None
    )
    requirements = Requirements()
    if msg.HasField("requirements") and msg.requirements.HasField("mtu"):
        requirements = Requirements(mtu=msg.requirements.mtu)
    return PrepareRequest(
        envelope=envelope,
        allocation=allocation,
        config_json=msg.config_json,
        requirements=requirements,
    )


def prepare_request_to_pb(req: PrepareRequest) -> pb.NodePrepareRequest:
    msg = pb.NodePrepareRequest(
        envelope=envelope_to_pb(req.envelope, Hook.NODE_PREPARE),
        config_json=_check_str(req.config_json, "config_json"),
    )
    if req.allocation is not None:
        msg.allocation.CopyFrom(_allocation_to_pb(req.allocation, "allocation"))
    if req.requirements.mtu is not None:
        msg.requirements.mtu = _check_uint(req.requirements.mtu, _UINT32_MAX, "requirements.mtu")
    return msg


def connect_request_from_pb(msg: pb.ConnectNetworkRequest) -> ConnectRequest:
    envelope = _required_envelope(msg, Hook.CONNECT_NETWORK)
    return ConnectRequest(
        envelope=envelope,
        sandbox=_sandbox_from_pb(msg.sandbox, "sandbox") if msg.HasField("sandbox") else None,
        config_json=msg.config_json,
        inputs=_ports_from_pb(msg.inputs, "inputs"),
        interface_names=dict(msg.interface_names),
        prepared=_prepared_from_pb(msg.prepared, "prepared") if msg.HasField("prepared") else None,
        allocation=(
            _allocation_from_pb(msg.allocation, "allocation")
            if msg.HasField("allocation")
            else None
        ),
        grants=tuple(Grant(effect=g.effect, resource_id=g.resource_id) for g in msg.grants),
    )


def connect_request_to_pb(req: ConnectRequest) -> pb.ConnectNetworkRequest:
    msg = pb.ConnectNetworkRequest(
        envelope=envelope_to_pb(req.envelope, Hook.CONNECT_NETWORK),
        config_json=_check_str(req.config_json, "config_json"),
        inputs=[pb.InputPort(port=n, handles=h) for n, h in _ports_to_pb(req.inputs, "inputs")],
        interface_names=_str_map(req.interface_names, "interface_names"),
        grants=[
            pb.Grant(
                effect=_check_str(g.effect, f"grants[{i}].effect"),
                resource_id=_check_str(g.resource_id, f"grants[{i}].resource_id"),
            )
            for i, g in enumerate(req.grants)
        ],
    )
    if req.sandbox is not None:
        msg.sandbox.CopyFrom(_sandbox_to_pb(req.sandbox, "sandbox"))
    if req.prepared is not None:
        msg.prepared.CopyFrom(_prepared_to_pb(req.prepared, "prepared"))
    if req.allocation is not None:
        msg.allocation.CopyFrom(_allocation_to_pb(req.allocation, "allocation"))
    return msg


def cleanup_request_from_pb(
    msg: pb.RemoveNetworkRequest | pb.NodeUnprepareRequest,
) -> CleanupRequest:
    """RemoveNetwork or NodeUnprepare; the message type decides the expected hook."""
    hook = Hook.REMOVE_NETWORK if isinstance(msg, pb.RemoveNetworkRequest) else Hook.NODE_UNPREPARE
    envelope = _required_envelope(msg, hook)
    return CleanupRequest(
        envelope=envelope, target_operation_id=_target_operation_id(msg.target_operation_id)
    )


def remove_request_to_pb(req: CleanupRequest) -> pb.RemoveNetworkRequest:
    return pb.RemoveNetworkRequest(
        envelope=envelope_to_pb(req.envelope, Hook.REMOVE_NETWORK),
        target_operation_id=_target_operation_id(req.target_operation_id),
    )


def unprepare_request_to_pb(req: CleanupRequest) -> pb.NodeUnprepareRequest:
    return pb.NodeUnprepareRequest(
        envelope=envelope_to_pb(req.envelope, Hook.NODE_UNPREPARE),
        target_operation_id=_target_operation_id(req.target_operation_id),
    )


def cleanup_request_to_pb(
    req: CleanupRequest,
) -> pb.RemoveNetworkRequest | pb.NodeUnprepareRequest:
    """Pick the message by the envelope's hook (RemoveNetwork or NodeUnprepare)."""
    if req.envelope.hook == Hook.REMOVE_NETWORK:
        return remove_request_to_pb(req)
    if req.envelope.hook == Hook.NODE_UNPREPARE:
        return unprepare_request_to_pb(req)
    raise _invalid("envelope.hook", f"{req.envelope.hook!s} is not a cleanup hook")


def _inspect_ids(operation_id: str, scope: str) -> tuple[str, str]:
    """An operation id, a scope (its latest operation), or both; never neither."""
    if not operation_id and not scope:
        raise _invalid("operation_id", "give an operation_id, a scope, or both")
    return (
        check_identifier(operation_id, "operation_id") if operation_id else "",
        check_identifier(scope, "scope") if scope else "",
    )


def inspect_request_from_pb(msg: pb.InspectOperationRequest) -> tuple[str, str]:
    """Return ``(operation_id, scope)``; either may be empty, not both."""
    return _inspect_ids(msg.operation_id, msg.scope)


def inspect_request_to_pb(operation_id: str, scope: str) -> pb.InspectOperationRequest:
    op, sc = _inspect_ids(operation_id, scope)
    return pb.InspectOperationRequest(operation_id=op, scope=sc)


# --------------------------------------------------------------------------- responses


def prepare_response_to_pb(resp: PrepareResponse) -> pb.NodePrepareResponse:
    return pb.NodePrepareResponse(
        prepared_state=_prepared_to_pb(resp.prepared_state, "prepared_state"),
        cdi_device_ids=[
            _check_str(c, f"cdi_device_ids[{i}]") for i, c in enumerate(resp.cdi_device_ids)
        ],
    )


def prepare_response_from_pb(msg: pb.NodePrepareResponse) -> PrepareResponse:
    if not msg.HasField("prepared_state"):
        raise _invalid("prepared_state", "is required")
    return PrepareResponse(
        prepared_state=_prepared_from_pb(msg.prepared_state, "prepared_state"),
        cdi_device_ids=tuple(msg.cdi_device_ids),
    )


def connect_response_to_pb(resp: ConnectResponse) -> pb.ConnectNetworkResponse:
    return pb.ConnectNetworkResponse(
        outputs=[pb.OutputPort(port=n, handles=h) for n, h in _ports_to_pb(resp.outputs, "outputs")]
    )


def connect_response_from_pb(msg: pb.ConnectNetworkResponse) -> ConnectResponse:
    return ConnectResponse(outputs=_ports_from_pb(msg.outputs, "outputs"))


def cleanup_response_to_pb(resp: CleanupResponse) -> pb.CleanupResponse:
    return pb.CleanupResponse(
        status=_enum_to_pb(_CLEANUP, resp.status, "status"),
        detail=_check_str(resp.detail, "detail"),
        effects=_effects_to_pb(resp.effects, "effects"),
    )


def cleanup_response_from_pb(msg: pb.CleanupResponse) -> CleanupResponse:
    return CleanupResponse(
        status=_enum_from_pb(_CLEANUP, msg.status, "status"),
        detail=msg.detail,
        effects=_effects_from_pb(msg.effects, "effects"),
    )


def inspect_response_to_pb(resp: InspectResponse) -> pb.InspectOperationResponse:
    return pb.InspectOperationResponse(
        found=bool(resp.found),
        operation_id=_check_str(resp.operation_id, "operation_id"),
        hook=_enum_to_pb(_HOOKS, resp.hook, "hook") if resp.hook else pb.HOOK_UNSPECIFIED,
        scope=_check_str(resp.scope, "scope"),
        state=(
            _enum_to_pb(_OPERATION_STATES, resp.state, "state")
            if resp.state is not None
            else pb.OPERATION_STATE_UNSPECIFIED
        ),
        cleanup=(
            _enum_to_pb(_CLEANUP, resp.cleanup, "cleanup")
            if resp.cleanup is not None
            else pb.CLEANUP_STATUS_UNSPECIFIED
        ),
        fenced=bool(resp.fenced),
        generation=_check_uint(resp.generation, _UINT64_MAX, "generation"),
        effects=_effects_to_pb(resp.effects, "effects"),
        semantic_digest=_check_str(resp.semantic_digest, "semantic_digest"),
    )


def inspect_response_from_pb(msg: pb.InspectOperationResponse) -> InspectResponse:
    """Unspecified ``hook`` becomes ``""``; unspecified ``state``/``cleanup`` become None."""
    hook = "" if msg.hook == pb.HOOK_UNSPECIFIED else _enum_from_pb(_HOOKS, msg.hook, "hook").value
    state = (
        None
        if msg.state == pb.OPERATION_STATE_UNSPECIFIED
        else _enum_from_pb(_OPERATION_STATES, msg.state, "state")
    )
    cleanup = (
        None
        if msg.cleanup == pb.CLEANUP_STATUS_UNSPECIFIED
        else _enum_from_pb(_CLEANUP, msg.cleanup, "cleanup")
    )
    return InspectResponse(
        found=msg.found,
        operation_id=msg.operation_id,
        hook=hook,
        scope=msg.scope,
        state=state,
        cleanup=cleanup,
        fenced=msg.fenced,
        generation=msg.generation,
        effects=_effects_from_pb(msg.effects, "effects"),
        semantic_digest=msg.semantic_digest,
    )


def info_to_pb(info: EndpointInfo) -> pb.GetInfoResponse:
    return pb.GetInfoResponse(
        plugin_name=_check_str(info.plugin_name, "plugin_name"),
        contract_version=_check_str(info.contract_version, "contract_version"),
        step_kinds=[
            _enum_to_pb(_STEP_KINDS, k, f"step_kinds[{i}]") for i, k in enumerate(info.step_kinds)
        ],
        contract_digest=_check_str(info.contract_digest, "contract_digest"),
        artifact_digest=_check_str(info.artifact_digest, "artifact_digest"),
        state_namespace=_check_str(info.state_namespace, "state_namespace"),
        ready=bool(info.ready),
        descriptor_json=_check_str(info.descriptor_json, "descriptor_json"),
        store_format=_check_uint(info.store_format, _UINT32_MAX, "store_format"),
        readable_store_formats=_uints(info.readable_store_formats, "readable_store_formats"),
        effect_format=_check_uint(info.effect_format, _UINT32_MAX, "effect_format"),
        executable_effect_formats=_uints(
            info.executable_effect_formats, "executable_effect_formats"
        ),
        journal_effect_formats=_uints(info.journal_effect_formats, "journal_effect_formats"),
        topology_config_version=_check_str(info.topology_config_version, "topology_config_version"),
    )


def _uints(values: tuple[int, ...], path: str) -> list[int]:
    return [_check_uint(v, _UINT32_MAX, f"{path}[{i}]") for i, v in enumerate(values)]


def info_from_pb(msg: pb.GetInfoResponse) -> EndpointInfo:
    return EndpointInfo(
        plugin_name=msg.plugin_name,
        contract_version=msg.contract_version,
        step_kinds=tuple(
            _enum_from_pb(_STEP_KINDS, k, f"step_kinds[{i}]") for i, k in enumerate(msg.step_kinds)
        ),
        contract_digest=msg.contract_digest,
        artifact_digest=msg.artifact_digest,
        state_namespace=msg.state_namespace,
        ready=msg.ready,
        descriptor_json=msg.descriptor_json,
        store_format=msg.store_format,
        readable_store_formats=tuple(msg.readable_store_formats),
        effect_format=msg.effect_format,
        executable_effect_formats=tuple(msg.executable_effect_formats),
        journal_effect_formats=tuple(msg.journal_effect_formats),
        topology_config_version=msg.topology_config_version,
    )
