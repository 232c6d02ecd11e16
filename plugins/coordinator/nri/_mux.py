"""The NRI connection multiplexer (containerd/nri ``pkg/net/multiplex``), sans I/O.

One Unix stream socket carries several logical byte streams. Every frame is an 8-byte
header, the logical connection id and the payload length, both 4-byte big-endian
unsigned, followed by the payload. A frame is a chunk of its connection's byte stream,
not a message: a ttrpc message may span frames, so each connection is reassembled as a
stream (``MuxDecoder`` yields chunks; ``_ttrpc.MessageDecoder`` finds the messages).
"""

from __future__ import annotations

import struct
from typing import Final


class FrameError(ValueError):
    """Bytes from the runtime that are not the protocol's (a mux frame, a ttrpc message or
    its envelope): the connection is out of step and is dropped."""


#: The plugin's service (``nri.pkg.api.v1alpha1.Plugin``): the plugin serves, the
#: runtime calls.
PLUGIN_SERVICE_CONN: Final = 1
#: The runtime's service (``nri.pkg.api.v1alpha1.Runtime``): the runtime serves, the
#: plugin calls (RegisterPlugin).
RUNTIME_SERVICE_CONN: Final = 2

MUX_HEADER: Final = struct.Struct(">II")
#: Upstream never writes a larger frame: one ttrpc header plus ttrpc's largest message.
MAX_FRAME_PAYLOAD: Final = 10 + (4 << 20)


def encode_frames(conn_id: int, data: bytes) -> bytes:
    """``data`` for logical connection ``conn_id`` as frames of at most MAX_FRAME_PAYLOAD."""
    if not 0 < conn_id <= 0xFFFFFFFF:
        raise ValueError(f"mux connection id {conn_id} is not in 1..2^32-1 (0 is reserved)")
    if not data:
        raise ValueError("refusing to write an empty mux frame")
    out = bytearray()
    for start in range(0, len(data), MAX_FRAME_PAYLOAD):
        chunk = data[start : start + MAX_FRAME_PAYLOAD]
        out += MUX_HEADER.pack(conn_id, len(chunk))
        out += chunk
    return bytes(out)


class MuxDecoder:
    """Splits the trunk's bytes into (connection id, chunk) frames as they arrive."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    @property
    def pending(self) -> int:
        """Bytes received that do not yet make a whole frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Every frame completed by ``data``, in order.

        A frame longer than MAX_FRAME_PAYLOAD is a FrameError (no peer of the protocol
        writes one; it means the stream is not NRI's or is out of step); the decoder is
        then unusable, the connection has to go.
        """
        self._buffer += data
        frames: list[tuple[int, bytes]] = []
        offset = 0
        while len(self._buffer) - offset >= MUX_HEADER.size:
            conn_id, length = MUX_HEADER.unpack_from(self._buffer, offset)
            if length > MAX_FRAME_PAYLOAD:
                raise FrameError(
                    f"mux frame for connection {conn_id} declares {length} bytes, more than "
                    f"the protocol's {MAX_FRAME_PAYLOAD}"
                )
            end = offset + MUX_HEADER.size + length
            if end > len(self._buffer):
                break
            frames.append((conn_id, bytes(self._buffer[offset + MUX_HEADER.size : end])))
            offset = end
        del self._buffer[:offset]
        return frames
