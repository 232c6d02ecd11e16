"""``KubeletPlugin`` against ``KubeletSim`` over real Unix sockets.

The simulator does what the kubelet does (plugin watcher, validation, prepare and
unprepare with a checkpoint); the plugin's ``ClaimPreparer`` is a fake that records its
calls and answers as each test tells it.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from harness.k8s.kubelet import CheckpointError, KubeletSim, PodClaim
from plugins.api.kubelet.dra.v1 import dra_pb2 as v1
from plugins.api.kubelet.dra.v1 import dra_pb2_grpc as v1_grpc
from plugins.coordinator.kubelet import (
    ClaimRef,
    DeviceHealthBoard,
    KubeletPlugin,
    PreparedDevice,
    PrepareOutcome,
)
from plugins.sdk import RegistrationError

DRIVER = "net.example.com"
DEADLINE_S = 10.0
CLAIM_A = PodClaim(DRIVER, "uid-a", "ns", "claim-a")
CLAIM_B = PodClaim(DRIVER, "uid-b", "ns", "claim-b")


@dataclass
class FakePreparer:
    """Answers every claim with one device of its own name, unless told otherwise."""

    errors: dict[str, str] = field(default_factory=dict)
    omit: set[str] = field(default_factory=set)
    raises: Exception | None = None
    prepared: list[tuple[ClaimRef, ...]] = field(default_factory=list)
    unprepared: list[tuple[ClaimRef, ...]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def prepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareOutcome]:
        with self.lock:
            self.prepared.append(tuple(claims))
        if self.raises is not None:
            raise self.raises
        return {
            c.uid: PrepareOutcome(error=self.errors[c.uid])
            if c.uid in self.errors
            else PrepareOutcome(
                devices=(
                    PreparedDevice(
                        requests=("net",),
                        pool="pool-0",
                        device=f"dev-{c.name}",
                        cdi_device_ids=(f"{DRIVER}/net={c.name}",),
                        share_id=f"share-{c.name}",
                    ),
                )
            )
            for c in claims
            if c.uid not in self.omit
        }

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        with self.lock:
            self.unprepared.append(tuple(claims))
        if self.raises is not None:
            raise self.raises
        return {c.uid: self.errors.get(c.uid, "") for c in claims if c.uid not in self.omit}


@dataclass(frozen=True)
class Node:
    root: Path

    @property
    def plugins_dir(self) -> Path:
        return self.root / "plugins"

    @property
    def registry_dir(self) -> Path:
        return self.root / "registry"

    @property
    def checkpoint(self) -> Path:
        return self.root / "dra_checkpoint"

    def plugin(self, preparer: FakePreparer, **kwargs: object) -> KubeletPlugin:
        return KubeletPlugin(DRIVER, preparer, self.plugins_dir, self.registry_dir, **kwargs)  # type: ignore[arg-type]

    def kubelet(self, **kwargs: object) -> KubeletSim:
        return KubeletSim(self.registry_dir, self.checkpoint, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def node() -> Iterator[Node]:
    """Directories with short paths: a Unix socket path holds 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="kl-", dir="/tmp") as d:
        root = Path(d)
        (root / "registry").mkdir()  # the kubelet's own, there before any plugin
        yield Node(root)


def device_of(name: str, share_id: str | None) -> tuple[str, str, tuple[str, ...], str | None]:
    return ("pool-0", f"dev-{name}", (f"{DRIVER}/net={name}",), share_id)


# -- registration ---------------------------------------------------------------------


def test_the_dra_socket_is_served_before_the_registration_socket_appears(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    published: list[str] = []
    real_link = os.link

    def recording_link(src: object, dst: object, *args: object, **kwargs: object) -> None:
        real_link(src, dst, *args, **kwargs)  # type: ignore[arg-type]
        published.append(Path(dst).name)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", recording_link)
    preparer = FakePreparer()
    with node.kubelet() as kubelet, node.plugin(preparer) as plugin:
        registration = kubelet.wait_registered(DRIVER, DEADLINE_S)
        assert plugin.wait_registered(DEADLINE_S)
    assert published == ["dra.sock", f"{DRIVER}-reg.sock"]
    assert registration.endpoint == str(node.plugins_dir / DRIVER / "dra.sock")
    assert registration.socket == node.registry_dir / f"{DRIVER}-reg.sock"
    assert registration.version == "v1.DRAPlugin"
    assert [e.registered for e in plugin.registration_events] == [True]
    assert plugin.registration_failures == 0
    # created 0750; the kubelet's registry directory is left as it was
    for created in (node.plugins_dir, node.plugins_dir / DRIVER):
        assert stat.S_IMODE(created.stat().st_mode) == 0o750


def test_stop_removes_the_registration_socket_before_the_dra_socket(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    removed: list[str] = []
    real_unlink = os.unlink

    def recording_unlink(path: object, *args: object, **kwargs: object) -> None:
        real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]
        removed.append(Path(path).name)  # type: ignore[arg-type]

    with node.kubelet() as kubelet:
        plugin = node.plugin(FakePreparer())
        with plugin:
            kubelet.wait_registered(DRIVER, DEADLINE_S)
            monkeypatch.setattr(os, "unlink", recording_unlink)
        monkeypatch.undo()
        assert [n for n in removed if n.endswith(".sock")] == [f"{DRIVER}-reg.sock", "dra.sock"]
        assert not plugin.dra_socket.exists()
        assert not plugin.registration_socket.exists()
        assert kubelet.wait_for(lambda: kubelet.deregistrations, DEADLINE_S)
        assert kubelet.registered(DRIVER) is None


def test_a_restarted_kubelet_registers_the_plugin_again(node: Node) -> None:
    with node.plugin(FakePreparer()) as plugin:
        for restart in range(3):
            with node.kubelet() as kubelet:
                kubelet.wait_registered(DRIVER, DEADLINE_S)
            assert plugin.registration_events[restart].registered
        assert [e.registered for e in plugin.registration_events] == [True, True, True]


def test_a_refused_registration_is_logged_and_counted(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="plugins.coordinator.kubelet")
    with (
        node.kubelet(reject="node is cordoned for DRA") as kubelet,
        node.plugin(FakePreparer()) as plugin,
    ):
        assert kubelet.wait_for(lambda: kubelet.rejections, DEADLINE_S)
        assert plugin.wait_for_verdicts(1, DEADLINE_S)
        assert plugin.registration_failures == 1
        assert not plugin.registered
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
        assert "node is cordoned for DRA" in errors[0].getMessage()
        assert DRIVER in errors[0].getMessage()
        # lifted: the same socket is tried again and registered
        kubelet.reject_registrations(None)
        kubelet.wait_registered(DRIVER, DEADLINE_S)
        assert plugin.wait_registered(DEADLINE_S)
        assert [e.registered for e in plugin.registration_events] == [False, True]
        assert plugin.registration_failures == 1


def test_the_watcher_ignores_dot_names_and_files_that_are_not_sockets(node: Node) -> None:
    (node.registry_dir / "notes-reg.sock").write_text("not a socket")
    (node.registry_dir / ".staging").mkdir()
    with node.plugin(FakePreparer()), node.kubelet() as kubelet:
        kubelet.wait_registered(DRIVER, DEADLINE_S)
        assert [r.driver for r in kubelet.registrations] == [DRIVER]
        assert kubelet.rejections == []


# -- prepare and unprepare --------------------------------------------------------------


@pytest.mark.parametrize(
    ("speaks", "share_id"),
    [
        (("v1.DRAPlugin", "v1beta1.DRAPlugin"), "share-claim-a"),
        (("v1beta1.DRAPlugin",), None),  # an older kubelet: no share_id on the wire
    ],
)
def test_a_claim_is_prepared_once_and_unprepared_after_its_last_pod(
    node: Node, speaks: tuple[str, ...], share_id: str | None
) -> None:
    preparer = FakePreparer()
    with node.plugin(preparer), node.kubelet(speaks=speaks) as kubelet:
        assert kubelet.wait_registered(DRIVER, DEADLINE_S).version == speaks[0]
        first = kubelet.prepare("pod-1", [CLAIM_A])["uid-a"]
        assert first.error == ""
        assert [(d.pool, d.device, d.cdi_device_ids, d.share_id) for d in first.devices] == [
            device_of("claim-a", share_id)
        ]
        assert first.devices[0].requests == ("net",)
        assert preparer.prepared == [(ClaimRef("uid-a", "ns", "claim-a"),)]
        # a second pod sharing the claim: no call, the same devices
        second = kubelet.prepare("pod-2", [CLAIM_A])["uid-a"]
        assert (second.sent, second.devices) == (False, first.devices)
        assert len(preparer.prepared) == 1
        assert kubelet.pods_of("uid-a") == {"pod-1", "pod-2"}

        assert kubelet.unprepare("pod-1", [CLAIM_A]) == {"uid-a": ""}
        assert preparer.unprepared == []  # pod-2 still uses it
        assert kubelet.unprepare("pod-2", [CLAIM_A]) == {"uid-a": ""}
        assert preparer.unprepared == [(ClaimRef("uid-a", "ns", "claim-a"),)]
        assert kubelet.pods_of("uid-a") == set()
        assert [(c.method, c.version) for c in kubelet.calls] == [
            ("NodePrepareResources", speaks[0]),
            ("NodeUnprepareResources", speaks[0]),
        ]


def test_each_claim_gets_its_own_result(node: Node) -> None:
    preparer = FakePreparer(errors={"uid-b": "no VF left on pool-0"}, omit={"uid-c"})
    claim_c = PodClaim(DRIVER, "uid-c", "ns", "claim-c")
    with node.plugin(preparer), node.kubelet() as kubelet:
        kubelet.wait_registered(DRIVER, DEADLINE_S)
        results = kubelet.prepare("pod-1", [CLAIM_A, CLAIM_B, claim_c])
        assert results["uid-a"].error == ""
        assert results["uid-b"] == type(results["uid-b"])(error="no VF left on pool-0")
        assert "no result" in results["uid-c"].error
        assert len(kubelet.calls) == 1  # one RPC for the driver's three claims
        # the failed ones are asked again at the pod's next prepare, the good one is not
        preparer.errors.clear()
        preparer.omit.clear()
        again = kubelet.prepare("pod-1", [CLAIM_A, CLAIM_B, claim_c])
        assert all(r.error == "" for r in again.values())
        assert preparer.prepared[-1] == (
            ClaimRef("uid-b", "ns", "claim-b"),
            ClaimRef("uid-c", "ns", "claim-c"),
        )


def test_a_handler_exception_fails_every_claim_not_the_rpc(node: Node) -> None:
    preparer = FakePreparer(raises=RuntimeError("journal is full"))
    with node.plugin(preparer), node.kubelet() as kubelet:
        kubelet.wait_registered(DRIVER, DEADLINE_S)
        results = kubelet.prepare("pod-1", [CLAIM_A, CLAIM_B])
        assert {uid: r.error for uid, r in results.items()} == dict.fromkeys(
            ("uid-a", "uid-b"), "preparing failed: RuntimeError: journal is full"
        )
        errors = kubelet.unprepare("pod-1", [CLAIM_A, CLAIM_B])
        assert errors == dict.fromkeys(
            ("uid-a", "uid-b"), "unpreparing failed: RuntimeError: journal is full"
        )
        # an unprepare that failed keeps the claims: the next one asks again
        preparer.raises = None
        assert kubelet.unprepare("pod-1", [CLAIM_A, CLAIM_B]) == {"uid-a": "", "uid-b": ""}
        assert kubelet.pods_of("uid-a") == set()


def test_a_malformed_request_gets_an_error_per_claim(node: Node) -> None:
    """What a kubelet never sends: no uid, a uid twice, no namespace."""
    preparer = FakePreparer()
    with (
        node.plugin(preparer) as plugin,
        grpc.insecure_channel(f"unix:{plugin.dra_socket}") as channel,
    ):
        request = v1.NodePrepareResourcesRequest(
            claims=[
                v1.Claim(namespace="ns", uid="", name="nameless"),
                v1.Claim(namespace="ns", uid="twice", name="t1"),
                v1.Claim(namespace="ns", uid="twice", name="t2"),
                v1.Claim(namespace="", uid="no-ns", name="c"),
                v1.Claim(namespace="ns", uid="good", name="c"),
            ]
        )
        response = v1_grpc.DRAPluginStub(channel).NodePrepareResources(request, timeout=DEADLINE_S)
    errors = {uid: entry.error for uid, entry in response.claims.items()}
    assert errors == {
        "": "claim ns/nameless: uid is empty",
        "twice": "claim ns/t2: uid twice is listed 2 times in one request",
        "no-ns": "claim uid no-ns: namespace is empty",
        "good": "",
    }
    assert preparer.prepared == [(ClaimRef("good", "ns", "c"),)]
    assert response.claims["good"].devices[0].share_id == "share-c"


# -- restart, health, sockets -------------------------------------------------------------


def test_a_restarted_kubelet_prepares_its_claims_again(node: Node) -> None:
    preparer = FakePreparer()
    with node.plugin(preparer):
        with node.kubelet() as kubelet:
            kubelet.wait_registered(DRIVER, DEADLINE_S)
            kubelet.prepare("pod-1", [CLAIM_A])
            kubelet.prepare("pod-2", [CLAIM_B])
            kubelet.unprepare("pod-2", [CLAIM_B])
        recorded = json.loads(node.checkpoint.read_text())["claims"]
        assert {uid: c["pods"] for uid, c in recorded.items()} == {"uid-a": ["pod-1"]}
        with node.kubelet() as restarted:
            results = restarted.restart_recovery(timeout=DEADLINE_S)
            assert set(results) == {"uid-a"}
            assert results["uid-a"].error == ""
            # the same claim asked twice: the driver must be idempotent
            assert preparer.prepared.count((ClaimRef("uid-a", "ns", "claim-a"),)) == 2
            assert restarted.pods_of("uid-a") == {"pod-1"}


def test_a_damaged_checkpoint_is_refused(node: Node) -> None:
    with node.kubelet() as kubelet:
        unregistered = kubelet.prepare("pod-1", [CLAIM_A])["uid-a"]
        assert (unregistered.error, unregistered.sent) == (
            f"DRA driver {DRIVER} is not registered",
            False,
        )
    text = node.checkpoint.read_text()
    node.checkpoint.write_text(text.replace("pod-1", "pod-9"))
    with pytest.raises(CheckpointError, match="checksum"):
        node.kubelet()


def test_health_updates_stream_on_change(node: Node) -> None:
    board = DeviceHealthBoard()
    board.set("pool-0", "dev-0", "Healthy")
    with node.plugin(FakePreparer(), health=board), node.kubelet() as kubelet:
        kubelet.wait_registered(DRIVER, DEADLINE_S)
        with kubelet.watch_health(DRIVER) as watch:
            assert watch.next_update(DEADLINE_S) == [("pool-0", "dev-0", "Healthy")]
            board.set("pool-0", "dev-0", "Unhealthy")
            assert watch.next_update(DEADLINE_S) == [("pool-0", "dev-0", "Unhealthy")]


def test_a_stale_socket_is_replaced_and_anything_else_refused(node: Node) -> None:
    import socket

    plugin = node.plugin(FakePreparer())
    plugin.dra_socket.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(plugin.dra_socket))  # bound, never listening: what a crash leaves
    with plugin:
        assert stat.S_ISSOCK(plugin.dra_socket.lstat().st_mode)
    plugin.dra_socket.write_text("someone's file")
    with pytest.raises(RegistrationError, match="not a socket"):
        plugin.start()
    assert plugin.dra_socket.read_text() == "someone's file"
    assert not plugin.registration_socket.exists()


@pytest.mark.parametrize(
    ("driver", "problem"),
    [
        ("", "empty"),
        ("Net.Example.com", "DNS subdomain"),
        ("x" * 64, "at most 63"),
    ],
)
def test_a_bad_driver_name_is_refused_before_anything_is_created(
    node: Node, driver: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        KubeletPlugin(driver, FakePreparer(), node.plugins_dir, node.registry_dir)
    assert not node.plugins_dir.exists()


def test_a_socket_path_too_long_is_refused(node: Node) -> None:
    with pytest.raises(ValueError, match="bytes"):
        KubeletPlugin(DRIVER, FakePreparer(), node.root / ("d" * 80), node.registry_dir)


def test_kubelet_sim_refuses_unknown_versions(node: Node) -> None:
    with pytest.raises(ValueError, match="speaks"):
        KubeletSim(node.registry_dir, node.checkpoint, speaks=("v2.DRAPlugin",))
    node.checkpoint.write_text("{")
    with pytest.raises(CheckpointError, match="unreadable"):
        KubeletSim(node.registry_dir, node.checkpoint)
