"""The standard gRPC health service on every plugin socket, probed as kubelet would.

Real service processes, real Unix sockets, a plain ``grpc.health.v1`` client with no
token: SERVING per endpoint once recovery is done; NOT_SERVING while the journal is
damaged or lost (and the NetworkPlugin methods still refuse without the token);
garbage metadata is answered with the status and nothing else.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fakekernel.client import FakeKernelProcess
from labs import PROJECT_SERVICES, ServiceProcess
from plugins.api.networkplugin.v1alpha1 import pb, pb_grpc

from ..journal_damage import flip_first
from ..runner.test_journal_loss_service import NEEDLE, WHOLE_JOURNAL, ToyDeployment

SERVICE = "networkplugin.v1alpha1.NetworkPlugin"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
TIMEOUT_S = 30


def check(socket: Path, service: str = "", metadata: Sequence[tuple[str, str | bytes]] = ()) -> int:
    """One health Check over the socket, as grpc_health_probe makes it (no token)."""
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = stub.Check(
            health_pb2.HealthCheckRequest(service=service),
            timeout=TIMEOUT_S,
            metadata=tuple(metadata),
        )
    assert [field.name for field, _ in response.ListFields()] in ([], ["status"])
    return int(response.status)


def statuses(socket: Path) -> dict[str, int]:
    return {name: check(socket, name) for name in ("", SERVICE)}


@pytest.fixture(scope="module")
def links() -> Iterator[ServiceProcess]:
    """networkplugin-links (three sockets) over a fake kernel process, started once:
    the tests that use it only probe."""
    short = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp"))
    spec = next(s for s in PROJECT_SERVICES if s.name == "networkplugin-links")
    try:
        with FakeKernelProcess(short / "kernel.sock"):
            service = ServiceProcess(
                spec.name,
                spec.command,
                short / "links",
                short / "sock",
                f"kernel+unix://{short / 'kernel.sock'}",
                spec.sockets,
            )
            service.start()
            try:
                yield service
            finally:
                service.kill()
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[ToyDeployment]:
    lab = ToyDeployment(tmp_path)
    try:
        yield lab
    finally:
        lab.close()


def test_every_endpoint_is_serving_once_recovered_without_a_token(
    links: ServiceProcess,
) -> None:
    assert len(links.sockets) == 3
    for socket in links.sockets:
        assert statuses(links.socket_dir / socket) == {"": SERVING, SERVICE: SERVING}, socket


def test_an_unknown_service_name_is_not_found(links: ServiceProcess) -> None:
    with pytest.raises(grpc.RpcError) as info:
        check(links.socket_dir / links.sockets[0], "grpc.reflection.v1.ServerReflection")
    assert info.value.code() is grpc.StatusCode.NOT_FOUND
    assert info.value.details() == "unknown service"


def test_watch_is_refused_so_no_stream_holds_a_worker(links: ServiceProcess) -> None:
    with grpc.insecure_channel(f"unix://{links.socket_dir / links.sockets[0]}") as channel:
        stream = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT_S
        )
        with pytest.raises(grpc.RpcError) as info:
            next(iter(stream))
    assert info.value.code() is grpc.StatusCode.UNIMPLEMENTED


GARBAGE: dict[str, list[tuple[str, str | bytes]]] = {
    "wrong token": [("authorization", "Bearer not-the-token")],
    "two tokens": [("authorization", "Bearer a"), ("authorization", "Bearer b")],
    "no scheme": [("authorization", "x" * 4000)],
    "binary": [("garbage-bin", bytes(range(256)))],
    "another scheme": [("authorization", "Basic Zm9vOmJhcg==")],
}


@pytest.mark.parametrize("metadata", list(GARBAGE))
def test_garbage_metadata_gets_the_status_and_nothing_more(
    links: ServiceProcess, metadata: str
) -> None:
    socket = links.socket_dir / links.sockets[0]
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        call = health_pb2_grpc.HealthStub(channel).Check.with_call(
            health_pb2.HealthCheckRequest(service=""),
            timeout=TIMEOUT_S,
            metadata=GARBAGE[metadata],
        )
        response, rpc = call
        assert response.status == SERVING
        # Nothing rides along: no trailing or initial metadata of ours.
        assert not [k for k, _ in rpc.trailing_metadata() or () if not k.startswith("grpc-")]
        assert not [k for k, _ in rpc.initial_metadata() or () if not k.startswith("grpc-")]
        # The token is still required for everything else, GetInfo included.
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.NetworkPluginStub(channel).GetInfo(
                pb.GetInfoRequest(), timeout=TIMEOUT_S, metadata=GARBAGE[metadata]
            )
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("damage", ["every-file", "wal+shm", "flipped-wal-frame"])
def test_a_lost_or_rolled_back_journal_is_not_serving(toy: ToyDeployment, damage: str) -> None:
    toy.acknowledge_then_sigkill()
    socket = toy.service.socket_dir / "toy.sock"
    WHOLE_JOURNAL[damage](toy)
    toy.service.start(wait_ready=False)
    assert statuses(socket) == {"": NOT_SERVING, SERVICE: NOT_SERVING}
    with toy.client() as client:
        assert not client.get_info().ready  # what the coordinator sees agrees


def test_a_damaged_record_is_not_serving_though_other_scopes_are_served(
    toy: ToyDeployment,
) -> None:
    toy.acknowledge_then_sigkill()
    socket = toy.service.socket_dir / "toy.sock"
    toy.service.start()
    assert statuses(socket) == {"": SERVING, SERVICE: SERVING}  # the same journal, intact
    toy.service.stop()  # a clean stop checkpoints: the records now live in journal.db
    flip_first(toy.state / "journal.db", NEEDLE)
    toy.service.start()
    assert statuses(socket) == {"": NOT_SERVING, SERVICE: NOT_SERVING}
    with toy.client() as client:
        assert client.get_info().ready  # the coordinator may still reach intact scopes
        assert client.inspect("op-prepare", "prep-1").found


def test_a_repaired_journal_serves_again(toy: ToyDeployment) -> None:
    """NOT_SERVING is about the journal, not a latch: restoring it brings SERVING back."""
    toy.acknowledge_then_sigkill()
    socket = toy.service.socket_dir / "toy.sock"
    toy.service.start()  # recovers the interrupted work
    toy.service.stop()
    good = (toy.state / "journal.db").read_bytes()
    flip_first(toy.state / "journal.db", NEEDLE)
    toy.service.start()
    assert check(socket) == NOT_SERVING
    toy.service.stop()
    (toy.state / "journal.db").write_bytes(good)  # the operator restores the intact copy
    toy.service.start()
    assert check(socket) == SERVING
