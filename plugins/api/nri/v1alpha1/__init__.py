"""NRI plugin protocol, v1alpha1 (generated from ``nri.proto``).

``pb`` holds the messages (package ``nri.pkg.api.v1alpha1``, field numbers of
containerd/nri). The calls travel over ttrpc, not gRPC: ``pb_grpc`` is generated for
completeness only; ``plugins.coordinator.nri`` has the transport. Regenerate with
``uv run python scripts/gen_proto.py``.
"""

from . import nri_pb2, nri_pb2_grpc
from . import nri_pb2 as pb
from . import nri_pb2_grpc as pb_grpc

__all__ = ["nri_pb2", "nri_pb2_grpc", "pb", "pb_grpc"]
