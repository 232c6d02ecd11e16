"""The kubelet registration during a rolling update: sockets named per pod, both
instances registered side by side, the kubelet calling the newest, and a killed
instance's sockets removed once the new one is registered (docs/kubernetes.md,
"Rolling updates").

``KubeletPlugin`` in this process against ``KubeletSim``; a killed instance is a real
process SIGKILLed (its sockets stay behind, as a killed pod's do); and the coordinator
program itself handing over to its next instance on the same journal.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml

from harness.k8s.apiserver import FakeAPIServer
from harness.k8s.kubelet import KubeletSim, PodClaim
from plugins.api.kubelet.pluginregistration.v1 import registration_pb2 as reg_pb
from plugins.api.kubelet.pluginregistration.v1 import registration_pb2_grpc as reg_grpc
from plugins.coordinator import CoordinatorConfig
from plugins.coordinator.kubelet import (
    dra_socket_path,
    registration_socket_path,
)
from plugins.deploy import render_manifests, set_up_pod

from .test_plugin import DRIVER, FakePreparer, Node

DEADLINE_S = 30.0
REPO = Path(__file__).resolve().parents[2]
OLD, NEW = str(uuid.UUID(int=1)), str(uuid.UUID(int=2))
DRIVER_OF_PROGRAM = "dra.networking"  # the coordinator program's default driver
LOCK_FILE = "writer.lock"


@pytest.fixture
def node() -> Iterator[Node]:
    """Directories with short paths: a Unix socket path holds 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="kl-", dir="/tmp") as d:
        root = Path(d)
        (root / "registry").mkdir()  # the kubelet's own, there before any plugin
        yield Node(root)


# A KubeletPlugin of its own in a process: the instance a rolling update replaces.
_INSTANCE = """
import sys
from plugins.coordinator.kubelet import KubeletPlugin
class Nothing:
    def prepare_claims(self, claims):
        return {}
    def unprepare_claims(self, claims):
        return {}
driver, plugins_dir, registry_dir, instance = sys.argv[1:]
KubeletPlugin(driver, Nothing(), plugins_dir, registry_dir, instance=instance).start()
print("serving", flush=True)
sys.stdin.read()
"""


class InstanceProcess:
    def __init__(self, node: Node, instance: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _INSTANCE,
                DRIVER,
                str(node.plugins_dir),
                str(node.registry_dir),
                instance,
            ],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "serving\n"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(DEADLINE_S)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def dead_socket(path: Path) -> None:
    """A socket file nobody listens on: what a killed process leaves."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))


def notify_registered(registration: Path) -> None:
    """What the kubelet sends once it has registered the plugin."""
    with grpc.insecure_channel(f"unix:{registration}") as channel:
        reg_grpc.RegistrationStub(channel).NotifyRegistrationStatus(
            reg_pb.RegistrationStatus(plugin_registered=True), timeout=DEADLINE_S
        )


def test_an_instance_is_named_after_its_pod_as_the_kubelets_helper_names_it(node: Node) -> None:
    plugin = node.plugin(FakePreparer(), instance=NEW)
    assert plugin.registration_socket == node.registry_dir / f"{DRIVER}-{NEW}-reg.sock"
    assert plugin.dra_socket == node.plugins_dir / DRIVER / f"dra-{NEW}.sock"
    assert registration_socket_path(node.registry_dir, DRIVER) == (
        node.registry_dir / f"{DRIVER}-reg.sock"
    )
    assert dra_socket_path(node.plugins_dir, DRIVER) == node.plugins_dir / DRIVER / "dra.sock"
    with node.kubelet() as kubelet, plugin:
        registration = kubelet.wait_registered(DRIVER, DEADLINE_S)
    assert registration.endpoint == str(plugin.dra_socket)
    assert registration.socket == plugin.registration_socket


@pytest.mark.parametrize(
    "instance", ["", "New-Pod", "../x", "pod-1", str(uuid.UUID(int=0xABCDEF)).upper()]
)
def test_an_instance_that_is_not_a_pod_uid_is_refused(node: Node, instance: str) -> None:
    with pytest.raises(ValueError, match="is not a pod UID"):
        node.plugin(FakePreparer(), instance=instance)
    assert list(node.registry_dir.iterdir()) == []
    assert not node.plugins_dir.exists()


def test_the_new_instance_registers_beside_the_old_one_and_takes_the_kubelets_calls(
    node: Node,
) -> None:
    old_preparer, new_preparer = FakePreparer(), FakePreparer()
    old = node.plugin(old_preparer, instance=OLD)
    new = node.plugin(new_preparer, instance=NEW)
    with node.kubelet() as kubelet:
        old.start()
        try:
            assert kubelet.wait_registered(DRIVER, DEADLINE_S).socket == old.registration_socket
            new.start()
            try:
                assert kubelet.wait_for(
                    lambda: kubelet.registered(DRIVER).socket == new.registration_socket,  # type: ignore[union-attr]
                    DEADLINE_S,
                )
                assert new.wait_stale_cleared(DEADLINE_S)
                # The old one answers: its sockets stay while it stops on its own.
                assert old.registration_socket.exists()
                assert old.dra_socket.exists()
                claim = PodClaim(DRIVER, "uid-1", "ns", "claim-1")
                assert not kubelet.prepare("pod-1", [claim])["uid-1"].error
                assert [c.uid for call in new_preparer.prepared for c in call] == ["uid-1"]
                assert old_preparer.prepared == []
            finally:
                old.stop()
            # The old one's socket went; the kubelet keeps the new one, never without one.
            assert kubelet.registered(DRIVER).socket == new.registration_socket  # type: ignore[union-attr]
            claim = PodClaim(DRIVER, "uid-2", "ns", "claim-2")
            assert not kubelet.prepare("pod-2", [claim])["uid-2"].error
            assert len(new_preparer.prepared) == 2
            assert kubelet.deregistrations == []
        finally:
            new.stop()
    assert [r.socket for r in kubelet.registrations] == [
        old.registration_socket,
        new.registration_socket,
    ]


def test_a_killed_instances_sockets_go_once_the_new_one_is_registered(node: Node) -> None:
    with node.kubelet() as kubelet:
        killed = InstanceProcess(node, OLD)
        try:
            old_socket = node.registry_dir / f"{DRIVER}-{OLD}-reg.sock"
            assert kubelet.wait_registered(DRIVER, DEADLINE_S).socket == old_socket
        finally:
            killed.kill()
        old_dra = node.plugins_dir / DRIVER / f"dra-{OLD}.sock"
        assert old_socket.exists()  # left behind, and still registered with the kubelet
        assert old_dra.exists()
        with node.plugin(FakePreparer(), instance=NEW) as new:
            assert new.wait_stale_cleared(DEADLINE_S)
            assert not old_socket.exists()
            assert not old_dra.exists()
            # The kubelet registered the new one while both sockets were there, so the
            # killed one's going never left the driver unregistered.
            assert kubelet.wait_for(
                lambda: kubelet.registered(DRIVER).socket == new.registration_socket,  # type: ignore[union-attr]
                DEADLINE_S,
            )
            assert kubelet.deregistrations == []
    assert [r.socket for r in kubelet.registrations] == [old_socket, new.registration_socket]


def test_only_dead_sockets_of_this_driver_are_removed_and_only_after_registration(
    node: Node,
) -> None:
    other = str(uuid.UUID(int=3))
    dead = [
        node.registry_dir / f"{DRIVER}-reg.sock",  # a release without pod names
        node.registry_dir / f"{DRIVER}-{other}-reg.sock",
        node.plugins_dir / DRIVER / "dra.sock",
        node.plugins_dir / DRIVER / f"dra-{other}.sock",
    ]
    kept = [
        node.registry_dir / f"{DRIVER}-x-reg.sock",  # another driver, "<ours>-x"
        node.registry_dir / f"other.example.com-{other}-reg.sock",
    ]
    for path in dead + kept:
        dead_socket(path)
    not_a_socket = node.registry_dir / f"{DRIVER}-{uuid.UUID(int=4)}-reg.sock"
    not_a_socket.write_text("not a socket")
    with node.plugin(FakePreparer(), instance=NEW) as new:
        assert all(p.exists() for p in dead), "removed before the kubelet registered us"
        notify_registered(new.registration_socket)
        assert new.wait_stale_cleared(DEADLINE_S)
        assert [p for p in dead if p.exists()] == []
        assert all(p.exists() for p in kept)
        assert not_a_socket.read_text() == "not a socket"
        assert new.registration_socket.exists()
        assert new.dra_socket.exists()


# -- the coordinator program ---------------------------------------------------------------


class CoordinatorProgram:
    """``python -m plugins.coordinator --config FILE``, its stderr read line by line."""

    def __init__(self, config: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "plugins.coordinator", "--config", str(config)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._seen = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._seen:
                self.lines.append(line.rstrip("\n"))
                self._seen.notify_all()

    def line(self, text: str) -> str:
        """The first line holding ``text``, once the program wrote it."""

        def found() -> str | None:
            return next((line for line in self.lines if text in line), None)

        with self._seen:
            if not self._seen.wait_for(lambda: found() is not None, DEADLINE_S):
                raise AssertionError(f"no {text!r} within {DEADLINE_S}s: {self.lines}")
            result = found()
        assert result is not None
        return result

    def wait(self) -> int:
        code = self.proc.wait(DEADLINE_S)
        self._reader.join(DEADLINE_S)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@pytest.fixture
def k8s_node() -> Iterator[tuple[Path, FakeAPIServer]]:
    short = Path(tempfile.mkdtemp(prefix="kh-", dir="/tmp"))
    (short / "registry").mkdir()
    try:
        with FakeAPIServer() as api:
            yield short, api
    finally:
        shutil.rmtree(short, ignore_errors=True)


def coordinator_config(
    root: Path, short: Path, api: FakeAPIServer, pod_uid: str, **changes: object
) -> Path:
    token = root / "token"
    if not token.exists():
        token.write_text("coordinator-token")
        token.chmod(0o600)
        (root / "macvlan.token").write_text("macvlan-token")
        (root / "macvlan.token").chmod(0o600)
    document = {
        "stateDir": str(root / "state"),
        "socket": str(short / "run" / "coordinator.sock"),
        "tokenFile": str(token),
        "topologies": [str(REPO / "topologies" / "macvlan.yaml")],
        "inventory": str(REPO / "topologies" / "inventory.yaml"),
        "policies": str(REPO / "topologies" / "policies.yaml"),
        "plugins": {
            "macvlan": {"socket": str(short / "macvlan.sock"), "tokenFile": "macvlan.token"}
        },
        "allowVolatileStateDir": True,
        "shutdownGraceSeconds": 2,
        "kubernetes": {
            "nodeName": "node-1",
            "apiServer": api.url,
            "kubeletPluginsDir": str(short / "plugins"),
            "kubeletRegistryDir": str(short / "registry"),
            "nriSocket": None,
            "podUID": pod_uid,
        },
        **changes,
    }
    path = root / f"coordinator-{pod_uid}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_the_coordinator_hands_over_to_its_next_instance(
    tmp_path: Path, k8s_node: tuple[Path, FakeAPIServer], how: str
) -> None:
    short, api = k8s_node
    kubelet = KubeletSim(short / "registry", tmp_path / "checkpoint")
    started: list[CoordinatorProgram] = []
    try:
        old = CoordinatorProgram(coordinator_config(tmp_path, short, api, OLD))
        started.append(old)
        old_socket = short / "registry" / f"{DRIVER_OF_PROGRAM}-{OLD}-reg.sock"
        assert kubelet.wait_registered(DRIVER_OF_PROGRAM, DEADLINE_S).socket == old_socket
        new = CoordinatorProgram(coordinator_config(tmp_path, short, api, NEW))
        started.append(new)
        lock = tmp_path / "state" / "writer.lock"
        waiting = new.line("waiting up to")
        assert f"writer lock {lock} is held by pid {old.proc.pid}" in waiting
        new_socket = short / "registry" / f"{DRIVER_OF_PROGRAM}-{NEW}-reg.sock"
        assert not new_socket.exists()  # nothing bound while the old one holds the journal
        old.proc.send_signal(signal.SIGKILL if how == "SIGKILL" else signal.SIGTERM)
        code = old.wait()
        assert code == (-signal.SIGKILL if how == "SIGKILL" else 0), old.lines
        assert f"(pid {old.proc.pid} released it)" in new.line(" taken after ")
        assert kubelet.wait_for(
            lambda: getattr(kubelet.registered(DRIVER_OF_PROGRAM), "socket", None) == new_socket,
            DEADLINE_S,
        ), (kubelet.registrations, new.lines)
        # The old one's socket is gone: removed by itself at SIGTERM (the kubelet
        # deregistered it then), or by the new one once registered after a SIGKILL (while
        # both were there, so the driver was never unregistered).
        assert kubelet.wait_for(lambda: not old_socket.exists(), DEADLINE_S)
        expected = [] if how == "SIGKILL" else [old_socket]
        assert [d.socket for d in kubelet.deregistrations] == expected
        assert kubelet.registered(DRIVER_OF_PROGRAM).socket == new_socket  # type: ignore[union-attr]
        new.proc.send_signal(signal.SIGTERM)
        assert new.wait() == 0, new.lines
    finally:
        kubelet.stop()
        for program in started:
            program.kill()
    assert [r.socket for r in kubelet.registrations] == [old_socket, new_socket]


def test_past_the_deadline_the_next_coordinator_exits_with_one_line(
    tmp_path: Path, k8s_node: tuple[Path, FakeAPIServer]
) -> None:
    short, api = k8s_node
    old = CoordinatorProgram(coordinator_config(tmp_path, short, api, OLD))
    started = [old]
    try:
        old.line("INFO plugins.coordinator: serving ")
        state = tmp_path / "state"
        before = {p.name: p.read_bytes() for p in sorted(state.iterdir()) if p.is_file()}
        registry = sorted(os.listdir(short / "registry"))
        config = coordinator_config(tmp_path, short, api, NEW, writerLockWaitSeconds=0.5)
        late = CoordinatorProgram(config)
        started.append(late)
        assert late.wait() == 2
        refusal = late.lines[-1]
        assert refusal == (
            f"networkplugin-coordinator: journal store {state} is already open by another "
            f"writer (pid {old.proc.pid}); still held after waiting 0.5s for it, nothing "
            "was changed"
        ), late.lines
        assert [line for line in late.lines if " ERROR " in line or "Traceback" in line] == []
        assert sorted(os.listdir(short / "registry")) == registry
        # The old one's journal is as it was (it is idle): the refused one wrote nothing.
        after = {p.name: p.read_bytes() for p in sorted(state.iterdir()) if p.is_file()}
        assert after.keys() == before.keys()
        assert after[LOCK_FILE] == before[LOCK_FILE] == f"{old.proc.pid}\n".encode()
        assert after["journal.id"] == before["journal.id"]
    finally:
        for program in started:
            program.kill()


# -- the DaemonSet ---------------------------------------------------------------------------


def test_the_daemonsets_pod_names_its_kubelet_sockets_after_its_uid(tmp_path: Path) -> None:
    manifests = render_manifests(REPO / "deploy" / "kubernetes")
    (daemonset,) = [o for o in manifests.install if o["kind"] == "DaemonSet"]
    (setup,) = daemonset["spec"]["template"]["spec"]["initContainers"]
    command = setup["command"]
    assert command[command.index("--pod-uid") + 1] == "$(POD_UID)"
    env = {e["name"]: e.get("valueFrom") for e in setup["env"]}
    assert env["POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    (configmap,) = [o for o in manifests.install if o["kind"] == "ConfigMap"]
    template = tmp_path / "coordinator.yaml"
    template.write_text(configmap["data"]["coordinator.yaml"])
    pod = tmp_path / "pod"
    pod.mkdir()
    set_up_pod("node-1", template, pod, NEW)
    kubernetes = CoordinatorConfig.load(pod / "coordinator.yaml").kubernetes
    assert kubernetes is not None
    assert kubernetes.pod_uid == NEW
    assert registration_socket_path(kubernetes.registry_dir, kubernetes.driver, NEW).name == (
        f"{kubernetes.driver}-{NEW}-reg.sock"
    )
