"""A typed client of the coordinator program's socket (the CLI's and the node adapters' side)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import grpc

from plugins.api.coordinator.v1alpha1 import pb, pb_grpc
from plugins.sdk import SandboxHandle
from plugins.sdk.host import poll_until_ready

from . import _wire as wire
from ._program_values import ApplyRequest, ApplyResult, CoordinatorStatus, RemoveResult

_Msg = TypeVar("_Msg")
_Out = TypeVar("_Out")


class CoordinatorCallError(Exception):
    """A call to the coordinator failed; ``code`` is the gRPC status code name
    (``FAILED_PRECONDITION``, ``INVALID_ARGUMENT``, ``UNAUTHENTICATED``, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class CoordinatorClient:
    """Calls ``networkplugin-coordinator`` over its Unix socket with a client token.

    gRPC retries are off: a caller retries an apply or a removal under the same
    attachment id, which the coordinator makes idempotent.
    """

    def __init__(self, socket_path: Path, token: str, *, timeout: float = 300.0) -> None:
        self._path = Path(socket_path).absolute()
        self._timeout = timeout
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._closed = threading.Event()
        self._channel = grpc.insecure_channel(
            f"unix://{self._path}",
            options=[
                ("grpc.enable_retries", 0),
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
                # gRPC core's minimum connect timeout despite its name (connect() to the
                # server's SETTINGS frame): at 100 ms a loaded machine's server misses it,
                # as PluginClient's did (plugins/sdk/host/_client.py).
                ("grpc.min_reconnect_backoff_ms", 20_000),
            ],
        )
        self._stub = pb_grpc.CoordinatorStub(self._channel)

    @property
    def socket_path(self) -> Path:
        return self._path

    def _call(
        self,
        method: Callable[..., _Msg],
        request: object,
        decode: Callable[[_Msg], _Out],
        *,
        timeout: float | None = None,
        wait_for_ready: bool = False,
    ) -> _Out:
        try:
            response = method(
                request,
                timeout=self._timeout if timeout is None else timeout,
                metadata=self._metadata,
                wait_for_ready=wait_for_ready,
            )
        except grpc.RpcError as exc:
            raise CoordinatorCallError(exc.code().name, exc.details() or "") from exc
        return decode(response)

    def apply(
        self, attachment: str, claim: str, topology: str, sandbox: SandboxHandle
    ) -> ApplyResult:
        request = wire.apply_request_to_pb(ApplyRequest(attachment, claim, topology, sandbox))
        return self._call(self._stub.ApplyTopology, request, wire.apply_result_from_pb)

    def remove(self, attachment: str) -> RemoveResult:
        request = pb.RemoveTopologyRequest(attachment_id=attachment)
        return self._call(self._stub.RemoveTopology, request, wire.remove_result_from_pb)

    def status(self) -> CoordinatorStatus:
        return self._call(self._stub.GetStatus, pb.GetStatusRequest(), wire.status_from_pb)

    def wait_answering(self, deadline_s: float) -> CoordinatorStatus:
        """GetStatus once the socket accepts connections, ready or not (a damaged journal)."""
        return self._call(
            self._stub.GetStatus,
            pb.GetStatusRequest(),
            wire.status_from_pb,
            timeout=deadline_s,
            wait_for_ready=True,
        )

    def wait_ready(self, deadline_s: float) -> CoordinatorStatus:
        """Poll GetStatus until the coordinator reports ready, for at most ``deadline_s`` s.

        Waits for the socket to accept connections, then re-asks with a short backoff while
        it is recovering. A damaged journal (``fault``) or any error but ``UNAVAILABLE`` is
        raised at once; ``DEADLINE_EXCEEDED`` when the deadline passes.
        """

        def ask(remaining: float) -> CoordinatorStatus | str:
            status = self._call(
                self._stub.GetStatus,
                pb.GetStatusRequest(),
                wire.status_from_pb,
                timeout=remaining,
                wait_for_ready=True,
            )
            if status.fault:
                raise CoordinatorCallError("DATA_LOSS", status.fault)
            return status if status.ready else "recovering (ready=false)"

        return poll_until_ready(
            ask,
            path=self._path,
            deadline_s=deadline_s,
            closed=self._closed,
            error=CoordinatorCallError,
        )

    def close(self) -> None:
        self._closed.set()
        self._channel.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
