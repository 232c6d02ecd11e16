"""The kubelet protocols' bytes, derived by hand from the public field numbers.

Each literal below was worked out from the wire format (a field's key is
``number << 3 | wire type``; 2 is length-delimited, 0 a varint; a map entry is a message
of key 1 and value 2) and the upstream field numbers, not produced by the generated
code: if a .proto of ours drifted from upstream (a number, a type, share_id's presence),
the generated messages would serialize differently and these comparisons fail.
"""

from __future__ import annotations

from plugins.api.kubelet.dra.v1 import dra_pb2 as v1
from plugins.api.kubelet.dra.v1beta1 import dra_pb2 as v1beta1
from plugins.api.kubelet.drahealth.v1alpha1 import health_pb2 as health
from plugins.api.kubelet.pluginregistration.v1 import registration_pb2 as registration

# Claim{namespace=1 "ns", uid=2 "u1", name=3 "c"}: 0a 02 'ns' | 12 02 'u1' | 1a 01 'c' (11 bytes)
CLAIM = b"\x0a\x02ns\x12\x02u1\x1a\x01c"
# NodePrepareResourcesRequest{claims=1 [CLAIM]}
PREPARE_REQUEST = b"\x0a\x0b" + CLAIM

# Device{request_names=1 ["r"], pool_name=2 "p", device_name=3 "d", cdi_device_ids=4 ["x"]}
DEVICE_V1BETA1 = b"\x0a\x01r\x12\x01p\x1a\x01d\x22\x01x"  # 12 bytes
# v1 adds share_id=5 "s": 2a 01 's' (15 bytes)
DEVICE_V1 = DEVICE_V1BETA1 + b"\x2a\x01s"
# NodePrepareResourceResponse{devices=1 [DEVICE_V1]} is 0a 0f + 15 = 17 bytes; the map
# entry {key=1 "u1", value=2 that} is 0a 02 'u1' 12 11 + 17 = 23 bytes.
PREPARE_RESPONSE_V1 = b"\x0a\x17" + b"\x0a\x02u1" + b"\x12\x11" + b"\x0a\x0f" + DEVICE_V1
# The same without share_id: 0a 0c + 12 = 14; entry 0a 02 'u1' 12 0e + 14 = 20 bytes.
PREPARE_RESPONSE_V1BETA1 = b"\x0a\x14" + b"\x0a\x02u1" + b"\x12\x0e" + b"\x0a\x0c" + DEVICE_V1BETA1
# A second entry {key "u2", value {error=2 "e"}}: 0a 02 'u2' 12 03 (12 01 'e'), 9 bytes.
FAILED_ENTRY = b"\x0a\x09" + b"\x0a\x02u2" + b"\x12\x03" + b"\x12\x01e"


def test_v1_prepare_request() -> None:
    message = v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace="ns", uid="u1", name="c")])
    assert message.SerializeToString() == PREPARE_REQUEST


def test_v1_prepare_response_with_share_id_and_a_failed_claim() -> None:
    message = v1.NodePrepareResourcesResponse()
    message.claims["u1"].devices.add(
        request_names=["r"], pool_name="p", device_name="d", cdi_device_ids=["x"], share_id="s"
    )
    message.claims["u2"].error = "e"
    assert message.SerializeToString(deterministic=True) == PREPARE_RESPONSE_V1 + FAILED_ENTRY


def test_v1_share_id_has_explicit_presence() -> None:
    """Set to "" it is still sent (2a 00); unset it is not: the kubelet tells them apart."""
    assert v1.Device(share_id="").SerializeToString() == b"\x2a\x00"
    assert v1.Device().SerializeToString() == b""


def test_v1beta1_prepare_request_and_response() -> None:
    request = v1beta1.NodePrepareResourcesRequest(
        claims=[v1beta1.Claim(namespace="ns", uid="u1", name="c")]
    )
    assert request.SerializeToString() == PREPARE_REQUEST
    response = v1beta1.NodePrepareResourcesResponse()
    response.claims["u1"].devices.add(
        request_names=["r"], pool_name="p", device_name="d", cdi_device_ids=["x"]
    )
    assert response.SerializeToString() == PREPARE_RESPONSE_V1BETA1


def test_v1beta1_has_no_share_id() -> None:
    assert "share_id" not in v1beta1.Device.DESCRIPTOR.fields_by_name


def test_unprepare_messages() -> None:
    request = v1.NodeUnprepareResourcesRequest(
        claims=[v1.Claim(namespace="ns", uid="u1", name="c")]
    )
    assert request.SerializeToString() == b"\x0a\x0b" + CLAIM
    response = v1beta1.NodeUnprepareResourcesResponse()
    response.claims["u1"].error = "e"
    # entry {key "u1", value {error=1 "e"}}: 0a 02 'u1' 12 03 (0a 01 'e')
    assert response.SerializeToString() == b"\x0a\x09\x0a\x02u1\x12\x03\x0a\x01e"


def test_plugin_info() -> None:
    message = registration.PluginInfo(
        type="DRAPlugin",
        name="n",
        endpoint="/e",
        supported_versions=["v1.DRAPlugin", "v1beta1.DRAPlugin"],
    )
    assert message.SerializeToString() == (
        b"\x0a\x09DRAPlugin"  # type = 1, 9 bytes
        b"\x12\x01n"  # name = 2
        b"\x1a\x02/e"  # endpoint = 3
        b"\x22\x0cv1.DRAPlugin"  # supported_versions = 4, 12 bytes
        b"\x22\x11v1beta1.DRAPlugin"  # 17 bytes
    )


def test_registration_status() -> None:
    ok = registration.RegistrationStatus(plugin_registered=True)
    assert ok.SerializeToString() == b"\x08\x01"  # plugin_registered = 1, varint 1
    refused = registration.RegistrationStatus(plugin_registered=False, error="no")
    assert refused.SerializeToString() == b"\x12\x02no"  # error = 2; false is not sent


def test_health_update() -> None:
    message = health.NodeWatchResourcesResponse()
    message.devices.add(
        device=health.DeviceIdentifier(pool_name="p", device_name="d"),
        health=health.UNHEALTHY,
        last_updated_time=300,
    )
    # DeviceIdentifier 0a 01 'p' 12 01 'd' (6); health = 2 varint 2: 10 02;
    # last_updated_time = 3 varint 300: 18 ac 02. DeviceHealth: 0a 06 + 6 + 2 + 3 = 13.
    assert message.SerializeToString() == (
        b"\x0a\x0d" + b"\x0a\x06\x0a\x01p\x12\x01d" + b"\x10\x02" + b"\x18\xac\x02"
    )


def test_service_and_method_names() -> None:
    """The gRPC paths the kubelet dials are the packages' and services' full names."""
    assert v1.DESCRIPTOR.services_by_name["DRAPlugin"].full_name == (
        "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    )
    assert v1beta1.DESCRIPTOR.services_by_name["DRAPlugin"].full_name == (
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
    )
    assert registration.DESCRIPTOR.services_by_name["Registration"].full_name == (
        "pluginregistration.Registration"
    )
    watch = health.DESCRIPTOR.services_by_name["DRAResourceHealth"].methods_by_name[
        "NodeWatchResources"
    ]
    assert watch.full_name == "v1alpha1.DRAResourceHealth.NodeWatchResources"
    assert watch.server_streaming
    assert not watch.client_streaming
    methods = set(v1.DESCRIPTOR.services_by_name["DRAPlugin"].methods_by_name)
    assert methods == {"NodePrepareResources", "NodeUnprepareResources"}
