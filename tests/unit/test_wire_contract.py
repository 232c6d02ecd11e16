"""The NetworkPlugin wire contract: generated code is current and the shape is as designed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from plugins.api.networkplugin.v1alpha1 import pb, pb_grpc

REPO_ROOT = Path(__file__).resolve().parents[2]

MUTATING_REQUESTS = (
    pb.NodePrepareRequest,
    pb.ConnectNetworkRequest,
    pb.RemoveNetworkRequest,
    pb.NodeUnprepareRequest,
)

ROUTING_FIELD_NAMES = frozenset(
    {"plugin", "plugin_name", "plugin_id", "plugin_type", "driver_name", "target_plugin"}
)


def _load_gen_proto() -> ModuleType:
    path = REPO_ROOT / "scripts" / "gen_proto.py"
    spec = importlib.util.spec_from_file_location("gen_proto_under_test", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_current() -> None:
    gen = _load_gen_proto()
    stale = gen.stale_files()
    assert stale == [], (
        f"stale generated files: {[p.as_posix() for p in stale]}; "
        "run `uv run python scripts/gen_proto.py`"
    )


def test_check_detects_stale_file(tmp_path: Path) -> None:
    gen = _load_gen_proto()
    proto = REPO_ROOT / gen.PROTO_REL
    (tmp_path / gen.PROTO_REL).parent.mkdir(parents=True)
    (tmp_path / gen.PROTO_REL).write_bytes(proto.read_bytes())
    for rel in gen.generated_names():
        (tmp_path / rel).write_bytes((REPO_ROOT / rel).read_bytes())
    assert gen.stale_files(root=tmp_path) == []

    tampered = gen.generated_names()[0]
    (tmp_path / tampered).write_bytes(b"# edited by hand\n")
    missing = gen.generated_names()[-1]
    (tmp_path / missing).unlink()
    assert gen.stale_files(root=tmp_path) == [tampered, missing]


def test_service_has_exactly_the_six_methods() -> None:
    service = pb.DESCRIPTOR.services_by_name["NetworkPlugin"]
    assert list(pb.DESCRIPTOR.services_by_name) == ["NetworkPlugin"]
    assert {m.name for m in service.methods} == {
        "GetInfo",
        "NodePrepare",
        "ConnectNetwork",
        "RemoveNetwork",
        "NodeUnprepare",
        "InspectOperation",
    }
    assert len(service.methods) == 6
    assert all(not m.client_streaming and not m.server_streaming for m in service.methods)
    assert hasattr(pb_grpc, "NetworkPluginStub")
    assert hasattr(pb_grpc, "add_NetworkPluginServicer_to_server")


def test_mutating_requests_have_no_plugin_routing_field() -> None:
    for message in MUTATING_REQUESTS:
        names = {f.name for f in message.DESCRIPTOR.fields}
        assert not names & ROUTING_FIELD_NAMES, f"{message.DESCRIPTOR.name} routes by plugin"
        assert "envelope" in names, f"{message.DESCRIPTOR.name} lacks the operation envelope"
        assert message.DESCRIPTOR.fields_by_name["envelope"].message_type is (
            pb.OperationEnvelope.DESCRIPTOR
        )


def _reachable(descriptor: Descriptor, seen: dict[str, Descriptor]) -> None:
    if descriptor.full_name in seen:
        return
    seen[descriptor.full_name] = descriptor
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type is not None:
            _reachable(field.message_type, seen)


def test_no_routing_or_auth_field_anywhere_in_mutating_requests() -> None:
    # PreparedState.plugin is echoed state identity, not routing; it is the only
    # "plugin" field allowed anywhere inside a mutating request.
    allowed = {("networkplugin.v1alpha1.PreparedState", "plugin")}
    forbidden = ROUTING_FIELD_NAMES | {"token", "authorization", "auth", "bearer_token"}
    seen: dict[str, Descriptor] = {}
    for message in MUTATING_REQUESTS:
        _reachable(message.DESCRIPTOR, seen)
    assert "networkplugin.v1alpha1.PreparedState" in seen  # the walk is recursive
    offenders = [
        (name, field.name)
        for name, descriptor in sorted(seen.items())
        for field in descriptor.fields
        if field.name in forbidden and (name, field.name) not in allowed
    ]
    assert offenders == []


def test_envelope_fields() -> None:
    assert [f.name for f in pb.OperationEnvelope.DESCRIPTOR.fields] == [
        "operation_id",
        "hook",
        "scope",
        "step",
        "generation",
        "coordinator_epoch",
        "trace_id",
    ]


def test_resource_handle_has_exactly_the_blueprint_fields() -> None:
    assert [f.name for f in pb.ResourceHandle.DESCRIPTOR.fields] == [
        "id",
        "type",
        "owner_scope",
        "owner_step",
        "attachment_id",
        "boot_id",
        "root_provenance",
        "description_json",
    ]


def test_cleanup_statuses() -> None:
    assert pb.CleanupStatus.keys() == [
        "CLEANUP_STATUS_UNSPECIFIED",
        "CLEANED",
        "PENDING",
        "QUARANTINED",
    ]


def _handle(handle_id: str, handle_type: str) -> pb.ResourceHandle:
    return pb.ResourceHandle(
        id=handle_id,
        type=handle_type,
        owner_scope="attach-1",
        owner_step="vf0",
        attachment_id="attach-1",
        boot_id="3f0e8c2a-boot",
        root_provenance="vf0",
        description_json='{"ifName":"net1"}',
    )


def test_connect_network_request_round_trips() -> None:
    request = pb.ConnectNetworkRequest(
        envelope=pb.OperationEnvelope(
            operation_id="op-42",
            hook=pb.CONNECT_NETWORK,
            scope="attach-1",
            step="bond0",
            generation=3,
            coordinator_epoch=7,
            trace_id="trace-abc",
        ),
        sandbox=pb.SandboxHandle(
            sandbox_id="sb-1",
            network_namespace=pb.NamespaceHandle(
                path="/var/run/netns/cni-1", device=4, inode=4026532000, boot_id="3f0e8c2a-boot"
            ),
        ),
        config_json='{"mode":"active-backup","miimon":100}',
        inputs=[
            pb.InputPort(
                port="members",
                handles=[
                    _handle("h-vf0", "KernelInterface/v1"),
                    _handle("h-vf1", "KernelInterface/v1"),
                ],
            )
        ],
        interface_names={"interface": "bond0"},
        prepared=pb.PreparedState(
            root_id="vf0",
            plugin="networkplugin-vf",
            preparation_id="prep-1",
            handles=[_handle("h-prep", "PreparedVF/v1")],
        ),
        allocation=pb.AllocationBinding(
            root_id="vf0",
            driver="dra.networking",
            pool="node-a",
            device="vf-0000-3b-02-1",
            device_type="vf",
            sharing=pb.EXCLUSIVE,
            attributes={"pfName": "ens1f0", "vfIndex": "1", "pciAddress": "0000:3b:02.1"},
            capacity={"dra.networking/macvlans": "1"},
        ),
        grants=[pb.Grant(effect="linux/enslave-bond/v1", resource_id="h-vf0")],
    )
    wire = request.SerializeToString(deterministic=True)
    decoded = pb.ConnectNetworkRequest.FromString(wire)
    assert decoded == request
    assert decoded.SerializeToString(deterministic=True) == wire
    assert decoded.envelope.coordinator_epoch == 7
    assert decoded.sandbox.network_namespace.inode == 4026532000
    assert decoded.inputs[0].handles[1].id == "h-vf1"
    assert dict(decoded.interface_names) == {"interface": "bond0"}
    assert decoded.allocation.sharing == pb.EXCLUSIVE
    assert decoded.grants[0].resource_id == "h-vf0"


def test_requirements_mtu_presence_is_tracked() -> None:
    assert not pb.Requirements().HasField("mtu")
    assert pb.Requirements(mtu=0).HasField("mtu")
