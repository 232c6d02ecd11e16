"""NRI's two wire layers, as the test kit's runtime simulator speaks them.

Written from the public definitions (containerd/nri ``pkg/net/multiplex``, containerd/ttrpc
``channel.go`` and ``PROTOCOL.md``), independently of the coordinator's NRI adapter: the
simulator and the adapter each carry their own reading of the wire, so a misreading shared
by both cannot pass the tests unnoticed.

One Unix stream connection (the *trunk*) carries two logical connections:

- the multiplexer frames the trunk as ``conn id (u32 BE) | payload length (u32 BE) |
  payload``. Connection 1 carries the plugin's service (the runtime is the ttrpc client:
  Configure, Synchronize, events), connection 2 the runtime's service (the plugin is the
  client: RegisterPlugin). Connection 0 is reserved. A writer splits a payload longer than
  one ttrpc message into several frames;
- each logical connection is a byte stream of ttrpc frames: ``data length (u32 BE) |
  stream id (u32 BE) | message type (u8) | flags (u8) | data``. A ttrpc frame may span
  multiplexer frames (the writer's buffering decides where they split), so each logical
  connection is reassembled on its own before its ttrpc frames are cut.

Pure codec, no I/O: decoders are fed bytes and return what became complete.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

MUX_HEADER = struct.Struct(">II")
TTRPC_HEADER = struct.Struct(">IIBB")

RESERVED_CONN = 0
PLUGIN_SERVICE_CONN = 1
RUNTIME_SERVICE_CONN = 2

TTRPC_MAX_DATA = 4 << 20
"""The largest ttrpc message body a peer accepts (4 MiB)."""

MUX_MAX_PAYLOAD = TTRPC_HEADER.size + TTRPC_MAX_DATA
"""The largest multiplexer payload: one whole ttrpc frame of the largest size."""

_U32_MAX = 0xFFFFFFFF


class FrameError(ValueError):
    """Bytes or a frame that the NRI wire cannot carry; the message says what and why."""


class MessageType(IntEnum):
    """ttrpc message types (the header's type byte)."""

    REQUEST = 0x1
    RESPONSE = 0x2
    DATA = 0x3


FLAG_REMOTE_CLOSED = 0x1
FLAG_REMOTE_OPEN = 0x2
FLAG_NO_DATA = 0x4


@dataclass(frozen=True)
class TtrpcFrame:
    """One ttrpc message: a unary call is a REQUEST and a RESPONSE on one odd stream id."""

    stream_id: int
    type: int
    flags: int
    data: bytes

    def __post_init__(self) -> None:
        _check_u32("stream id", self.stream_id)
        if not 0 <= self.type <= 0xFF:
            raise FrameError(f"ttrpc message type {self.type} does not fit in a byte")
        if not 0 <= self.flags <= 0xFF:
            raise FrameError(f"ttrpc flags {self.flags} do not fit in a byte")
        if len(self.data) > TTRPC_MAX_DATA:
            raise FrameError(
                f"ttrpc message of {len(self.data)} bytes exceeds the maximum of {TTRPC_MAX_DATA}"
            )


def _check_u32(what: str, value: int) -> None:
    if not 0 <= value <= _U32_MAX:
        raise FrameError(f"{what} {value} is not an unsigned 32-bit integer")


def _check_conn_id(conn_id: int) -> None:
    _check_u32("multiplexer connection id", conn_id)
    if conn_id == RESERVED_CONN:
        raise FrameError("multiplexer connection id 0 is reserved")


def encode_mux(conn_id: int, payload: bytes) -> bytes:
    """``payload`` framed for logical connection ``conn_id``: as many frames as it needs.

    An empty payload is one frame with length 0, as the upstream writer sends it.
    """
    _check_conn_id(conn_id)
    view = memoryview(payload)
    frames = []
    while True:
        chunk = view[:MUX_MAX_PAYLOAD]
        frames.append(MUX_HEADER.pack(conn_id, len(chunk)) + bytes(chunk))
        view = view[len(chunk) :]
        if not view:
            return b"".join(frames)


def encode_ttrpc(frame: TtrpcFrame) -> bytes:
    """One ttrpc frame's bytes: the 10-byte header, then the data."""
    return TTRPC_HEADER.pack(len(frame.data), frame.stream_id, frame.type, frame.flags) + frame.data


def encode(conn_id: int, frame: TtrpcFrame) -> bytes:
    """A ttrpc frame sent on a logical connection of the trunk."""
    return encode_mux(conn_id, encode_ttrpc(frame))


class MuxDecoder:
    """Cuts a trunk's bytes into ``(conn id, payload)`` frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Add trunk bytes; return every frame they completed, in order."""
        self._buffer += data
        frames: list[tuple[int, bytes]] = []
        while len(self._buffer) >= MUX_HEADER.size:
            conn_id, length = MUX_HEADER.unpack_from(self._buffer)
            if length > MUX_MAX_PAYLOAD:
                raise FrameError(
                    f"multiplexer frame of {length} bytes on connection {conn_id} exceeds "
                    f"the maximum payload of {MUX_MAX_PAYLOAD}"
                )
            end = MUX_HEADER.size + length
            if len(self._buffer) < end:
                break
            frames.append((conn_id, bytes(self._buffer[MUX_HEADER.size : end])))
            del self._buffer[:end]
        return frames

    @property
    def pending(self) -> int:
        """Bytes held that do not yet make a whole frame (nonzero at EOF: a cut frame)."""
        return len(self._buffer)


class TtrpcDecoder:
    """Cuts one logical connection's byte stream into ttrpc frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[TtrpcFrame]:
        """Add bytes of the connection; return every frame they completed, in order."""
        self._buffer += data
        frames: list[TtrpcFrame] = []
        while len(self._buffer) >= TTRPC_HEADER.size:
            length, stream_id, message_type, flags = TTRPC_HEADER.unpack_from(self._buffer)
            if length > TTRPC_MAX_DATA:
                raise FrameError(
                    f"ttrpc message of {length} bytes on stream {stream_id} exceeds the "
                    f"maximum of {TTRPC_MAX_DATA}"
                )
            end = TTRPC_HEADER.size + length
            if len(self._buffer) < end:
                break
            data = bytes(self._buffer[TTRPC_HEADER.size : end])
            frames.append(TtrpcFrame(stream_id, message_type, flags, data))
            del self._buffer[:end]
        return frames

    @property
    def pending(self) -> int:
        """Bytes held that do not yet make a whole frame."""
        return len(self._buffer)


class TrunkDecoder:
    """A trunk's bytes to ``(conn id, ttrpc frame)`` pairs, for the open connections only.

    Upstream's multiplexer drops payloads for a connection nobody opened; so does this,
    counting them in ``ignored_frames`` so that a test can see they came.
    """

    def __init__(self, conn_ids: tuple[int, ...] = (PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN)):
        for conn_id in conn_ids:
            _check_conn_id(conn_id)
        self._mux = MuxDecoder()
        self._streams = {conn_id: TtrpcDecoder() for conn_id in conn_ids}
        self.ignored_frames = 0

    def feed(self, data: bytes) -> list[tuple[int, TtrpcFrame]]:
        """Add trunk bytes; return every ttrpc frame they completed, in arrival order."""
        frames: list[tuple[int, TtrpcFrame]] = []
        for conn_id, payload in self._mux.feed(data):
            stream = self._streams.get(conn_id)
            if stream is None:
                self.ignored_frames += 1
                continue
            frames.extend((conn_id, frame) for frame in stream.feed(payload))
        return frames

    @property
    def pending(self) -> int:
        """Bytes held anywhere that do not yet make a whole frame."""
        return self._mux.pending + sum(stream.pending for stream in self._streams.values())


__all__ = [
    "FLAG_NO_DATA",
    "FLAG_REMOTE_CLOSED",
    "FLAG_REMOTE_OPEN",
    "MUX_HEADER",
    "MUX_MAX_PAYLOAD",
    "PLUGIN_SERVICE_CONN",
    "RESERVED_CONN",
    "RUNTIME_SERVICE_CONN",
    "TTRPC_HEADER",
    "TTRPC_MAX_DATA",
    "FrameError",
    "MessageType",
    "MuxDecoder",
    "TrunkDecoder",
    "TtrpcDecoder",
    "TtrpcFrame",
    "encode",
    "encode_mux",
    "encode_ttrpc",
]
