"""ttrpc's request/response envelope (generated from ``ttrpc.proto``).

``pb.Request`` and ``pb.Response`` are the bodies of ttrpc request (type 1) and response
(type 2) messages; a response's ``status`` is ``google.rpc.status_pb2.Status``.
Regenerate with ``uv run python scripts/gen_proto.py``.
"""

from . import ttrpc_pb2
from . import ttrpc_pb2 as pb

__all__ = ["pb", "ttrpc_pb2"]
