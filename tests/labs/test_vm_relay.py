"""The VM lab's host-side relay (``labs._relay.KernelRelay``): many clients onto the one
stream of the guest agent, checked here over a ``KernelAgent`` serving the kernel model
on a socket pair, so it runs on every machine (the vm tier runs it against a guest)."""

from __future__ import annotations

import json
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakekernel.client import FakeKernelClient, FakeKernelProtocolError
from fakekernel.lab import load_lab
from fakekernel.model import FakeKernelModel
from labs import DEFAULT_LAB, AgentRootKernel, FakeModelLab
from labs._relay import KernelRelay, RelayClosed
from labs.kernel_agent import KernelAgent, SessionLab
from plugins.kernel import PROTOCOL_VERSION, KernelError, LinkSpec

DEADLINE_S = 30.0


class GatedModel:
    """The kernel model, whose ``boot_id`` waits while the test holds the gate shut."""

    def __init__(self, model: FakeKernelModel) -> None:
        self.model = model
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()

    def boot_id(self) -> str:
        self.entered.set()
        assert self.gate.wait(DEADLINE_S), "the test never opened the gate"
        return self.model.boot_id()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


class Upstream:
    """A ``KernelAgent`` on one end of a socket pair (the guest's side of QEMU's socket)."""

    def __init__(self, kernel: Any) -> None:
        self.host, self.guest = socket.socketpair()
        self.sessions: list[FakeModelLab] = []
        self.agent = KernelAgent(kernel, open_lab=self.open_lab)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def open_lab(self, seed: int, lend: dict[str, str]) -> SessionLab:
        self.sessions.append(FakeModelLab(start_seed=seed))
        return self.sessions[-1]

    def _serve(self) -> None:
        with self.guest.makefile("rb") as incoming:
            self.agent.serve(incoming, self.guest.fileno())


@pytest.fixture
def model() -> FakeKernelModel:
    return load_lab(DEFAULT_LAB)


@pytest.fixture
def gated(model: FakeKernelModel) -> GatedModel:
    return GatedModel(model)


@pytest.fixture
def upstream(gated: GatedModel) -> Iterator[Upstream]:
    up = Upstream(gated)
    yield up
    gated.gate.set()
    up.guest.close()


@pytest.fixture
def relay(upstream: Upstream, tmp_path: Path) -> Iterator[KernelRelay]:
    r = KernelRelay(upstream.host, timeout=DEADLINE_S)
    r.listen(tmp_path / "relay.sock")
    yield r
    r.close()


def test_many_clients_at_once_each_get_their_own_answers(
    relay: KernelRelay, tmp_path: Path, model: FakeKernelModel
) -> None:
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            with FakeKernelClient(tmp_path / "relay.sock", timeout=DEADLINE_S) as k:
                host = k.host_namespace()
                for j in range(10):
                    made = k.create_link(host, LinkSpec(kind="dummy", name=f"r{i}d{j}"))
                    assert made.name == f"r{i}d{j}"
                    found = k.get_link(host, ifindex=made.ifindex)
                    assert found is not None
                    assert found.name == made.name
                    k.delete_link(host, made.ifindex)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert not errors, errors
    # host_namespace is forwarded until its first answer is in, then answered by the relay.
    asked = sum(method == "host_namespace" for _, method in relay.methods)
    assert 1 <= asked <= 6
    assert relay.exchanges == 6 * 10 * 3 + asked
    assert relay.wait_clients(0, DEADLINE_S), "a client's thread outlived its hang-up"
    assert not [lk for lk in model.list_links(model.host_namespace()) if lk.name[0] == "r"]


def test_a_client_dying_mid_call_does_not_wedge_the_relay(
    relay: KernelRelay, tmp_path: Path, gated: GatedModel, model: FakeKernelModel
) -> None:
    gated.gate.clear()
    dying = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dying.connect(str(tmp_path / "relay.sock"))
    dying.sendall(
        json.dumps({"v": PROTOCOL_VERSION, "id": 41, "method": "boot_id", "params": {}}).encode()
        + b"\n"
    )
    assert gated.entered.wait(DEADLINE_S), "the request never reached the agent"
    dying.close()  # hangs up while its call is in the agent
    # Another client asks meanwhile: it waits its turn, then gets its own answer.
    with FakeKernelClient(tmp_path / "relay.sock", timeout=DEADLINE_S) as other:
        gated.gate.set()
        assert other.host_namespace() == model.host_namespace()
        assert other.host_namespace() == model.host_namespace()  # a constant: asked once
        # A client dying in the middle of a request line: nothing of it is forwarded.
        partial = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        partial.connect(str(tmp_path / "relay.sock"))
        partial.sendall(b'{"id": 1, "method": "delete_li')
        partial.close()
        assert relay.wait_clients(1, DEADLINE_S)
        assert other.boot_id() == model.boot_id()
    assert relay.exchanges == 3  # the dead client's call, and the other's two
    assert list(relay.methods) == [(None, "boot_id"), (None, "host_namespace"), (None, "boot_id")]


def test_a_session_socket_reaches_only_its_session(
    relay: KernelRelay, tmp_path: Path, upstream: Upstream, model: FakeKernelModel
) -> None:
    with AgentRootKernel(tmp_path / "relay.sock", timeout=DEADLINE_S) as root:
        session = root.open_session(7, {})
        relay.listen(tmp_path / "s.sock", session=session)
        lab = upstream.sessions[-1]
        assert lab.start_seed == 7
        with FakeKernelClient(tmp_path / "s.sock", timeout=DEADLINE_S) as inside:
            inside.add_namespace("pod-x")
            assert [ns.path for ns in lab.kernel.namespaces()][-1].endswith("/pod-x")
            assert not any(ns.path.endswith("/pod-x") for ns in model.namespaces())
            # A session's client cannot name another session (or none): the relay sets it.
            raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            raw.connect(str(tmp_path / "s.sock"))
            with raw, raw.makefile("rb") as answers:
                request = {
                    "v": PROTOCOL_VERSION,
                    "id": 3,
                    "method": "namespace",
                    "params": {"name": "pod-x"},
                }
                raw.sendall(json.dumps({**request, "session": None}).encode() + b"\n")
                assert json.loads(answers.readline())["result"]["path"].endswith("/pod-x")
            relay.unlisten(tmp_path / "s.sock")
            with pytest.raises(FakeKernelProtocolError):
                inside.boot_id()  # hung up on: the session's socket is gone
        assert not (tmp_path / "s.sock").exists()
        root.close_session(session)
        with pytest.raises(FakeKernelProtocolError, match="no open session"):
            root.close_session(session)
        # Nothing but kernel calls runs in a session.
        relay.listen(tmp_path / "s2.sock", session=root.open_session(8, {}))
        with FakeKernelClient(tmp_path / "s2.sock") as inside:
            with pytest.raises(FakeKernelProtocolError, match="unknown method 'open_session'"):
                inside._call("open_session", seed=1, lend={})
            with pytest.raises(KernelError):
                inside.namespace("pod-x")  # the other session's


def test_the_guest_going_away_hangs_up_every_client(
    relay: KernelRelay, tmp_path: Path, upstream: Upstream
) -> None:
    with FakeKernelClient(tmp_path / "relay.sock", timeout=DEADLINE_S) as client:
        client.boot_id()
        upstream.guest.shutdown(socket.SHUT_RDWR)
        with pytest.raises(FakeKernelProtocolError):
            client.boot_id()
    assert relay.failure is not None
    assert relay.failure.startswith("the guest agent"), relay.failure
    assert relay.wait_clients(0, DEADLINE_S)
    assert not (tmp_path / "relay.sock").exists()
    with pytest.raises(RelayClosed, match="the guest agent"):
        relay.listen(tmp_path / "again.sock")


def test_a_stalled_agent_is_reported_once_with_why_and_a_close_is_not(
    upstream: Upstream, gated: GatedModel, tmp_path: Path
) -> None:
    """An answer later than the relay's timeout fails the stream; the lab is told why
    once (the VM lab then logs the guest's console, where the agent dumped its stacks)."""
    told: list[str] = []
    relay = KernelRelay(upstream.host, timeout=0.5, on_failure=told.append)
    relay.listen(tmp_path / "relay.sock")
    try:
        gated.gate.clear()
        with (
            FakeKernelClient(tmp_path / "relay.sock", timeout=DEADLINE_S) as client,
            pytest.raises(FakeKernelProtocolError),
        ):
            client.boot_id()
        assert gated.entered.is_set()
    finally:
        gated.gate.set()
        # The late answer reaches the relay's end and is read before it closes: the agent
        # then sees the end of its stream, not a broken pipe or a reset.
        assert select.select([upstream.host], [], [], DEADLINE_S)[0], "the agent never answered"
        assert upstream.host.recv(1 << 16).endswith(b"\n")
        relay.close()
        upstream.thread.join(DEADLINE_S)
    assert len(told) == 1, told
    assert "timed out" in told[0], told
    closed: list[str] = []
    ours, theirs = socket.socketpair()
    with theirs:
        KernelRelay(ours, timeout=DEADLINE_S, on_failure=closed.append).close()
    assert closed == []
