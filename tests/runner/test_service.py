"""The runner behind the real host: authentication, deadlines, startup validation."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from plugins.sdk import Endpoint, RegistrationError, Registry
from plugins.sdk.host import Host, PluginCallError, PluginClient
from plugins.sdk.runner import CrashPoints, Phase, PhaseKind
from plugins.sdk.service import ServiceConfig, serve
from plugins.sdk.store import Store

from . import node as n
from .node import ToyNode
from .toy import ToyKernel, ToyPlugin, toy_effects, toy_registry


class Gate(CrashPoints):
    """Blocks the first kernel create until released: a call that outlives its deadline."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def hit(self, phase: Phase | str) -> None:
        super().hit(phase)
        if (
            self.reached[-1].phase == Phase.kernel(PhaseKind.BEFORE_KERNEL_CALL, 1, "create")
            and not self.entered.is_set()
        ):
            self.entered.set()
            assert self.release.wait(30)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ToyNode, Host, Gate]]:
    gate = Gate()
    toy = ToyNode(tmp_path / "node", gate)
    host = Host(tmp_path / "sock", "secret-token")
    host.start(toy.runner.endpoints())
    yield toy, host, gate
    gate.release.set()
    host.stop(5)
    toy.close()


def test_unauthenticated_call_writes_no_journal_row(served: tuple[ToyNode, Host, Gate]) -> None:
    toy, host, _ = served
    with (
        PluginClient(host.socket_paths["toy.sock"], "wrong-token") as client,
        pytest.raises(PluginCallError) as info,
    ):
        client.connect_network(n.connect())
    assert info.value.code == "UNAUTHENTICATED"
    assert toy.operations() == 0
    assert toy.toy.mutations() == {}


def test_a_deadline_does_not_roll_back_the_operation(served: tuple[ToyNode, Host, Gate]) -> None:
    toy, host, gate = served
    gate.release.clear()
    with PluginClient(host.socket_paths["toy.sock"], "secret-token", timeout=0.5) as hasty:
        with pytest.raises(PluginCallError) as info:
            hasty.connect_network(n.connect())
        assert info.value.code == "DEADLINE_EXCEEDED"
    assert gate.entered.is_set()
    gate.release.set()
    with PluginClient(host.socket_paths["toy.sock"], "secret-token") as client:
        # The retry joins the still-running operation, then both see the same durable result.
        response = client.connect_network(n.connect())
        assert response.outputs["interface"][0].attachment_id == "att-1"
        assert client.inspect("op-connect", "").state is n.OperationState.SUCCEEDED
    assert toy.toy.mutations()["create:object:data0"] == 1


def test_an_invalid_registration_fails_startup_before_any_socket(tmp_path: Path) -> None:
    def bad_registry() -> Registry:
        registry = toy_registry()
        registry.register(Endpoint("../evil.sock", "toy/v1alpha1", ToyPlugin()))
        return registry

    token = tmp_path / "token"
    token.write_text("t")
    token.chmod(0o600)
    config = ServiceConfig(
        tmp_path / "sock", tmp_path / "state", token, f"toy://{tmp_path / 'toy.json'}"
    )
    with pytest.raises(RegistrationError, match="socket name"):
        serve(
            config,
            bad_registry,
            lambda url, crash: (toy_effects(ToyKernel(tmp_path / "toy.json")), "b"),
        )
    assert not (tmp_path / "sock").exists()
    assert not (tmp_path / "state").exists()


def test_store_is_not_opened_for_an_invalid_token_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    token.chmod(0o644)
    config = ServiceConfig(tmp_path / "sock", tmp_path / "state", token, "toy://x")
    with pytest.raises(RegistrationError, match="token"):
        serve(
            config,
            toy_registry,
            lambda url, crash: (toy_effects(ToyKernel(tmp_path / "toy.json")), "b"),
        )
    assert not (tmp_path / "state").exists()
    with Store.open(tmp_path / "state"):
        pass
