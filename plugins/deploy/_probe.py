"""The pod's readiness probe: the standard gRPC health service of each socket.

Every plugin socket and the coordinator's serve ``grpc.health.v1.Health`` without a
token (docs/observability.md). A kubelet ``grpc`` probe dials a TCP port of the pod, and
these are Unix sockets, so the DaemonSet runs this as an ``exec`` probe instead
(``python -m plugins.deploy probe SOCKET...``): ready when every socket says
``SERVING`` (recovery done, the journal intact and writable).
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

__all__ = ["not_serving"]


def not_serving(sockets: Sequence[str], timeout_s: float) -> list[str]:
    """One line per socket that is not ``SERVING`` (empty: every one is)."""
    problems = []
    for socket in sockets:
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            try:
                answer = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
            except grpc.RpcError as exc:
                problems.append(f"{socket}: {exc.code().name}: {exc.details()}")
                continue
        if answer.status != health_pb2.HealthCheckResponse.SERVING:
            status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
            problems.append(f"{socket}: {status}")
    return problems
