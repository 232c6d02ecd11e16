"""ttrpc (containerd/ttrpc), the unary part NRI uses, sans I/O.

A ttrpc message is a 10-byte header followed by its body: the body length (4-byte
big-endian, at most 4 MiB), the stream id (4-byte big-endian), the message type (1 byte:
1 request, 2 response, 3 data) and flags (1 byte, only meaningful for streaming data,
which NRI does not use). A request's body is ``ttrpc.Request`` (service, method, the
serialized call message, the caller's timeout); the response to it reuses its stream id
and carries ``ttrpc.Response`` (status, the serialized reply). Streams are opened by the
client with odd ids that only grow; the server answers each as soon as its call returns,
in any order, so calls run concurrently.

What this module does not do is I/O: it encodes and decodes, checks stream ids and
dispatches a request to a method table. The plugin (``_plugin``) owns the socket.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

import grpc
from google.protobuf.message import DecodeError

from plugins.api.ttrpc import pb

from ._mux import FrameError

TTRPC_HEADER: Final = struct.Struct(">IIBB")
MAX_MESSAGE: Final = 4 << 20


class MessageType(enum.IntEnum):
    REQUEST = 1
    RESPONSE = 2
    DATA = 3


def status_code(code: grpc.StatusCode) -> int:
    """The number a gRPC status code has on the wire (google.rpc.Code)."""
    number: int = code.value[0]
    return number


OK: Final = status_code(grpc.StatusCode.OK)


@dataclass(frozen=True)
class Message:
    stream_id: int
    type: int
    flags: int
    body: bytes


class CallError(Exception):
    """A call's failure as the peer will read it: a status code and a message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RemoteError(Exception):
    """The peer answered a call with a non-OK status."""

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__(f"{method}: status {code}: {message}")
        self.method = method
        self.code = code
        self.message = message


def encode_message(stream_id: int, kind: MessageType, body: bytes, flags: int = 0) -> bytes:
    """One ttrpc message: header and body."""
    if len(body) > MAX_MESSAGE:
        raise ValueError(f"ttrpc message of {len(body)} bytes exceeds the {MAX_MESSAGE} limit")
    return TTRPC_HEADER.pack(len(body), stream_id, kind, flags) + body


class MessageDecoder:
    """Reassembles ttrpc messages from one logical connection's byte stream."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    @property
    def pending(self) -> int:
        """Bytes received that do not yet make a whole message."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Message]:
        """Every message completed by ``data``; an oversized one is a FrameError."""
        self._buffer += data
        messages: list[Message] = []
        offset = 0
        while len(self._buffer) - offset >= TTRPC_HEADER.size:
            length, stream_id, kind, flags = TTRPC_HEADER.unpack_from(self._buffer, offset)
            if length > MAX_MESSAGE:
                raise FrameError(
                    f"ttrpc message on stream {stream_id} declares {length} bytes, more than "
                    f"the protocol's {MAX_MESSAGE}"
                )
            end = offset + TTRPC_HEADER.size + length
            if end > len(self._buffer):
                break
            body = bytes(self._buffer[offset + TTRPC_HEADER.size : end])
            messages.append(Message(stream_id, kind, flags, body))
            offset = end
        del self._buffer[:offset]
        return messages


def encode_request(
    stream_id: int, service: str, method: str, payload: bytes, timeout_nano: int = 0
) -> bytes:
    request = pb.Request(service=service, method=method, payload=payload, timeout_nano=timeout_nano)
    return encode_message(stream_id, MessageType.REQUEST, request.SerializeToString())


def encode_response(stream_id: int, payload: bytes = b"", error: CallError | None = None) -> bytes:
    response = pb.Response(payload=payload)
    if error is not None:
        response.status.code = status_code(error.code)
        response.status.message = error.message
    return encode_message(stream_id, MessageType.RESPONSE, response.SerializeToString())


_Envelope = TypeVar("_Envelope", pb.Request, pb.Response)


def _parse(kind: type[_Envelope], message: Message) -> _Envelope:
    try:
        return kind.FromString(message.body)
    except DecodeError as exc:
        raise FrameError(
            f"ttrpc message on stream {message.stream_id} is not a ttrpc.{kind.__name__}: {exc}"
        ) from exc


def parse_request(message: Message) -> pb.Request:
    """The envelope of a request message; an undecodable one is a FrameError."""
    return _parse(pb.Request, message)


def parse_response(message: Message) -> pb.Response:
    """The envelope of a response message; an undecodable one is a FrameError."""
    return _parse(pb.Response, message)


class ServerStreams:
    """The server's view of the client's stream ids: odd, and each above the last."""

    def __init__(self) -> None:
        self._last = 0

    def open(self, stream_id: int) -> CallError | None:
        """None if a request may open ``stream_id``; else the status to answer it with."""
        if stream_id % 2 != 1:
            return CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"stream id {stream_id} is even; client-initiated streams are odd",
            )
        if stream_id <= self._last:
            return CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"stream id {stream_id} does not increase (last was {self._last})",
            )
        self._last = stream_id
        return None


class ClientStreams:
    """The client's stream ids: 1, 3, 5, ... on one connection."""

    def __init__(self) -> None:
        self._next = 1

    def next(self) -> int:
        stream_id = self._next
        self._next += 2
        return stream_id


#: A method of a served service: the call's payload in, the reply's payload out. It
#: raises CallError to answer with a status.
MethodHandler = Callable[[bytes], bytes]


def dispatch(methods: Mapping[tuple[str, str], MethodHandler], request: pb.Request) -> bytes:
    """Run the method ``request`` names on its payload; UNIMPLEMENTED if there is none.

    A newer runtime reads UNIMPLEMENTED for a dedicated event call as "use StateChange".
    """
    handler = methods.get((request.service, request.method))
    if handler is None:
        raise CallError(grpc.StatusCode.UNIMPLEMENTED, f"method {request.service}/{request.method}")
    return handler(request.payload)
