"""The gRPC host over real Unix sockets, with a recording fake in place of the runner.

The fake ``EndpointService`` stands in for the runner (tested elsewhere); the thing
under test is the host: identity binding, socket hygiene, authentication, readiness,
status mapping and graceful shutdown.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from plugins.api.networkplugin.v1alpha1 import pb, pb_grpc
from plugins.sdk import (
    Aborted,
    AlreadyExists,
    CleanupRequest,
    CleanupResponse,
    CleanupStatus,
    Code,
    ConfigError,
    ConnectRequest,
    ConnectResponse,
    EffectState,
    EffectStatus,
    EndpointInfo,
    FailedPrecondition,
    Hook,
    InspectResponse,
    InvalidArgument,
    NetworkPluginError,
    NotFound,
    OperationEnvelope,
    OperationState,
    PlanError,
    PreparedState,
    PrepareRequest,
    PrepareResponse,
    PrerequisiteError,
    RegistrationError,
    ResourceHandle,
    Unauthenticated,
    Unavailable,
    WrongStepKind,
)
from plugins.sdk.host import (
    EndpointService,
    Host,
    PluginCallError,
    PluginClient,
    read_token,
    status_for,
)

TOKEN = "s3cr3t-token"
WAIT = 10.0  # upper bound for every condition wait; never a sleep

# ----------------------------------------------------------------------------- the fake


def _envelope(hook: Hook, scope: str = "scope-1") -> OperationEnvelope:
    return OperationEnvelope("op-1", hook, scope, "step-1", 1, 1, "trace")


HANDLE = ResourceHandle(
    "h1", "KernelInterface/v1", "att-1", "vlan0", "att-1", "boot", "vf0", '{"ifName":"net1"}'
)
PREPARE = PrepareRequest(_envelope(Hook.NODE_PREPARE), None, '{"vlan": 10}')
CONNECT = ConnectRequest(
    _envelope(Hook.CONNECT_NETWORK),
    None,
    "{}",
    inputs={"parent": (HANDLE,)},
    interface_names={"interface": "net1"},
)
REMOVE = CleanupRequest(_envelope(Hook.REMOVE_NETWORK), target_operation_id="op-0")
UNPREPARE = CleanupRequest(_envelope(Hook.NODE_UNPREPARE))
PREPARED = PrepareResponse(PreparedState("vlan0", "vlan", "scope-1", (HANDLE,)), ("cdi/x=1",))
CONNECTED = ConnectResponse(outputs={"interface": (HANDLE,)})
CLEANED = CleanupResponse(
    CleanupStatus.CLEANED, "ok", (EffectStatus("e1", "linux/create-vlan/v1", EffectState.UNDONE),)
)
INSPECTED = InspectResponse(
    found=True,
    operation_id="op-1",
    hook="ConnectNetwork",
    scope="scope-1",
    state=OperationState.SUCCEEDED,
    generation=1,
    semantic_digest="sha256:abc",
)


@dataclass
class FakeService:
    """Records every call; can fail, block, or report not-ready."""

    name: str
    ready: bool = True
    error: BaseException | None = None
    response: Any = None
    block: bool = False
    calls: list[tuple[str, Any]] = field(default_factory=list)
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    asked_while_not_ready: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hook_calls(self) -> list[tuple[str, Any]]:
        with self.lock:
            return [c for c in self.calls if c[0] != "info"]

    def _record(self, method: str, arg: Any, default: Any) -> Any:
        with self.lock:
            self.calls.append((method, arg))
        if self.block:
            self.entered.set()
            assert self.release.wait(WAIT), "test never released the blocked call"
        if self.error is not None:
            raise self.error
        return self.response if self.response is not None else default

    def info(self) -> EndpointInfo:
        with self.lock:
            self.calls.append(("info", None))
            ready = self.ready
        if not ready:
            self.asked_while_not_ready.set()
        return EndpointInfo(
            plugin_name=self.name,
            contract_version="v1alpha1",
            step_kinds=("Allocation",),
            contract_digest=f"sha256:{self.name}-contract",
            artifact_digest="sha256:links-artifact",
            state_namespace=f"{self.name}/v1alpha1",
            ready=ready,
            descriptor_json=json.dumps({"name": self.name}),
        )

    def node_prepare(self, req: PrepareRequest) -> PrepareResponse:
        return self._record("node_prepare", req, PREPARED)  # type: ignore[no-any-return]

    def connect_network(self, req: ConnectRequest) -> ConnectResponse:
        return self._record("connect_network", req, CONNECTED)  # type: ignore[no-any-return]

    def remove_network(self, req: CleanupRequest) -> CleanupResponse:
        return self._record("remove_network", req, CLEANED)  # type: ignore[no-any-return]

    def node_unprepare(self, req: CleanupRequest) -> CleanupResponse:
        return self._record("node_unprepare", req, CLEANED)  # type: ignore[no-any-return]

    def inspect(self, operation_id: str, scope: str) -> InspectResponse:
        return self._record("inspect", (operation_id, scope), INSPECTED)  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # A short base keeps socket paths far below the 107-byte AF_UNIX limit.
    base = Path(tempfile.mkdtemp(prefix="nph-"))
    try:
        yield base / "run"
    finally:
        shutil.rmtree(base, ignore_errors=True)


class Harness:
    def __init__(self, sock_dir: Path) -> None:
        self.dir = sock_dir
        self.hosts: list[Host] = []
        self.clients: list[PluginClient] = []
        self.fakes: list[FakeService] = []

    def host(self, *names: str, directory: Path | None = None) -> tuple[Host, list[FakeService]]:
        fakes = [FakeService(n.removesuffix(".sock")) for n in names]
        host = Host(directory or self.dir, TOKEN)
        self.hosts.append(host)
        self.fakes.extend(fakes)
        host.start([(n, f) for n, f in zip(names, fakes, strict=True)])
        return host, fakes

    def client(self, name: str, token: str = TOKEN, timeout: float = WAIT) -> PluginClient:
        c = PluginClient(self.dir / name, token, timeout=timeout)
        self.clients.append(c)
        return c

    def close(self) -> None:
        for f in self.fakes:
            f.release.set()
        for c in self.clients:
            c.close()
        for h in self.hosts:
            h.stop(None)


@pytest.fixture
def harness(sock_dir: Path) -> Iterator[Harness]:
    h = Harness(sock_dir)
    try:
        yield h
    finally:
        h.close()


@contextlib.contextmanager
def raw_stub(path: Path) -> Iterator[pb_grpc.NetworkPluginStub]:
    channel = grpc.insecure_channel(f"unix://{path}", options=[("grpc.enable_retries", 0)])
    try:
        yield pb_grpc.NetworkPluginStub(channel)
    finally:
        channel.close()


def call_code(fn: Callable[[], object]) -> PluginCallError:
    with pytest.raises(PluginCallError) as info:
        fn()
    return info.value


def rpc_error(fn: Callable[[], object]) -> grpc.Call:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    err = info.value
    assert isinstance(err, grpc.Call)
    return err


AUTH = (("authorization", f"Bearer {TOKEN}"),)

# ----------------------------------------------------------------------------- identity


def test_each_socket_answers_with_its_own_identity(harness: Harness) -> None:
    _, (vlan, ipvlan) = harness.host("vlan.sock", "ipvlan.sock")
    info_vlan = harness.client("vlan.sock").get_info()
    info_ipvlan = harness.client("ipvlan.sock").get_info()
    assert info_vlan.plugin_name == "vlan"
    assert info_vlan.contract_digest == "sha256:vlan-contract"
    assert info_ipvlan.plugin_name == "ipvlan"
    assert info_ipvlan.contract_digest == "sha256:ipvlan-contract"
    assert info_vlan.artifact_digest == info_ipvlan.artifact_digest

    harness.client("vlan.sock").node_prepare(PREPARE)
    assert [c[0] for c in vlan.hook_calls()] == ["node_prepare"]
    assert ipvlan.hook_calls() == []


def test_every_rpc_carries_sdk_values_both_ways(harness: Harness) -> None:
    _, (fake,) = harness.host("vlan.sock")
    client = harness.client("vlan.sock")
    assert client.node_prepare(PREPARE) == PREPARED
    assert client.connect_network(CONNECT) == CONNECTED
    assert client.remove_network(REMOVE) == CLEANED
    assert client.node_unprepare(UNPREPARE) == CLEANED
    assert client.inspect("op-1", "scope-1") == INSPECTED
    assert fake.hook_calls() == [
        ("node_prepare", PREPARE),
        ("connect_network", CONNECT),
        ("remove_network", REMOVE),
        ("node_unprepare", UNPREPARE),
        ("inspect", ("op-1", "scope-1")),
    ]


# ----------------------------------------------------------------------------- file modes


def test_socket_dir_is_0700_and_sockets_0600(
    harness: Harness, sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The umask is process-wide: another thread creating a file while a socket is bound
    # would get a changed one. Binding must not touch it at all.
    def no_umask(mask: int) -> int:
        raise AssertionError(f"os.umask({mask:#o}) called while binding")

    monkeypatch.setattr(os, "umask", no_umask)
    host, _ = harness.host("vlan.sock", "macvlan.sock")
    monkeypatch.undo()
    st = os.lstat(sock_dir)
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o700
    for name in ("vlan.sock", "macvlan.sock"):
        sst = os.lstat(sock_dir / name)
        assert stat.S_ISSOCK(sst.st_mode)
        assert stat.S_IMODE(sst.st_mode) == 0o600
        assert sst.st_uid == os.geteuid()
    assert dict(host.socket_paths) == {n: sock_dir / n for n in ("vlan.sock", "macvlan.sock")}
    assert sorted(os.listdir(sock_dir)) == ["macvlan.sock", "vlan.sock"], "no staging leftovers"


def test_existing_dir_with_loose_mode_is_refused(harness: Harness, sock_dir: Path) -> None:
    sock_dir.mkdir(mode=0o755)
    os.chmod(sock_dir, 0o755)
    with pytest.raises(RegistrationError, match="0755"):
        harness.host("vlan.sock")
    assert list(sock_dir.iterdir()) == []


def test_existing_strict_dir_is_reused(harness: Harness, sock_dir: Path) -> None:
    sock_dir.mkdir(mode=0o700)
    harness.host("vlan.sock")
    assert harness.client("vlan.sock").get_info().plugin_name == "vlan"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_existing_dir_of_another_owner_is_refused(harness: Harness, sock_dir: Path) -> None:
    sock_dir.mkdir(mode=0o700)
    os.chown(sock_dir, 65534, 65534)
    with pytest.raises(RegistrationError, match="owned by uid 65534"):
        harness.host("vlan.sock")


def test_socket_dir_that_is_a_symlink_is_refused(harness: Harness, sock_dir: Path) -> None:
    real = sock_dir.parent / "real"
    real.mkdir(mode=0o700)
    sock_dir.symlink_to(real)
    with pytest.raises(RegistrationError, match="not a directory"):
        harness.host("vlan.sock")


# ----------------------------------------------------------------------------- authentication


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        (("authorization", "Bearer wrong-token"),),
        (("authorization", f"Basic {TOKEN}"),),
        (("authorization", TOKEN),),
        (("authorization", "Bearer"),),
        (("authorization", f"Bearer {TOKEN}x"),),
        (("authorization", f"Bearer  {TOKEN}"),),
        (("authorization", f"Bearer {TOKEN}"), ("authorization", f"Bearer {TOKEN}")),
        (("x-token", TOKEN),),
    ],
    ids=[
        "missing",
        "wrong-token",
        "wrong-scheme",
        "no-scheme",
        "empty",
        "suffix",
        "double-space",
        "twice",
        "other-key",
    ],
)
def test_unauthenticated_calls_never_reach_the_service(
    harness: Harness, sock_dir: Path, metadata: Any
) -> None:
    _, (fake,) = harness.host("vlan.sock")
    prepare = pb.NodePrepareRequest(
        envelope=pb.OperationEnvelope(
            operation_id="op", hook=pb.NODE_PREPARE, scope="s", step="x", generation=1
        )
    )
    with raw_stub(sock_dir / "vlan.sock") as stub:
        calls: list[Callable[[], object]] = [
            lambda: stub.GetInfo(pb.GetInfoRequest(), metadata=metadata, timeout=WAIT),
            lambda: stub.NodePrepare(prepare, metadata=metadata, timeout=WAIT),
            lambda: stub.InspectOperation(
                pb.InspectOperationRequest(operation_id="op", scope="s"),
                metadata=metadata,
                timeout=WAIT,
            ),
        ]
        for call in calls:
            err = rpc_error(call)
            assert err.code() is grpc.StatusCode.UNAUTHENTICATED
    assert fake.calls == [], "the service must not be called, not even info()"


def test_bearer_scheme_is_case_insensitive(harness: Harness, sock_dir: Path) -> None:
    harness.host("vlan.sock")
    with raw_stub(sock_dir / "vlan.sock") as stub:
        resp = stub.GetInfo(
            pb.GetInfoRequest(), metadata=(("authorization", f"bearer {TOKEN}"),), timeout=WAIT
        )
    assert resp.plugin_name == "vlan"


def test_client_with_wrong_token_gets_unauthenticated(harness: Harness) -> None:
    _, (fake,) = harness.host("vlan.sock")
    client = harness.client("vlan.sock", token="not-it")
    assert call_code(client.get_info).code == "UNAUTHENTICATED"
    assert call_code(lambda: client.node_prepare(PREPARE)).code == "UNAUTHENTICATED"
    assert call_code(lambda: client.wait_ready(WAIT)).code == "UNAUTHENTICATED"
    assert fake.calls == []


@pytest.mark.parametrize("token", ["", "has space", "tab\there", "caf\u00e9"])
def test_host_rejects_unusable_tokens(sock_dir: Path, token: str) -> None:
    with pytest.raises(RegistrationError, match="token"):
        Host(sock_dir, token)


# ----------------------------------------------------------------------------- status codes

ERRORS: list[tuple[BaseException, str]] = [
    (InvalidArgument("bad request"), "INVALID_ARGUMENT"),
    (ConfigError("$.vlan", "range", "out of range"), "INVALID_ARGUMENT"),
    (FailedPrecondition("not now"), "FAILED_PRECONDITION"),
    (WrongStepKind("Operation steps have no NodePrepare"), "FAILED_PRECONDITION"),
    (PrerequisiteError("netns", "namespace moved"), "FAILED_PRECONDITION"),
    (Unauthenticated("who are you"), "UNAUTHENTICATED"),
    (Aborted("fenced by generation 2"), "ABORTED"),
    (AlreadyExists("op-1 reused"), "ALREADY_EXISTS"),
    (Unavailable("namespace unavailable"), "UNAVAILABLE"),
    (NotFound("no such thing"), "NOT_FOUND"),
    (PlanError(["effect e1 undeclared"]), "INTERNAL"),
    (RegistrationError("broken"), "INTERNAL"),
    (NetworkPluginError("generic"), "INTERNAL"),
]


INTERNAL_REASON = "internal error; see the plugin log"
"""What a peer reads of any INTERNAL failure: one stable sentence, never its details."""


@pytest.mark.parametrize(
    ("error", "code"), ERRORS, ids=[f"{type(e).__name__}-{c}" for e, c in ERRORS]
)
def test_sdk_errors_map_to_their_codes(harness: Harness, error: BaseException, code: str) -> None:
    _, (fake,) = harness.host("vlan.sock")
    fake.error = error
    client = harness.client("vlan.sock")
    err = call_code(lambda: client.connect_network(CONNECT))
    assert err.code == code
    assert isinstance(error, NetworkPluginError)
    if code == "INTERNAL":  # a bug inside: the peer gets the stable reason, the log the rest
        assert err.message == INTERNAL_REASON
    else:
        assert error.message in err.message
    assert [c[0] for c in fake.hook_calls()] == ["connect_network"]


@pytest.mark.parametrize("code", list(Code))
def test_status_for_covers_every_code(code: Code) -> None:
    class Err(NetworkPluginError):
        pass

    Err.code = code
    status, message = status_for(Err("msg"))
    assert status.name == code.name
    assert message == (INTERNAL_REASON if code is Code.INTERNAL else "msg")


@pytest.mark.parametrize(
    "error",
    [PlanError(["effect e1 undeclared at /opt/secret/plan.py"]), RegistrationError("/etc/x: bad")],
    ids=["PlanError", "RegistrationError"],
)
def test_an_internal_sdk_error_is_logged_not_sent(
    harness: Harness, caplog: pytest.LogCaptureFixture, error: NetworkPluginError
) -> None:
    _, (fake,) = harness.host("vlan.sock")
    fake.error = error
    with caplog.at_level(logging.ERROR, logger="plugins.sdk.host"):
        err = call_code(lambda: harness.client("vlan.sock").connect_network(CONNECT))
    assert (err.code, err.message) == ("INTERNAL", INTERNAL_REASON)
    assert any(error.message in r.getMessage() for r in caplog.records), caplog.text


def test_unexpected_exceptions_are_internal_and_logged(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    _, (fake,) = harness.host("vlan.sock")
    fake.error = KeyError("secret internals")
    client = harness.client("vlan.sock")
    with caplog.at_level(logging.ERROR, logger="plugins.sdk.host"):
        err = call_code(lambda: client.remove_network(REMOVE))
    assert err.code == "INTERNAL"
    assert "secret internals" not in err.message
    assert any(r.exc_info and r.exc_info[1] is fake.error for r in caplog.records)
    assert status_for(ValueError("x"))[0] is grpc.StatusCode.INTERNAL


def test_unencodable_response_is_internal_with_a_stable_reason(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    _, (fake,) = harness.host("vlan.sock")
    bad = ResourceHandle("h", "KernelInterface/v1", "", "", "", "", "", "[]")
    fake.response = ConnectResponse(outputs={"interface": (bad,)})
    with caplog.at_level(logging.ERROR, logger="plugins.sdk.host"):
        err = call_code(lambda: harness.client("vlan.sock").connect_network(CONNECT))
    # The conversion's text is the plugin's internals: logged, not sent.
    assert (err.code, err.message) == ("INTERNAL", INTERNAL_REASON)
    assert "outputs[interface][0].description_json" in caplog.text


# ----------------------------------------------------------------------------- conversion errors


def _prepare_msg(**envelope: Any) -> pb.NodePrepareRequest:
    fields: dict[str, Any] = {
        "operation_id": "op-1",
        "hook": pb.NODE_PREPARE,
        "scope": "prep-1",
        "step": "vlan0",
        "generation": 1,
    }
    fields.update(envelope)
    return pb.NodePrepareRequest(envelope=pb.OperationEnvelope(**fields))


@pytest.mark.parametrize(
    ("message", "field_path"),
    [
        (_prepare_msg(hook=pb.CONNECT_NETWORK), "envelope.hook"),
        (_prepare_msg(hook=pb.HOOK_UNSPECIFIED), "envelope.hook"),
        (_prepare_msg(operation_id=""), "envelope.operation_id"),
        (_prepare_msg(scope="a/b"), "envelope.scope"),
        (_prepare_msg(step="x" * 254), "envelope.step"),
        (_prepare_msg(generation=0), "envelope.generation"),
        (pb.NodePrepareRequest(), "envelope"),
    ],
)
def test_envelope_errors_reach_the_client_as_invalid_argument(
    harness: Harness, sock_dir: Path, message: pb.NodePrepareRequest, field_path: str
) -> None:
    _, (fake,) = harness.host("vlan.sock")
    with raw_stub(sock_dir / "vlan.sock") as stub:
        err = rpc_error(lambda: stub.NodePrepare(message, metadata=AUTH, timeout=WAIT))
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert err.details().startswith(f"{field_path}: ")
    assert fake.hook_calls() == []


def test_payload_errors_reach_the_client_as_invalid_argument(
    harness: Harness, sock_dir: Path
) -> None:
    _, (fake,) = harness.host("bond.sock")
    env = pb.OperationEnvelope(
        operation_id="op-1", hook=pb.CONNECT_NETWORK, scope="att-1", step="bond0", generation=1
    )
    good = pb.ResourceHandle(id="a", description_json="{}")
    bad = pb.ResourceHandle(id="b", description_json="[1, 2]")
    connect = pb.ConnectNetworkRequest(
        envelope=env, inputs=[pb.InputPort(port="members", handles=[good, bad])]
    )
    alloc = pb.ConnectNetworkRequest(
        envelope=env, allocation=pb.AllocationBinding(sharing=pb.Sharing.ValueType(7))
    )
    with raw_stub(sock_dir / "bond.sock") as stub:
        for msg, field_path in (
            (connect, "inputs[members][1].description_json"),
            (alloc, "allocation.sharing"),
        ):
            err = rpc_error(lambda m=msg: stub.ConnectNetwork(m, metadata=AUTH, timeout=WAIT))
            assert err.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert err.details().startswith(f"{field_path}: ")
    assert fake.hook_calls() == []


def test_client_validates_before_sending(harness: Harness) -> None:
    _, (fake,) = harness.host("vlan.sock")
    client = harness.client("vlan.sock")
    wrong_hook = PrepareRequest(_envelope(Hook.CONNECT_NETWORK), None, "{}")
    with pytest.raises(InvalidArgument, match=r"^envelope\.hook: "):
        client.node_prepare(wrong_hook)
    with pytest.raises(InvalidArgument, match=r"^scope: "):
        client.inspect("op-1", "not a scope")
    assert fake.calls == []


# ----------------------------------------------------------------------------- readiness


def test_not_ready_refuses_work_without_calling_the_service(harness: Harness) -> None:
    _, (fake,) = harness.host("vlan.sock")
    fake.ready = False
    client = harness.client("vlan.sock")
    info = client.get_info()
    assert info.ready is False
    assert info.plugin_name == "vlan"
    for call in (
        lambda: client.node_prepare(PREPARE),
        lambda: client.connect_network(CONNECT),
        lambda: client.remove_network(REMOVE),
        lambda: client.node_unprepare(UNPREPARE),
        lambda: client.inspect("op-1", "scope-1"),
    ):
        err = call_code(call)
        assert err.code == "UNAVAILABLE"
        assert "recovering" in err.message
    assert fake.hook_calls() == []

    fake.ready = True  # recovery finished: the same socket now admits work
    assert client.node_prepare(PREPARE) == PREPARED


def test_wait_ready_returns_once_recovery_finishes(harness: Harness) -> None:
    _, (fake,) = harness.host("vlan.sock")
    fake.ready = False
    client = harness.client("vlan.sock")

    def recover() -> None:
        assert fake.asked_while_not_ready.wait(WAIT)
        with fake.lock:
            fake.ready = True

    with ThreadPoolExecutor(1) as pool:
        flipped = pool.submit(recover)
        info = client.wait_ready(WAIT)
        flipped.result(WAIT)
    assert info.ready is True
    assert info.plugin_name == "vlan"


def test_wait_ready_gives_up_at_its_deadline(harness: Harness) -> None:
    _, (fake,) = harness.host("vlan.sock")
    fake.ready = False
    err = call_code(lambda: harness.client("vlan.sock").wait_ready(0.3))
    assert err.code == "DEADLINE_EXCEEDED"
    assert "ready=false" in err.message


def test_wait_ready_waits_for_the_socket_to_appear(harness: Harness) -> None:
    client = harness.client("vlan.sock")
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(client.wait_ready, WAIT)
        harness.host("vlan.sock")
        assert waiting.result(WAIT + 5).plugin_name == "vlan"


def test_calls_fail_fast_without_a_server(harness: Harness) -> None:
    assert call_code(harness.client("vlan.sock").get_info).code == "UNAVAILABLE"


# ----------------------------------------------------------------------------- endpoint sets


@pytest.mark.parametrize(
    ("endpoints", "match"),
    [
        ([("vlan.sock", "V"), ("vlan.sock", "V")], "duplicate socket name 'vlan.sock'"),
        ([("vlan.sock", "V"), ("../x.sock", "V")], r"socket name '\.\./x\.sock'"),
        ([("vlan.sock", "V"), ("sub/x.sock", "V")], "socket name 'sub/x.sock'"),
        ([("vlan.sock", "V"), ("Vlan.sock", "V")], "socket name 'Vlan.sock'"),
        ([("vlan.sock", "V"), ("vlan", "V")], "socket name 'vlan'"),
        ([("vlan.sock", "V"), (".sock", "V")], "socket name '.sock'"),
        ([("vlan.sock", "V"), ("x.sock", "not-a-service")], "does not implement"),
        ([], "no endpoints"),
    ],
)
def test_invalid_endpoint_sets_fail_start_and_create_no_socket(
    sock_dir: Path, endpoints: list[tuple[str, Any]], match: str
) -> None:
    resolved = [(n, FakeService(n) if s == "V" else s) for n, s in endpoints]
    host = Host(sock_dir, TOKEN)
    with pytest.raises(RegistrationError, match=match):
        host.start(resolved)
    assert not sock_dir.exists() or list(sock_dir.iterdir()) == []
    assert not (sock_dir.parent / "x.sock").exists()
    host.stop(None)


def test_socket_path_length_is_checked(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    with pytest.raises(RegistrationError, match="exceeds 107 bytes"):
        Host(deep, TOKEN).start([("vlan.sock", FakeService("vlan"))])
    assert not deep.exists()


def test_fake_satisfies_the_protocol() -> None:
    assert isinstance(FakeService("vlan"), EndpointService)


# ----------------------------------------------------------------------------- stale/live sockets


def test_live_socket_is_refused(harness: Harness, sock_dir: Path) -> None:
    first, _ = harness.host("vlan.sock")
    inode = os.lstat(sock_dir / "vlan.sock").st_ino
    second = Host(sock_dir, TOKEN)
    with pytest.raises(RegistrationError, match=r"another service is serving .*vlan\.sock"):
        second.start([("macvlan.sock", FakeService("macvlan")), ("vlan.sock", FakeService("x"))])
    assert os.lstat(sock_dir / "vlan.sock").st_ino == inode
    assert not (sock_dir / "macvlan.sock").exists()
    assert harness.client("vlan.sock").get_info().plugin_name == "vlan"
    first.stop(1.0)


def test_foreign_listener_is_refused(harness: Harness, sock_dir: Path) -> None:
    sock_dir.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(os.fspath(sock_dir / "vlan.sock"))
        listener.listen(1)
        with pytest.raises(RegistrationError, match="another service is serving"):
            harness.host("vlan.sock")


def test_stale_socket_is_replaced(harness: Harness, sock_dir: Path) -> None:
    sock_dir.mkdir(mode=0o700)
    path = sock_dir / "vlan.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(os.fspath(path))  # leaves the file behind with nothing listening
    os.chmod(path, 0o755)
    harness.host("vlan.sock")
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert harness.client("vlan.sock").get_info().plugin_name == "vlan"


def test_non_socket_file_at_the_path_is_refused(harness: Harness, sock_dir: Path) -> None:
    sock_dir.mkdir(mode=0o700)
    (sock_dir / "vlan.sock").write_text("not a socket")
    with pytest.raises(RegistrationError, match="not a socket"):
        harness.host("vlan.sock")
    assert (sock_dir / "vlan.sock").read_text() == "not a socket"


# ----------------------------------------------------------------------------- tokens


def _token_file(directory: Path, content: str, mode: int = 0o600) -> Path:
    path = directory / "token"
    path.write_text(content)
    os.chmod(path, mode)
    return path


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_read_token_accepts_private_files(tmp_path: Path, mode: int) -> None:
    assert read_token(_token_file(tmp_path, f"  {TOKEN}\n", mode)) == TOKEN


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        (lambda d: _token_file(d, TOKEN, 0o644), "0644"),
        (lambda d: _token_file(d, TOKEN, 0o640), "0640"),
        (lambda d: _token_file(d, TOKEN, 0o604), "0604"),
        (lambda d: _token_file(d, ""), "empty"),
        (lambda d: _token_file(d, " \n\t\n"), "empty"),
        (lambda d: _token_file(d, "two words"), "whitespace"),
        (lambda d: _token_file(d, "caf\u00e9"), "ASCII"),
        (lambda d: d / "missing", "does not exist"),
        (lambda d: d, "not a regular file"),
    ],
    ids=[
        "0644",
        "0640",
        "0604",
        "empty",
        "blank",
        "inner-space",
        "non-ascii",
        "missing",
        "directory",
    ],
)
def test_read_token_rejections(tmp_path: Path, setup: Callable[[Path], Path], match: str) -> None:
    with pytest.raises(RegistrationError, match=match):
        read_token(setup(tmp_path))


def test_read_token_refuses_symlinks(tmp_path: Path) -> None:
    target = _token_file(tmp_path, TOKEN)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(RegistrationError, match="symlink"):
        read_token(link)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_read_token_refuses_other_owners(tmp_path: Path) -> None:
    path = _token_file(tmp_path, TOKEN)
    os.chown(path, 65534, 65534)
    with pytest.raises(RegistrationError, match="owned by uid 65534"):
        read_token(path)


# ----------------------------------------------------------------------------- shutdown


def test_graceful_stop_drains_in_flight_and_refuses_new_calls(
    harness: Harness, sock_dir: Path
) -> None:
    host, (fake,) = harness.host("vlan.sock")
    fake.block = True
    client = harness.client("vlan.sock")
    with ThreadPoolExecutor(2) as pool:
        in_flight = pool.submit(client.node_prepare, PREPARE)
        assert fake.entered.wait(WAIT), "the call never reached the service"
        stopping = pool.submit(host.stop, 30.0)
        assert host.wait_draining(WAIT), "stop() never closed admission"

        for c in (client, harness.client("vlan.sock")):
            # gRPC refuses a call on a draining server as UNAVAILABLE or, when the call races
            # the GOAWAY, CANCELLED; either way the service must never see it (checked next).
            code = call_code(lambda c=c: c.node_prepare(PREPARE)).code
            assert code in ("UNAVAILABLE", "CANCELLED"), code
        assert len(fake.hook_calls()) == 1
        assert not in_flight.done()
        assert not stopping.done(), "stop() must wait for the in-flight call"

        fake.release.set()
        assert in_flight.result(WAIT) == PREPARED
        stopping.result(WAIT)
    assert host.wait(0)
    assert not (sock_dir / "vlan.sock").exists()


def test_stop_removes_sockets_and_is_idempotent(harness: Harness, sock_dir: Path) -> None:
    host, _ = harness.host("vlan.sock", "ipvlan.sock")
    assert not host.wait(0)
    host.stop(1.0)
    assert host.wait(0)
    assert sorted(p.name for p in sock_dir.iterdir()) == []
    host.stop(1.0)
    with pytest.raises(RegistrationError, match="only once"):
        host.start([("vlan.sock", FakeService("vlan"))])


def test_stop_leaves_a_successors_socket_alone(harness: Harness, sock_dir: Path) -> None:
    host, _ = harness.host("vlan.sock")
    path = sock_dir / "vlan.sock"
    # Simulate a successor that took over the path while we were still running.
    path.unlink()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as successor:
        successor.bind(os.fspath(path))
        inode = os.lstat(path).st_ino
        host.stop(1.0)
        assert os.lstat(path).st_ino == inode


def test_wait_blocks_until_stopped(harness: Harness) -> None:
    host, _ = harness.host("vlan.sock")
    with ThreadPoolExecutor(1) as pool:
        waiter = pool.submit(host.wait)
        assert not host.wait(0)
        host.stop(None)
        assert waiter.result(WAIT) is True
