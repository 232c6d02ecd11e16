"""Coordinator program wire contract, v1alpha1 (generated from ``coordinator.proto``).

``pb`` holds the messages, ``pb_grpc`` the service stub, servicer base class and
``add_CoordinatorServicer_to_server``. Regenerate with ``uv run python scripts/gen_proto.py``.
"""

from . import coordinator_pb2, coordinator_pb2_grpc
from . import coordinator_pb2 as pb
from . import coordinator_pb2_grpc as pb_grpc

__all__ = ["coordinator_pb2", "coordinator_pb2_grpc", "pb", "pb_grpc"]
