"""NetworkPlugin wire contract, v1alpha1 (generated from ``networkplugin.proto``).

``pb`` holds the messages and enums, ``pb_grpc`` the service stub, servicer base class
and ``add_NetworkPluginServicer_to_server``. Regenerate with
``uv run python scripts/gen_proto.py``.
"""

from . import networkplugin_pb2, networkplugin_pb2_grpc
from . import networkplugin_pb2 as pb
from . import networkplugin_pb2_grpc as pb_grpc

__all__ = ["networkplugin_pb2", "networkplugin_pb2_grpc", "pb", "pb_grpc"]
