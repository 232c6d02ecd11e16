"""The NRI adapter's bytes against fixtures written by hand from the public definitions.

Every expected byte string here was derived on paper from containerd/nri
(``pkg/net/multiplex``: 4-byte big-endian connection id, 4-byte big-endian length;
plugin service on connection 1, runtime service on 2), containerd/ttrpc (``channel.go``:
4-byte length, 4-byte stream id, 1-byte type, 1-byte flags; ``request.proto``) and the
protobuf encoding (tag = field number << 3 | wire type; varints little-endian base 128),
never produced by the code under test. Derivations are in the comments.
"""

from __future__ import annotations

import grpc
import pytest
from google.rpc import status_pb2  # type: ignore[import-untyped, unused-ignore]

from plugins.api.nri.v1alpha1 import pb
from plugins.api.ttrpc import pb as ttrpc_pb
from plugins.coordinator.nri import (
    DEFAULT_EVENTS,
    EVICTION_REASON,
    PLUGIN_SERVICE,
    RUNTIME_SERVICE,
    Event,
    FrameError,
    event_mask,
    events_in_mask,
)
from plugins.coordinator.nri._convert import sandbox_from_pb
from plugins.coordinator.nri._mux import MuxDecoder, encode_frames
from plugins.coordinator.nri._ttrpc import (
    CallError,
    MessageDecoder,
    MessageType,
    encode_message,
    encode_request,
    encode_response,
)

# Connection 1, length 3, payload 01 02 03.
MUX_FRAME = b"\x00\x00\x00\x01" + b"\x00\x00\x00\x03" + b"\x01\x02\x03"

# ttrpc header of an empty request on stream 1: length 0, stream 1, type 1, flags 0.
TTRPC_EMPTY_REQUEST = b"\x00\x00\x00\x00" + b"\x00\x00\x00\x01" + b"\x01" + b"\x00"

# RegisterPluginRequest{plugin_name: "netcoord", plugin_idx: "10"}:
#   field 1 (0x0a) len 8 "netcoord", field 2 (0x12) len 2 "10"  -> 14 bytes.
REGISTER_PLUGIN_REQUEST = b"\x0a\x08netcoord" + b"\x12\x0210"

# ttrpc.Request{service: "nri.pkg.api.v1alpha1.Runtime" (28 = 0x1c bytes),
#   method: "RegisterPlugin" (14 = 0x0e), payload: the 14 bytes above,
#   timeout_nano: 5 s = 5000000000 = 0x12A05F200}
# varint(5000000000): 7-bit groups from the low end 0x00, 0x64, 0x17, 0x50, 0x12
#   -> 80 e4 97 d0 12.  Body: 30 + 16 + 16 + 6 = 68 = 0x44 bytes.
REGISTER_REQUEST_ENVELOPE = (
    b"\x0a\x1cnri.pkg.api.v1alpha1.Runtime"
    + b"\x12\x0eRegisterPlugin"
    + b"\x1a\x0e"
    + REGISTER_PLUGIN_REQUEST
    + b"\x20\x80\xe4\x97\xd0\x12"
)
# The plugin's first write: mux connection 2 (runtime service), 10 + 68 = 78 = 0x4e bytes,
# then the ttrpc request on stream 1 (length 0x44, type 1, flags 0).
REGISTER_FRAME = (
    b"\x00\x00\x00\x02\x00\x00\x00\x4e"
    + b"\x00\x00\x00\x44\x00\x00\x00\x01\x01\x00"
    + REGISTER_REQUEST_ENVELOPE
)

# The default subscription: RUN_POD_SANDBOX (1), STOP_POD_SANDBOX (2),
# REMOVE_POD_SANDBOX (3), CREATE_CONTAINER (4) -> bits 0..3 -> 0x0f.
DEFAULT_MASK = 0x0F
# ConfigureResponse{events: 15}: field 2 varint (0x10), 0x0f.
CONFIGURE_RESPONSE = b"\x10\x0f"
# ttrpc.Response{payload: those 2 bytes}: field 2 (0x12) len 2; no status (OK).
# Answer to the runtime's stream 1, on mux connection 1; 10 + 4 = 14 = 0x0e bytes.
CONFIGURE_REPLY_FRAME = (
    b"\x00\x00\x00\x01\x00\x00\x00\x0e"
    + b"\x00\x00\x00\x04\x00\x00\x00\x01\x02\x00"
    + b"\x12\x02"
    + CONFIGURE_RESPONSE
)

# ttrpc.Request{service: "nri.pkg.api.v1alpha1.Plugin" (27 = 0x1b), method: "Configure"
#   (9), payload: ConfigureRequest{runtime_name: "containerd"} = 12 0a "containerd"}.
CONFIGURE_REQUEST_ENVELOPE = (
    b"\x0a\x1bnri.pkg.api.v1alpha1.Plugin" + b"\x12\x09Configure" + b"\x1a\x0c\x12\x0acontainerd"
)

# ttrpc.Response{status: {code: 9 (FAILED_PRECONDITION), message: "no"}}:
#   status = field 1 (0x0a) len 6: code field 1 varint (08 09), message field 2 (12 02 "no").
ERROR_RESPONSE = b"\x0a\x06\x08\x09\x12\x02no"

# StateChangeEvent{event: RUN_POD_SANDBOX, pod: PodSandbox{id: "sb1", name: "web",
#   uid: "u1", namespace: "ns", linux: {namespaces: [{type: "network",
#   path: "/var/run/netns/cni-1"}]}}}
# LinuxNamespace: 0a 07 "network" 12 14 "/var/run/netns/cni-1"      = 31 (0x1f)
# LinuxPodSandbox: namespaces is field 5 (0x2a), len 0x1f             = 33 (0x21)
# PodSandbox: id 1 (0a), name 2 (12), uid 3 (1a), namespace 4 (22), linux 8 (42)
#   5 + 5 + 4 + 4 + 2 + 33                                            = 53 (0x35)
# StateChangeEvent: event 1 varint (08 01), pod 2 (12 35)
NETWORK_NAMESPACE = b"\x0a\x07network" + b"\x12\x14/var/run/netns/cni-1"
RUN_POD_SANDBOX_EVENT = (
    b"\x08\x01"
    + b"\x12\x35"
    + b"\x0a\x03sb1"
    + b"\x12\x03web"
    + b"\x1a\x02u1"
    + b"\x22\x02ns"
    + b"\x42\x21"
    + b"\x2a\x1f"
    + NETWORK_NAMESPACE
)


# The reason the coordinator gives for an eviction: 77 = 0x4d bytes.
REASON = b"started while the network plugin was away; its pod networking was not checked"

# UpdateContainersRequest{evict: [ContainerEviction{container_id: "c1", reason: REASON}]}:
#   ContainerEviction: field 1 (0x0a) len 2 "c1", field 2 (0x12) len 0x4d REASON
#     -> 4 + 2 + 77 = 83 = 0x53 bytes;
#   the request: field 2 (evict, 0x12) len 0x53 -> 85 = 0x55 bytes (no update, field 1).
UPDATE_CONTAINERS_REQUEST = b"\x12\x53" + b"\x0a\x02c1" + b"\x12\x4d" + REASON

# ttrpc.Request{service: "nri.pkg.api.v1alpha1.Runtime" (0x1c), method: "UpdateContainers"
#   (16 = 0x10 bytes), payload: the 85 bytes above (0x55), timeout_nano: 2 s = 2000000000
#   = 0x77359400, 7-bit groups from the low end 0x00 0x28 0x56 0x39 0x07 -> 80 a8 d6 b9 07}
#   Body: 30 + 18 + 87 + 6 = 141 = 0x8d bytes.
UPDATE_CONTAINERS_ENVELOPE = (
    b"\x0a\x1cnri.pkg.api.v1alpha1.Runtime"
    + b"\x12\x10UpdateContainers"
    + b"\x1a\x55"
    + UPDATE_CONTAINERS_REQUEST
    + b"\x20\x80\xa8\xd6\xb9\x07"
)

# The plugin's second call (stream 3; RegisterPlugin took 1) on the runtime's service:
#   mux connection 2, length 10 + 141 = 151 = 0x97; ttrpc length 0x8d, stream 3, type 1.
UPDATE_CONTAINERS_FRAME = (
    b"\x00\x00\x00\x02\x00\x00\x00\x97"
    + b"\x00\x00\x00\x8d\x00\x00\x00\x03\x01\x00"
    + UPDATE_CONTAINERS_ENVELOPE
)

# UpdateContainersResponse{failed: [ContainerUpdate{container_id: "c9", ignore_failure: true}]}:
#   ContainerUpdate: field 1 (0x0a) len 2 "c9", field 3 varint (0x18) 1 -> 6 bytes;
#   the response: field 1 (0x0a) len 6.
UPDATE_CONTAINERS_RESPONSE = b"\x0a\x06" + b"\x0a\x02c9" + b"\x18\x01"


# CreateContainerResponse{evict: [ContainerEviction{container_id: "c1", reason: REASON}]}:
#   the same ContainerEviction (0x53 bytes) as field 3 (evict, 3 << 3 | 2 = 0x1a) -> 85 =
#   0x55 bytes; no adjust (field 1), no update (field 2).
CREATE_CONTAINER_RESPONSE = b"\x1a\x53" + b"\x0a\x02c1" + b"\x12\x4d" + REASON

# ttrpc.Response{payload: those 85 bytes}: field 2 (0x12) len 0x55, no status (OK)
#   -> 87 = 0x57 bytes. The answer to the runtime's stream 5 on mux connection 1:
#   length 10 + 87 = 97 = 0x61; ttrpc length 0x57, stream 5, type 2 (response), flags 0.
CREATE_CONTAINER_REPLY = b"\x12\x55" + CREATE_CONTAINER_RESPONSE
CREATE_CONTAINER_REPLY_FRAME = (
    b"\x00\x00\x00\x01\x00\x00\x00\x61"
    + b"\x00\x00\x00\x57\x00\x00\x00\x05\x02\x00"
    + CREATE_CONTAINER_REPLY
)


def test_mux_frame_is_id_length_payload() -> None:
    assert encode_frames(1, b"\x01\x02\x03") == MUX_FRAME


def test_mux_decoder_reassembles_a_frame_fed_byte_by_byte() -> None:
    decoder = MuxDecoder()
    frames: list[tuple[int, bytes]] = []
    for i in range(len(MUX_FRAME + MUX_FRAME)):
        frames += decoder.feed((MUX_FRAME + MUX_FRAME)[i : i + 1])
    assert frames == [(1, b"\x01\x02\x03"), (1, b"\x01\x02\x03")]
    assert decoder.pending == 0


def test_mux_splits_a_payload_above_the_frame_limit() -> None:
    # 10 + 4 MiB = 4194314 = 0x0040000a is the largest frame; one byte more goes on.
    data = bytes(4194315)
    out = encode_frames(2, data)
    assert out[:8] == b"\x00\x00\x00\x02\x00\x40\x00\x0a"
    assert out[8 + 4194314 : 8 + 4194314 + 8] == b"\x00\x00\x00\x02\x00\x00\x00\x01"
    assert len(out) == 4194315 + 16


def test_mux_frame_above_the_limit_is_refused() -> None:
    with pytest.raises(FrameError, match=r"connection 1 declares 4194315 bytes"):
        MuxDecoder().feed(b"\x00\x00\x00\x01\x00\x40\x00\x0b")


def test_mux_refuses_the_reserved_connection_and_empty_frames() -> None:
    with pytest.raises(ValueError, match="reserved"):
        encode_frames(0, b"x")
    with pytest.raises(ValueError, match="empty"):
        encode_frames(1, b"")


def test_ttrpc_header_is_length_stream_type_flags() -> None:
    assert encode_message(1, MessageType.REQUEST, b"") == TTRPC_EMPTY_REQUEST
    assert encode_message(7, MessageType.DATA, b"ab", flags=5) == (
        b"\x00\x00\x00\x02\x00\x00\x00\x07\x03\x05ab"
    )


def test_ttrpc_decoder_reads_header_fields() -> None:
    (message,) = MessageDecoder().feed(b"\x00\x00\x00\x02\x00\x00\x00\x07\x03\x05ab")
    assert (message.stream_id, message.type, message.flags, message.body) == (7, 3, 5, b"ab")


def test_ttrpc_message_above_4_mib_is_refused() -> None:
    # 4 MiB + 1 = 0x00400001.
    with pytest.raises(FrameError, match=r"stream 3 declares 4194305 bytes"):
        MessageDecoder().feed(b"\x00\x40\x00\x01\x00\x00\x00\x03\x01\x00")


def test_register_plugin_request_and_its_frame() -> None:
    request = pb.RegisterPluginRequest(plugin_name="netcoord", plugin_idx="10")
    assert request.SerializeToString() == REGISTER_PLUGIN_REQUEST
    ttrpc = encode_request(
        1, RUNTIME_SERVICE, "RegisterPlugin", REGISTER_PLUGIN_REQUEST, 5_000_000_000
    )
    assert encode_frames(2, ttrpc) == REGISTER_FRAME


def test_event_mask_of_the_default_subscription() -> None:
    assert event_mask(DEFAULT_EVENTS) == DEFAULT_MASK
    assert event_mask([Event.STOP_CONTAINER]) == 0x200  # event 10 -> bit 9
    assert events_in_mask(0x0F) == DEFAULT_EVENTS
    with pytest.raises(ValueError, match="0x4000"):
        events_in_mask(0x4000)  # bit 14 would be event 15 (LAST), no event


def test_configure_response_and_its_reply_frame() -> None:
    assert pb.ConfigureResponse(events=DEFAULT_MASK).SerializeToString() == CONFIGURE_RESPONSE
    assert encode_frames(1, encode_response(1, CONFIGURE_RESPONSE)) == CONFIGURE_REPLY_FRAME


def test_configure_request_envelope_parses() -> None:
    request = ttrpc_pb.Request.FromString(CONFIGURE_REQUEST_ENVELOPE)
    assert (request.service, request.method) == (PLUGIN_SERVICE, "Configure")
    assert pb.ConfigureRequest.FromString(request.payload).runtime_name == "containerd"


def test_error_response_carries_a_google_rpc_status() -> None:
    error = CallError(grpc.StatusCode.FAILED_PRECONDITION, "no")
    assert encode_response(5, error=error)[10:] == ERROR_RESPONSE
    status = ttrpc_pb.Response.FromString(ERROR_RESPONSE).status
    assert isinstance(status, status_pb2.Status)  # the envelope imports google.rpc's own
    assert (status.code, status.message) == (9, "no")


def test_state_change_with_a_network_namespace() -> None:
    event = pb.StateChangeEvent(
        event=pb.RUN_POD_SANDBOX,
        pod=pb.PodSandbox(
            id="sb1",
            name="web",
            uid="u1",
            namespace="ns",
            linux=pb.LinuxPodSandbox(
                namespaces=[pb.LinuxNamespace(type="network", path="/var/run/netns/cni-1")]
            ),
        ),
    )
    assert event.SerializeToString() == RUN_POD_SANDBOX_EVENT
    parsed = pb.StateChangeEvent.FromString(RUN_POD_SANDBOX_EVENT)
    sandbox = sandbox_from_pb(parsed.pod, "StateChange")
    assert (sandbox.id, sandbox.name, sandbox.namespace, sandbox.uid) == ("sb1", "web", "ns", "u1")
    assert sandbox.netns_path == "/var/run/netns/cni-1"


def test_an_update_containers_request_with_one_eviction() -> None:
    assert EVICTION_REASON.encode() == REASON
    request = pb.UpdateContainersRequest(
        evict=[pb.ContainerEviction(container_id="c1", reason=EVICTION_REASON)]
    )
    assert request.SerializeToString() == UPDATE_CONTAINERS_REQUEST
    frame = encode_request(
        3, RUNTIME_SERVICE, "UpdateContainers", UPDATE_CONTAINERS_REQUEST, 2_000_000_000
    )
    assert encode_frames(2, frame) == UPDATE_CONTAINERS_FRAME
    (evict,) = pb.UpdateContainersRequest.FromString(UPDATE_CONTAINERS_REQUEST).evict
    assert (evict.container_id, evict.reason) == ("c1", EVICTION_REASON)


def test_an_update_containers_response_lists_the_failed_updates() -> None:
    (failed,) = pb.UpdateContainersResponse.FromString(UPDATE_CONTAINERS_RESPONSE).failed
    assert (failed.container_id, failed.ignore_failure) == ("c9", True)
    again = pb.UpdateContainersResponse(
        failed=[pb.ContainerUpdate(container_id="c9", ignore_failure=True)]
    )
    assert again.SerializeToString() == UPDATE_CONTAINERS_RESPONSE


def test_a_create_container_answer_with_one_eviction() -> None:
    response = pb.CreateContainerResponse(
        evict=[pb.ContainerEviction(container_id="c1", reason=EVICTION_REASON)]
    )
    assert response.SerializeToString() == CREATE_CONTAINER_RESPONSE
    assert encode_frames(1, encode_response(5, CREATE_CONTAINER_RESPONSE)) == (
        CREATE_CONTAINER_REPLY_FRAME
    )
    parsed = pb.CreateContainerResponse.FromString(CREATE_CONTAINER_RESPONSE)
    assert not parsed.update
    (evict,) = parsed.evict
    assert (evict.container_id, evict.reason) == ("c1", EVICTION_REASON)


def test_an_update_container_answer_carries_evictions_in_field_2() -> None:
    # UpdateContainerResponse{evict: [ContainerEviction{container_id: "c1", reason: "r"}]}:
    #   ContainerEviction 0a 02 "c1" 12 01 "r" = 7 bytes, as field 2 (0x12) -> 9 bytes.
    wire = b"\x12\x07" + b"\x0a\x02c1" + b"\x12\x01r"
    (evict,) = pb.UpdateContainerResponse.FromString(wire).evict
    assert (evict.container_id, evict.reason) == ("c1", "r")
