"""Protobuf <-> SDK conversion: lossless round trips and every rejection, by field path."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plugins.api.networkplugin.v1alpha1 import pb
from plugins.sdk import (
    AllocationBinding,
    CleanupRequest,
    CleanupResponse,
    CleanupStatus,
    ConnectRequest,
    ConnectResponse,
    EffectState,
    EffectStatus,
    EndpointInfo,
    Grant,
    Hook,
    InspectResponse,
    InvalidArgument,
    NamespaceHandle,
    OperationEnvelope,
    OperationState,
    PreparedState,
    PrepareRequest,
    PrepareResponse,
    Requirements,
    ResourceHandle,
    SandboxHandle,
    Sharing,
    StepKind,
)
from plugins.sdk.host import (
    cleanup_request_from_pb,
    cleanup_request_to_pb,
    cleanup_response_from_pb,
    cleanup_response_to_pb,
    connect_request_from_pb,
    connect_request_to_pb,
    connect_response_from_pb,
    connect_response_to_pb,
    info_from_pb,
    info_to_pb,
    inspect_request_from_pb,
    inspect_request_to_pb,
    inspect_response_from_pb,
    inspect_response_to_pb,
    prepare_request_from_pb,
    prepare_request_to_pb,
    prepare_response_from_pb,
    prepare_response_to_pb,
    remove_request_to_pb,
    unprepare_request_to_pb,
)
from tests.strategies import JSONTrees, dicts_of, lists_of

UINT32 = 2**32 - 1
UINT64 = 2**64 - 1
ID_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-"

# ----------------------------------------------------------------------------- strategies

texts = st.text(max_size=16)
ids = st.one_of(
    st.text(alphabet=ID_ALPHABET, min_size=1, max_size=24),
    st.text(alphabet=ID_ALPHABET, min_size=240, max_size=253),
)
str_maps = dicts_of(texts, texts, max_size=3)
# None, a boolean, an int, a finite float or a text, one time in five each, in nested lists
# (as st.recursive(st.one_of(...), lambda c: st.lists(c, max_size=3), max_leaves=5) made
# them, with fewer draws: see tests.strategies.JSONTrees).
json_leaves = [
    None,
    None,
    False,
    True,
    *[st.integers(), st.floats(allow_nan=False, allow_infinity=False), texts] * 2,
]
descriptions = dicts_of(
    texts, JSONTrees(json_leaves, max_leaves=5, max_items=3, objects=False).values, max_size=3
).map(json.dumps)


def envelopes(hook: Hook) -> st.SearchStrategy[OperationEnvelope]:
    return st.builds(
        OperationEnvelope,
        operation_id=ids,
        hook=st.just(hook),
        scope=ids,
        step=ids,
        generation=st.integers(1, UINT64),
        coordinator_epoch=st.integers(0, UINT64),
        trace_id=texts,
    )


handles = st.builds(
    ResourceHandle,
    id=texts,
    type=texts,
    owner_scope=texts,
    owner_step=texts,
    attachment_id=texts,
    boot_id=texts,
    root_provenance=texts,
    description_json=descriptions,
)
handle_tuples = lists_of(handles, max_size=3).map(tuple)
ports = dicts_of(st.text(min_size=1, max_size=10), handle_tuples, max_size=3)
allocations = st.builds(
    AllocationBinding,
    root_id=texts,
    driver=texts,
    pool=texts,
    device=texts,
    device_type=texts,
    sharing=st.sampled_from(Sharing),
    attributes=str_maps,
    capacity=str_maps,
)
prepared_states = st.builds(
    PreparedState, root_id=texts, plugin=texts, preparation_id=texts, handles=handle_tuples
)
sandboxes = st.builds(
    SandboxHandle,
    sandbox_id=texts,
    namespace=st.builds(
        NamespaceHandle,
        path=texts,
        device=st.integers(0, UINT64),
        inode=st.integers(0, UINT64),
        boot_id=texts,
    ),
)
prepare_requests = st.builds(
    PrepareRequest,
    envelope=envelopes(Hook.NODE_PREPARE),
    allocation=st.none() | allocations,
    config_json=texts,
    requirements=st.builds(Requirements, mtu=st.none() | st.integers(0, UINT32)),
)
connect_requests = st.builds(
    ConnectRequest,
    envelope=envelopes(Hook.CONNECT_NETWORK),
    sandbox=st.none() | sandboxes,
    config_json=texts,
    inputs=ports,
    interface_names=str_maps,
    prepared=st.none() | prepared_states,
    allocation=st.none() | allocations,
    grants=lists_of(st.builds(Grant, effect=texts, resource_id=texts), max_size=3).map(tuple),
)


def cleanup_requests(hook: Hook) -> st.SearchStrategy[CleanupRequest]:
    return st.builds(
        CleanupRequest, envelope=envelopes(hook), target_operation_id=st.just("") | ids
    )


effects = lists_of(
    st.builds(
        EffectStatus,
        effect_id=texts,
        kind=texts,
        state=st.sampled_from(EffectState),
        detail=texts,
    ),
    max_size=3,
).map(tuple)
prepare_responses = st.builds(
    PrepareResponse,
    prepared_state=prepared_states,
    cdi_device_ids=lists_of(texts, max_size=3).map(tuple),
)
connect_responses = st.builds(ConnectResponse, outputs=ports)
cleanup_responses = st.builds(
    CleanupResponse, status=st.sampled_from(CleanupStatus), detail=texts, effects=effects
)
inspect_responses = st.builds(
    InspectResponse,
    found=st.booleans(),
    operation_id=texts,
    hook=st.just("") | st.sampled_from([h.value for h in Hook]),
    scope=texts,
    state=st.none() | st.sampled_from(OperationState),
    cleanup=st.none() | st.sampled_from(CleanupStatus),
    fenced=st.booleans(),
    generation=st.integers(0, UINT64),
    effects=effects,
    semantic_digest=texts,
)
infos = st.builds(
    EndpointInfo,
    plugin_name=texts,
    contract_version=texts,
    step_kinds=lists_of(st.sampled_from(StepKind), max_size=2).map(tuple),
    contract_digest=texts,
    artifact_digest=texts,
    state_namespace=texts,
    ready=st.booleans(),
    descriptor_json=texts,
    store_format=st.integers(0, 2**32 - 1),
    readable_store_formats=lists_of(st.integers(0, 2**32 - 1), max_size=3).map(tuple),
    effect_format=st.integers(0, 2**32 - 1),
    executable_effect_formats=lists_of(st.integers(0, 2**32 - 1), max_size=3).map(tuple),
    journal_effect_formats=lists_of(st.integers(0, 2**32 - 1), max_size=3).map(tuple),
    topology_config_version=texts,
)


def _via_bytes(msg: Any) -> Any:
    """Serialize and parse, so the round trip also crosses the real wire encoding."""
    return type(msg).FromString(msg.SerializeToString())


# ----------------------------------------------------------------------------- round trips


@settings(max_examples=200)
@given(prepare_requests)
def test_prepare_request_round_trip(req: PrepareRequest) -> None:
    assert prepare_request_from_pb(_via_bytes(prepare_request_to_pb(req))) == req


@settings(max_examples=200)
@given(connect_requests)
def test_connect_request_round_trip(req: ConnectRequest) -> None:
    assert connect_request_from_pb(_via_bytes(connect_request_to_pb(req))) == req


@settings(max_examples=200)
@given(cleanup_requests(Hook.REMOVE_NETWORK) | cleanup_requests(Hook.NODE_UNPREPARE))
def test_cleanup_request_round_trip(req: CleanupRequest) -> None:
    msg = cleanup_request_to_pb(req)
    expected = (
        pb.RemoveNetworkRequest
        if req.envelope.hook == Hook.REMOVE_NETWORK
        else pb.NodeUnprepareRequest
    )
    assert isinstance(msg, expected)
    assert cleanup_request_from_pb(_via_bytes(msg)) == req


@settings(max_examples=100)
@given(ids, ids)
def test_inspect_request_round_trip(operation_id: str, scope: str) -> None:
    msg = _via_bytes(inspect_request_to_pb(operation_id, scope))
    assert inspect_request_from_pb(msg) == (operation_id, scope)


@settings(max_examples=200)
@given(prepare_responses)
def test_prepare_response_round_trip(resp: PrepareResponse) -> None:
    assert prepare_response_from_pb(_via_bytes(prepare_response_to_pb(resp))) == resp


@settings(max_examples=200)
@given(connect_responses)
def test_connect_response_round_trip(resp: ConnectResponse) -> None:
    assert connect_response_from_pb(_via_bytes(connect_response_to_pb(resp))) == resp


@settings(max_examples=200)
@given(cleanup_responses)
def test_cleanup_response_round_trip(resp: CleanupResponse) -> None:
    assert cleanup_response_from_pb(_via_bytes(cleanup_response_to_pb(resp))) == resp


@settings(max_examples=200)
@given(inspect_responses)
def test_inspect_response_round_trip(resp: InspectResponse) -> None:
    assert inspect_response_from_pb(_via_bytes(inspect_response_to_pb(resp))) == resp


@settings(max_examples=200)
@given(infos)
def test_info_round_trip(info: EndpointInfo) -> None:
    assert info_from_pb(_via_bytes(info_to_pb(info))) == info


# ----------------------------------------------------------------------------- fixtures

ENV = OperationEnvelope("op-1", Hook.NODE_PREPARE, "prep-1", "vf0", 1, 1)
HANDLE = ResourceHandle("h1", "KernelInterface/v1", "att-1", "vf0", "att-1", "boot", "vf0", "{}")


def env_pb(hook: pb.Hook.ValueType = pb.NODE_PREPARE, **over: Any) -> pb.OperationEnvelope:
    fields: dict[str, Any] = {
        "operation_id": "op-1",
        "hook": hook,
        "scope": "scope-1",
        "step": "vf0",
        "generation": 1,
        "coordinator_epoch": 1,
    }
    fields.update(over)
    return pb.OperationEnvelope(**fields)


def handle_pb(description: str = "{}") -> pb.ResourceHandle:
    return pb.ResourceHandle(id="h", type="KernelInterface/v1", description_json=description)


def rejects(path: str, fn: Callable[[], object]) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        fn()
    assert str(info.value).startswith(f"{path}: "), str(info.value)
    assert info.value.details["field"] == path
    return info.value


# ----------------------------------------------------------------------------- absent -> None


def test_absent_optional_messages_become_none() -> None:
    req = connect_request_from_pb(pb.ConnectNetworkRequest(envelope=env_pb(pb.CONNECT_NETWORK)))
    assert req.sandbox is None
    assert req.prepared is None
    assert req.allocation is None
    assert dict(req.inputs) == {}
    prep = prepare_request_from_pb(pb.NodePrepareRequest(envelope=env_pb()))
    assert prep.allocation is None
    assert prep.requirements == Requirements()


def test_requirements_without_mtu_is_empty_and_zero_mtu_is_kept() -> None:
    empty = pb.NodePrepareRequest(envelope=env_pb(), requirements=pb.Requirements())
    assert prepare_request_from_pb(empty).requirements == Requirements()
    zero = pb.NodePrepareRequest(envelope=env_pb(), requirements=pb.Requirements(mtu=0))
    assert prepare_request_from_pb(zero).requirements == Requirements(mtu=0)


def test_unspecified_inspect_fields_become_empty() -> None:
    resp = inspect_response_from_pb(pb.InspectOperationResponse(found=False))
    assert resp == InspectResponse(found=False)


# ----------------------------------------------------------------------------- envelope

_DECODERS: list[tuple[str, Callable[[pb.OperationEnvelope], object], pb.Hook.ValueType]] = [
    (
        "NodePrepare",
        lambda e: prepare_request_from_pb(pb.NodePrepareRequest(envelope=e)),
        pb.NODE_PREPARE,
    ),
    (
        "ConnectNetwork",
        lambda e: connect_request_from_pb(pb.ConnectNetworkRequest(envelope=e)),
        pb.CONNECT_NETWORK,
    ),
    (
        "RemoveNetwork",
        lambda e: cleanup_request_from_pb(pb.RemoveNetworkRequest(envelope=e)),
        pb.REMOVE_NETWORK,
    ),
    (
        "NodeUnprepare",
        lambda e: cleanup_request_from_pb(pb.NodeUnprepareRequest(envelope=e)),
        pb.NODE_UNPREPARE,
    ),
]
_ALL_HOOKS = [pb.NODE_PREPARE, pb.CONNECT_NETWORK, pb.REMOVE_NETWORK, pb.NODE_UNPREPARE]


@pytest.mark.parametrize(("rpc", "decode", "own"), _DECODERS, ids=[d[0] for d in _DECODERS])
def test_hook_must_match_the_rpc(
    rpc: str, decode: Callable[[pb.OperationEnvelope], object], own: pb.Hook.ValueType
) -> None:
    decode(env_pb(own))  # its own hook is accepted
    for other in _ALL_HOOKS:
        if other != own:
            exc = rejects("envelope.hook", lambda o=other: decode(env_pb(o)))
            assert rpc in str(exc)
    rejects("envelope.hook", lambda: decode(env_pb(pb.HOOK_UNSPECIFIED)))
    rejects("envelope.hook", lambda: decode(env_pb(pb.Hook.ValueType(42))))


@pytest.mark.parametrize(
    "make",
    [
        lambda: prepare_request_from_pb(pb.NodePrepareRequest()),
        lambda: connect_request_from_pb(pb.ConnectNetworkRequest()),
        lambda: cleanup_request_from_pb(pb.RemoveNetworkRequest()),
        lambda: cleanup_request_from_pb(pb.NodeUnprepareRequest()),
    ],
)
def test_envelope_is_required(make: Callable[[], object]) -> None:
    rejects("envelope", make)


@pytest.mark.parametrize("field", ["operation_id", "scope", "step"])
@pytest.mark.parametrize(
    "value", ["", "a" * 254, "has space", "a/b", "../x", "caf\u00e9", "x\ny", "semi;colon"]
)
def test_identifiers_are_checked(field: str, value: str) -> None:
    rejects(
        f"envelope.{field}",
        lambda: prepare_request_from_pb(pb.NodePrepareRequest(envelope=env_pb(**{field: value}))),
    )


@pytest.mark.parametrize("value", ["a", "a" * 253, "op-1.2_x:Y", "0"])
def test_identifier_edges_are_accepted(value: str) -> None:
    env = env_pb(operation_id=value, scope=value, step=value)
    assert prepare_request_from_pb(pb.NodePrepareRequest(envelope=env)).envelope.scope == value


def test_generation_must_be_at_least_one() -> None:
    rejects(
        "envelope.generation",
        lambda: prepare_request_from_pb(pb.NodePrepareRequest(envelope=env_pb(generation=0))),
    )


def test_envelope_fields_survive() -> None:
    msg = pb.NodePrepareRequest(envelope=env_pb(generation=7, coordinator_epoch=0, trace_id="t"))
    assert prepare_request_from_pb(msg).envelope == OperationEnvelope(
        "op-1", Hook.NODE_PREPARE, "scope-1", "vf0", 7, 0, "t"
    )


# ----------------------------------------------------------------------------- enums


@pytest.mark.parametrize("value", [0, 3, 99])
def test_sharing_must_be_known(value: int) -> None:
    alloc = pb.AllocationBinding(root_id="r", sharing=pb.Sharing.ValueType(value))
    rejects(
        "allocation.sharing",
        lambda: prepare_request_from_pb(pb.NodePrepareRequest(envelope=env_pb(), allocation=alloc)),
    )
    rejects(
        "allocation.sharing",
        lambda: connect_request_from_pb(
            pb.ConnectNetworkRequest(envelope=env_pb(pb.CONNECT_NETWORK), allocation=alloc)
        ),
    )


@pytest.mark.parametrize("value", [0, 8, 1000])
def test_effect_state_must_be_known(value: int) -> None:
    msg = pb.CleanupResponse(
        status=pb.CLEANED,
        effects=[
            pb.EffectStatus(effect_id="a", state=pb.APPLIED),
            pb.EffectStatus(effect_id="b", state=pb.EffectState.ValueType(value)),
        ],
    )
    rejects("effects[1].state", lambda: cleanup_response_from_pb(msg))


@pytest.mark.parametrize("value", [0, 4, 77])
def test_cleanup_status_must_be_known(value: int) -> None:
    msg = pb.CleanupResponse(status=pb.CleanupStatus.ValueType(value))
    rejects("status", lambda: cleanup_response_from_pb(msg))


def test_inspect_enums_must_be_known_when_set() -> None:
    rejects(
        "state",
        lambda: inspect_response_from_pb(
            pb.InspectOperationResponse(state=pb.OperationState.ValueType(99))
        ),
    )
    rejects(
        "cleanup",
        lambda: inspect_response_from_pb(
            pb.InspectOperationResponse(cleanup=pb.CleanupStatus.ValueType(9))
        ),
    )
    rejects(
        "hook",
        lambda: inspect_response_from_pb(pb.InspectOperationResponse(hook=pb.Hook.ValueType(9))),
    )


def test_step_kinds_must_be_known() -> None:
    msg = pb.GetInfoResponse(step_kinds=[pb.ALLOCATION, pb.STEP_KIND_UNSPECIFIED])
    rejects("step_kinds[1]", lambda: info_from_pb(msg))


# ----------------------------------------------------------------------------- handles and ports


@pytest.mark.parametrize("bad", ["", "[]", "[1]", '"x"', "1", "null", "not json", "{", "NaN"])
def test_input_description_must_be_a_json_object(bad: str) -> None:
    msg = pb.ConnectNetworkRequest(
        envelope=env_pb(pb.CONNECT_NETWORK),
        inputs=[pb.InputPort(port="members", handles=[handle_pb(), handle_pb(bad)])],
    )
    rejects("inputs[members][1].description_json", lambda: connect_request_from_pb(msg))


def test_prepared_and_output_descriptions_are_checked() -> None:
    connect = pb.ConnectNetworkRequest(
        envelope=env_pb(pb.CONNECT_NETWORK),
        prepared=pb.PreparedState(root_id="r", handles=[handle_pb("[]")]),
    )
    rejects("prepared.handles[0].description_json", lambda: connect_request_from_pb(connect))
    prep = pb.NodePrepareResponse(prepared_state=pb.PreparedState(handles=[handle_pb("3")]))
    rejects("prepared_state.handles[0].description_json", lambda: prepare_response_from_pb(prep))
    out = pb.ConnectNetworkResponse(outputs=[pb.OutputPort(port="bond", handles=[handle_pb("")])])
    rejects("outputs[bond][0].description_json", lambda: connect_response_from_pb(out))


def test_port_names_are_non_empty_and_unique() -> None:
    dup = pb.ConnectNetworkRequest(
        envelope=env_pb(pb.CONNECT_NETWORK),
        inputs=[pb.InputPort(port="members"), pb.InputPort(port="members")],
    )
    rejects("inputs[1].port", lambda: connect_request_from_pb(dup))
    empty = pb.ConnectNetworkRequest(
        envelope=env_pb(pb.CONNECT_NETWORK), inputs=[pb.InputPort(port="")]
    )
    rejects("inputs[0].port", lambda: connect_request_from_pb(empty))
    out = pb.ConnectNetworkResponse(outputs=[pb.OutputPort(port="a"), pb.OutputPort(port="a")])
    rejects("outputs[1].port", lambda: connect_response_from_pb(out))


def test_sandbox_requires_its_namespace() -> None:
    msg = pb.ConnectNetworkRequest(
        envelope=env_pb(pb.CONNECT_NETWORK), sandbox=pb.SandboxHandle(sandbox_id="pod")
    )
    rejects("sandbox.network_namespace", lambda: connect_request_from_pb(msg))


def test_prepare_response_requires_prepared_state() -> None:
    rejects("prepared_state", lambda: prepare_response_from_pb(pb.NodePrepareResponse()))


@pytest.mark.parametrize("bad", ["has space", "a" * 254, "x/y"])
def test_target_operation_id_is_checked_when_present(bad: str) -> None:
    rejects(
        "target_operation_id",
        lambda: cleanup_request_from_pb(
            pb.RemoveNetworkRequest(envelope=env_pb(pb.REMOVE_NETWORK), target_operation_id=bad)
        ),
    )


@pytest.mark.parametrize(("field", "other"), [("operation_id", "scope"), ("scope", "operation_id")])
def test_inspect_request_ids_are_checked(field: str, other: str) -> None:
    for bad in ("a b", "a" * 254):
        msg = pb.InspectOperationRequest(**{field: bad, other: "ok"})
        rejects(field, lambda m=msg: inspect_request_from_pb(m))
    # Either identifier alone is enough (the scope's latest operation); neither is an error.
    assert inspect_request_from_pb(pb.InspectOperationRequest(**{field: "", other: "ok"}))
    rejects("operation_id", lambda: inspect_request_from_pb(pb.InspectOperationRequest()))
    rejects("operation_id", lambda: inspect_request_to_pb("", ""))


# ----------------------------------------------------------------------------- the _to_pb side


def test_to_pb_checks_the_hook_against_the_rpc() -> None:
    prepare = PrepareRequest(ENV, None, "{}")
    cleanup = CleanupRequest(ENV)
    rejects("envelope.hook", lambda: connect_request_to_pb(ConnectRequest(ENV, None, "{}")))
    rejects("envelope.hook", lambda: remove_request_to_pb(cleanup))
    rejects("envelope.hook", lambda: unprepare_request_to_pb(cleanup))
    rejects("envelope.hook", lambda: cleanup_request_to_pb(cleanup))
    assert prepare_request_to_pb(prepare).envelope.hook == pb.NODE_PREPARE


@pytest.mark.parametrize(
    ("over", "path"),
    [
        ({"generation": 0}, "envelope.generation"),
        ({"generation": 2**64}, "envelope.generation"),
        ({"coordinator_epoch": -1}, "envelope.coordinator_epoch"),
        ({"operation_id": ""}, "envelope.operation_id"),
        ({"scope": "a b"}, "envelope.scope"),
        ({"step": "s" * 254}, "envelope.step"),
    ],
)
def test_to_pb_checks_the_envelope(over: dict[str, Any], path: str) -> None:
    fields = {**ENV.__dict__, **over}
    req = PrepareRequest(OperationEnvelope(**fields), None, "{}")
    rejects(path, lambda: prepare_request_to_pb(req))


@pytest.mark.parametrize("mtu", [-1, 2**32])
def test_to_pb_checks_integer_ranges(mtu: int) -> None:
    rejects(
        "requirements.mtu",
        lambda: prepare_request_to_pb(PrepareRequest(ENV, None, "{}", Requirements(mtu=mtu))),
    )
    env = OperationEnvelope("op-1", Hook.CONNECT_NETWORK, "att-1", "vf0", 1, 1)
    bad_ns = SandboxHandle("pod", NamespaceHandle("/run/netns/x", -1, 1, "boot"))
    rejects(
        "sandbox.network_namespace.device",
        lambda: connect_request_to_pb(ConnectRequest(env, bad_ns, "{}")),
    )


def test_to_pb_checks_descriptions() -> None:
    env = OperationEnvelope("op-1", Hook.CONNECT_NETWORK, "att-1", "vf0", 1, 1)
    bad = ResourceHandle("h2", "KernelInterface/v1", "", "", "", "", "", "[]")
    req = ConnectRequest(env, None, "{}", inputs={"members": (HANDLE, bad)})
    rejects("inputs[members][1].description_json", lambda: connect_request_to_pb(req))
    resp = ConnectResponse(outputs={"bond": (bad,)})
    rejects("outputs[bond][0].description_json", lambda: connect_response_to_pb(resp))


def test_to_pb_checks_enum_values() -> None:
    rejects(
        "status",
        lambda: cleanup_response_to_pb(CleanupResponse(status="Done")),  # type: ignore[arg-type]
    )
    rejects("hook", lambda: inspect_response_to_pb(InspectResponse(found=True, hook="Bogus")))
    info = EndpointInfo("vlan", "v1alpha1", ("Allocation", "Root"), "", "", "", True, "{}")
    rejects("step_kinds[1]", lambda: info_to_pb(info))
    alloc = AllocationBinding("r", "d", "p", "dev", "vf", "Both")  # type: ignore[arg-type]
    rejects(
        "allocation.sharing",
        lambda: prepare_request_to_pb(PrepareRequest(ENV, alloc, "{}")),
    )
