"""A typed client for one plugin socket, speaking SDK values (the coordinator's side)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import grpc

from plugins.api.networkplugin.v1alpha1 import pb, pb_grpc
from plugins.sdk._errors import InvalidArgument
from plugins.sdk._requests import (
    CleanupRequest,
    CleanupResponse,
    ConnectRequest,
    ConnectResponse,
    EndpointInfo,
    InspectResponse,
    PrepareRequest,
    PrepareResponse,
)

from . import _convert as convert
from ._polling import poll_until_ready

__all__ = ["PluginCallError", "PluginClient"]

_Msg = TypeVar("_Msg")
_Out = TypeVar("_Out")

_CONNECT_TIMEOUT_MS = 20_000  # gRPC's own default; a call's deadline still bounds it


class PluginCallError(Exception):
    """An RPC to a plugin failed; ``code`` is the gRPC status code name.

    Besides the server's codes, the client itself produces ``INTERNAL`` for a
    response it cannot convert, ``DEADLINE_EXCEEDED`` when ``wait_ready`` runs out
    of time and ``CANCELLED`` when the client is closed while waiting.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class PluginClient:
    """Calls one logical plugin over its Unix socket with the coordinator's token.

    Requests are validated while converting (same rules as the server); an invalid
    request raises :class:`~plugins.sdk.InvalidArgument` and nothing is sent. Calls
    fail fast when the socket is not there (``UNAVAILABLE``); use :meth:`wait_ready`
    to wait for a plugin to come up. gRPC retries are disabled: retrying is the
    coordinator's decision, made with the same operation identity.
    """

    def __init__(self, socket_path: Path, token: str, *, timeout: float = 30.0) -> None:
        self._path = Path(socket_path).absolute()
        self._timeout = timeout
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._closed = threading.Event()
        self._channel = grpc.insecure_channel(
            f"unix://{self._path}",
            options=[
                ("grpc.enable_retries", 0),
                # A local service restarts in about a second: do not back off for minutes.
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
                # Despite its name, gRPC core's minimum connect timeout: how long one
                # attempt may take from connect() to the server's SETTINGS frame. At
                # 100 ms a busy machine's server missed it ("connection attempt timed
                # out before receiving SETTINGS frame"); a refused or missing socket
                # fails at once whatever it is, so a long one costs a restart nothing.
                ("grpc.min_reconnect_backoff_ms", _CONNECT_TIMEOUT_MS),
            ],
        )
        self._stub = pb_grpc.NetworkPluginStub(self._channel)

    @property
    def socket_path(self) -> Path:
        return self._path

    def watch_connectivity(self, callback: Callable[[grpc.ChannelConnectivity], None]) -> None:
        """Call ``callback`` with the channel's state at each change (on a gRPC thread).

        A state other than ``READY`` means the next call may reach a new process on the
        socket: the coordinator checks the peer's identity again then. Never connects by
        itself; ``close`` ends the watch.
        """
        self._channel.subscribe(callback, try_to_connect=False)

    def _call(
        self,
        rpc: str,
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
            raise PluginCallError(exc.code().name, exc.details() or "") from exc
        try:
            return decode(response)
        except InvalidArgument as exc:
            raise PluginCallError(
                "INTERNAL", f"malformed {rpc} response from {self._path}: {exc}"
            ) from exc

    def get_info(self) -> EndpointInfo:
        return self._call("GetInfo", self._stub.GetInfo, pb.GetInfoRequest(), convert.info_from_pb)

    def node_prepare(self, req: PrepareRequest) -> PrepareResponse:
        return self._call(
            "NodePrepare",
            self._stub.NodePrepare,
            convert.prepare_request_to_pb(req),
            convert.prepare_response_from_pb,
        )

    def connect_network(self, req: ConnectRequest) -> ConnectResponse:
        return self._call(
            "ConnectNetwork",
            self._stub.ConnectNetwork,
            convert.connect_request_to_pb(req),
            convert.connect_response_from_pb,
        )

    def remove_network(self, req: CleanupRequest) -> CleanupResponse:
        return self._call(
            "RemoveNetwork",
            self._stub.RemoveNetwork,
            convert.remove_request_to_pb(req),
            convert.cleanup_response_from_pb,
        )

    def node_unprepare(self, req: CleanupRequest) -> CleanupResponse:
        return self._call(
            "NodeUnprepare",
            self._stub.NodeUnprepare,
            convert.unprepare_request_to_pb(req),
            convert.cleanup_response_from_pb,
        )

    def inspect(self, operation_id: str, scope: str) -> InspectResponse:
        return self._call(
            "InspectOperation",
            self._stub.InspectOperation,
            convert.inspect_request_to_pb(operation_id, scope),
            convert.inspect_response_from_pb,
        )

    def wait_answering(self, deadline_s: float) -> EndpointInfo:
        """GetInfo once the socket accepts connections, ready or not (e.g. a damaged journal)."""
        return self._call(
            "GetInfo",
            self._stub.GetInfo,
            pb.GetInfoRequest(),
            convert.info_from_pb,
            timeout=deadline_s,
            wait_for_ready=True,
        )

    def wait_ready(self, deadline_s: float) -> EndpointInfo:
        """Poll GetInfo until the plugin reports ready, for at most ``deadline_s`` seconds.

        Waits for the socket to accept connections, then re-asks with a short backoff
        while ``ready`` is false or the server is ``UNAVAILABLE``. Any other failure
        (e.g. ``UNAUTHENTICATED``) is raised at once. Raises ``DEADLINE_EXCEEDED`` when
        the deadline passes.
        """

        def ask(remaining: float) -> EndpointInfo | str:
            info = self.wait_answering(remaining)
            return info if info.ready else f"{info.plugin_name} reports ready=false"

        return poll_until_ready(
            ask, path=self._path, deadline_s=deadline_s, closed=self._closed, error=PluginCallError
        )

    def close(self) -> None:
        self._closed.set()
        self._channel.close()

    def __enter__(self) -> PluginClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
