"""The simulator's NRI framing against bytes derived by hand from the public definitions.

Every literal below was worked out on paper from containerd/nri ``pkg/net/multiplex`` (an
8-byte header: connection id then payload length, both big-endian u32; connection 1 the
plugin's service, 2 the runtime's), containerd/ttrpc ``PROTOCOL.md`` (a 10-byte header:
data length and stream id, big-endian u32, then type and flags bytes) and protobuf's
encoding rules (tag = field number << 3 | wire type; varints 7 bits a byte, low group
first). They are not produced by any encoder, ours or theirs, so that a test here fails
when the codec misreads the wire rather than agreeing with itself.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from google.rpc import status_pb2  # type: ignore[import-untyped, unused-ignore]

from harness.k8s.nri_frames import (
    MUX_MAX_PAYLOAD,
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    TTRPC_MAX_DATA,
    FrameError,
    MessageType,
    MuxDecoder,
    TrunkDecoder,
    TtrpcDecoder,
    TtrpcFrame,
    encode,
    encode_mux,
    encode_ttrpc,
)
from plugins.api.nri.v1alpha1 import nri_pb2
from plugins.api.ttrpc import ttrpc_pb2

# A mux frame: connection 2 (the runtime's service), payload 01 02 03.
MUX_FRAME = bytes.fromhex("00000002 00000003 010203")

# ConfigureRequest{runtime_name: "sim", runtime_version: "1.0",
#                  registration_timeout: 5000, request_timeout: 2000}
#   field 2 (0x12) len 3 "sim"; field 3 (0x1a) len 3 "1.0";
#   field 4 varint (0x20) 5000 = 0x1388 -> 88 27; field 5 varint (0x28) 2000 = 0x7d0 -> d0 0f
CONFIGURE_REQUEST = bytes.fromhex("1203 73696d 1a03 312e30 20 8827 28 d00f")

# ttrpc Request{service: "nri.pkg.api.v1alpha1.Plugin" (27 bytes), method: "Configure",
#               payload: CONFIGURE_REQUEST (16 bytes), timeout_nano: 2_000_000_000}
#   2e9 in 7-bit groups, low first: 0x00 0x28 0x56 0x39 0x07 -> 80 a8 d6 b9 07
TTRPC_REQUEST = (
    bytes.fromhex("0a1b")
    + b"nri.pkg.api.v1alpha1.Plugin"
    + bytes.fromhex("1209")
    + b"Configure"
    + bytes.fromhex("1a10")
    + CONFIGURE_REQUEST
    + bytes.fromhex("20 80a8d6b907")
)

# Its ttrpc header: 64 bytes of data, stream 1, type 1 (request), no flags.
TTRPC_REQUEST_HEADER = bytes.fromhex("00000040 00000001 01 00")

# The whole frame on the trunk: connection 1 (the plugin's service), 74 = 10 + 64 bytes.
TTRPC_REQUEST_ON_TRUNK = bytes.fromhex("00000001 0000004a") + TTRPC_REQUEST_HEADER + TTRPC_REQUEST

# ttrpc Response{status: google.rpc.Status{code: 2 (UNKNOWN), message: "refused"}}
#   Status: field 1 varint (08) 2; field 2 (0x12) len 7 "refused" -> 11 bytes
#   Response: field 1 (0x0a) len 11; no payload
TTRPC_ERROR_RESPONSE = bytes.fromhex("0a0b 0802 1207") + b"refused"

# On stream 3 (the runtime's second call), type 2 (response), on connection 1: 10 + 13 bytes.
TTRPC_ERROR_RESPONSE_ON_TRUNK = (
    bytes.fromhex("00000001 00000017")
    + bytes.fromhex("0000000d 00000003 02 00")
    + TTRPC_ERROR_RESPONSE
)

# A successful unary response to a call whose reply is Empty: the status is present with
# code OK (an empty message, 0a 00) and the empty payload is left out.
TTRPC_OK_EMPTY_RESPONSE = bytes.fromhex("0a00")


def test_a_mux_frame_is_connection_id_then_length_then_payload() -> None:
    assert encode_mux(RUNTIME_SERVICE_CONN, b"\x01\x02\x03") == MUX_FRAME
    assert MuxDecoder().feed(MUX_FRAME) == [(RUNTIME_SERVICE_CONN, b"\x01\x02\x03")]


def test_a_ttrpc_request_header_and_frame() -> None:
    frame = TtrpcFrame(1, MessageType.REQUEST, 0, TTRPC_REQUEST)

    encoded = encode_ttrpc(frame)

    assert encoded[:10] == TTRPC_REQUEST_HEADER
    assert encoded == TTRPC_REQUEST_HEADER + TTRPC_REQUEST
    assert encode(PLUGIN_SERVICE_CONN, frame) == TTRPC_REQUEST_ON_TRUNK
    assert TrunkDecoder().feed(TTRPC_REQUEST_ON_TRUNK) == [(PLUGIN_SERVICE_CONN, frame)]


def test_the_ttrpc_request_message_matches_the_hand_derived_bytes() -> None:
    configure = nri_pb2.ConfigureRequest(
        runtime_name="sim",
        runtime_version="1.0",
        registration_timeout=5000,
        request_timeout=2000,
    )
    request = ttrpc_pb2.Request(
        service="nri.pkg.api.v1alpha1.Plugin",
        method="Configure",
        payload=configure.SerializeToString(),
        timeout_nano=2_000_000_000,
    )

    assert configure.SerializeToString() == CONFIGURE_REQUEST
    assert request.SerializeToString() == TTRPC_REQUEST
    parsed = ttrpc_pb2.Request.FromString(TTRPC_REQUEST)
    assert (parsed.service, parsed.method, parsed.timeout_nano) == (
        "nri.pkg.api.v1alpha1.Plugin",
        "Configure",
        2_000_000_000,
    )


def test_a_ttrpc_response_carrying_a_status_error() -> None:
    response = ttrpc_pb2.Response(status=status_pb2.Status(code=2, message="refused"))
    frame = TtrpcFrame(3, MessageType.RESPONSE, 0, response.SerializeToString())

    assert response.SerializeToString() == TTRPC_ERROR_RESPONSE
    assert encode(PLUGIN_SERVICE_CONN, frame) == TTRPC_ERROR_RESPONSE_ON_TRUNK
    ((conn_id, decoded),) = TrunkDecoder().feed(TTRPC_ERROR_RESPONSE_ON_TRUNK)
    assert (conn_id, decoded.stream_id, decoded.type) == (PLUGIN_SERVICE_CONN, 3, 2)
    status = ttrpc_pb2.Response.FromString(decoded.data).status
    assert (status.code, status.message) == (2, "refused")


def test_the_status_is_google_rpc_status_on_the_wire() -> None:
    # Upstream's Response.status is google.rpc.Status, and so is ours: the very class of
    # googleapis-common-protos. The status bytes of the frame above (after the 0a 0b that
    # open field 1) are what that class reads and writes.
    field = ttrpc_pb2.Response.DESCRIPTOR.fields_by_name["status"]
    assert field.message_type is not None
    assert field.message_type.full_name == "google.rpc.Status"
    assert type(ttrpc_pb2.Response().status) is status_pb2.Status
    status_bytes = TTRPC_ERROR_RESPONSE[2:]
    google_status = status_pb2.Status.FromString(status_bytes)

    assert (google_status.code, google_status.message) == (2, "refused")
    assert status_pb2.Status(code=2, message="refused").SerializeToString() == status_bytes


def test_an_ok_response_to_an_empty_reply_carries_an_empty_status() -> None:
    response = ttrpc_pb2.Response()
    response.status.SetInParent()

    assert response.SerializeToString() == TTRPC_OK_EMPTY_RESPONSE
    assert ttrpc_pb2.Response.FromString(TTRPC_OK_EMPTY_RESPONSE).HasField("status")


def test_a_ttrpc_frame_split_across_mux_frames_is_reassembled() -> None:
    frame_bytes = TTRPC_REQUEST_HEADER + TTRPC_REQUEST
    # The writer's buffer can split a frame anywhere, even inside the header.
    trunk = encode_mux(PLUGIN_SERVICE_CONN, frame_bytes[:7]) + encode_mux(
        PLUGIN_SERVICE_CONN, frame_bytes[7:]
    )
    decoder = TrunkDecoder()

    decoded = [pair for byte in trunk for pair in decoder.feed(bytes([byte]))]

    assert decoded == [(PLUGIN_SERVICE_CONN, TtrpcFrame(1, 1, 0, TTRPC_REQUEST))]
    assert decoder.pending == 0


def test_interleaved_connections_each_keep_their_own_stream() -> None:
    request = encode_ttrpc(TtrpcFrame(1, MessageType.REQUEST, 0, b"abc"))
    response = encode_ttrpc(TtrpcFrame(1, MessageType.RESPONSE, 0, b"xyz"))
    trunk = (
        encode_mux(RUNTIME_SERVICE_CONN, request[:4])
        + encode_mux(PLUGIN_SERVICE_CONN, response[:12])
        + encode_mux(RUNTIME_SERVICE_CONN, request[4:])
        + encode_mux(PLUGIN_SERVICE_CONN, response[12:])
    )

    assert TrunkDecoder().feed(trunk) == [
        (RUNTIME_SERVICE_CONN, TtrpcFrame(1, 1, 0, b"abc")),
        (PLUGIN_SERVICE_CONN, TtrpcFrame(1, 2, 0, b"xyz")),
    ]


def test_frames_for_a_connection_nobody_opened_are_dropped_and_counted() -> None:
    decoder = TrunkDecoder()

    assert decoder.feed(bytes.fromhex("00000007 00000002 ffff") + MUX_FRAME) == []
    assert decoder.ignored_frames == 1
    assert decoder.pending == 3  # the 3 payload bytes of MUX_FRAME, short of a ttrpc header


def test_a_payload_longer_than_one_ttrpc_frame_is_split_into_several_mux_frames() -> None:
    payload = bytes(MUX_MAX_PAYLOAD + 5)

    encoded = encode_mux(PLUGIN_SERVICE_CONN, payload)

    assert encoded[:8] == bytes.fromhex("00000001") + MUX_MAX_PAYLOAD.to_bytes(4, "big")
    second = 8 + MUX_MAX_PAYLOAD
    assert encoded[second : second + 8] == bytes.fromhex("00000001 00000005")
    assert MuxDecoder().feed(encoded) == [
        (PLUGIN_SERVICE_CONN, payload[:MUX_MAX_PAYLOAD]),
        (PLUGIN_SERVICE_CONN, payload[MUX_MAX_PAYLOAD:]),
    ]


def test_an_empty_payload_is_one_empty_frame() -> None:
    assert encode_mux(PLUGIN_SERVICE_CONN, b"") == bytes.fromhex("00000001 00000000")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: encode_mux(0, b"x"), "connection id 0 is reserved"),
        (lambda: encode_mux(1 << 32, b"x"), "not an unsigned 32-bit integer"),
        (lambda: TtrpcFrame(-1, 1, 0, b""), "stream id -1"),
        (lambda: TtrpcFrame(1, 256, 0, b""), "message type 256"),
        (lambda: TtrpcFrame(1, 1, 0, bytes(TTRPC_MAX_DATA + 1)), "exceeds the maximum"),
        (lambda: TtrpcDecoder().feed(bytes.fromhex("00400001 00000001 0100")), "exceeds"),
        (lambda: MuxDecoder().feed(bytes.fromhex("00000001 00400100")), "exceeds"),
    ],
)
def test_what_the_wire_cannot_carry_is_refused_naming_it(
    build: Callable[[], object], message: str
) -> None:
    with pytest.raises(FrameError, match=message):
        build()
