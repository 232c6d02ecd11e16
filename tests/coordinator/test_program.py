"""networkplugin-coordinator as a program: real coordinator and service processes on the fake
kernel server, driven only over the coordinator's socket (apply, status, remove), refusing a
bad token and bad input with one clear error and nothing changed, and surviving a SIGKILL
mid-apply: restarted, it completes the apply, or undoes it when it cannot."""

from __future__ import annotations

import importlib.util
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fakekernel.model import diff
from harness.coordinator_process import CoordinatorRig
from harness.invariants import leaks, violations
from labs import SANDBOX
from plugins.coordinator import (
    CoordinatorCallError,
    CoordinatorClient,
    CoordinatorConfig,
    CoordinatorJournal,
    load_manifests,
)
from plugins.sdk import NamespaceHandle, SandboxHandle
from plugins.sdk.runner import UNSCOPED, CrashPoint, Owner, Phase, PhaseKind
from plugins.sdk.service import StartupRefused

from .programs import MACVLAN, REPO, VF_BOND_VLAN, client, status, write_config

BOND_CONNECT = "att-kill:bond0:ConnectNetwork:g1"


def application_states(rig: CoordinatorRig) -> dict[str, str]:
    return {a.attachment: a.state for a in status(rig).applications}


def pod_links(rig: CoordinatorRig) -> list[str]:
    pod = next(ns for ns in rig.kernel.namespaces() if ns.path.endswith(f"/{SANDBOX}"))
    return sorted(link.name for link in rig.kernel.list_links(pod))


def check_invariants(rig: CoordinatorRig) -> list[str]:
    """Stop the program (its journal has one writer), check harness.invariants, restart."""
    assert rig.program.stop() == 0
    journal = CoordinatorJournal(rig.program.state_dir)
    clients = rig.clients()
    try:
        return violations(rig.baseline, rig.kernel, journal, clients)
    finally:
        journal.close()
        for c in clients.values():
            c.close()
        rig.program.start()


def test_the_socket_is_private(rig: CoordinatorRig) -> None:
    sock = os.lstat(rig.program.socket)
    assert stat.S_ISSOCK(sock.st_mode)
    assert stat.S_IMODE(sock.st_mode) == 0o600
    assert stat.S_IMODE(os.lstat(rig.program.socket.parent).st_mode) == 0o700
    # Bound at a staging name and linked into place: no staging name is left; the journal's
    # lease of this boot lives here too (the default runtime directory).
    names = sorted(os.listdir(rig.program.socket.parent))
    assert [n for n in names if n != rig.program.socket.name and not n.endswith(".lease")] == []


def test_apply_status_and_remove(rig: CoordinatorRig) -> None:
    sandbox = rig.sandbox()
    before = rig.snapshot()
    with client(rig) as c:
        applied = c.apply("att-a", "claim-a", VF_BOND_VLAN, sandbox)
        assert applied.state == "applied"
        assert [(o.step, o.port) for o in applied.outputs] == [
            ("vf0", "interface"),
            ("vf1", "interface"),
            ("bond0", "interface"),
            ("data-vlan", "interface"),
        ]
        assert {"net1", "net2", "bond0", "data0"} <= set(pod_links(rig))
        now = c.status()
        assert now.ready
        assert [
            (a.attachment, a.claim, a.topology, a.sandbox_id, a.state) for a in now.applications
        ] == [("att-a", "claim-a", VF_BOND_VLAN, SANDBOX, "applied")]
        assert now.open_calls == ()
        assert [(cl.holder, cl.mode) for cl in now.claims] == [
            ("claim-a.vf0", "exclusive"),
            ("claim-a.vf1", "exclusive"),
        ]
        # The same request again is answered from the journal, with the same handles.
        assert c.apply("att-a", "claim-a", VF_BOND_VLAN, sandbox) == applied

        removed = c.remove("att-a")
        assert removed.state == "removed"
        assert [(r.step, r.hook, r.status) for r in removed.receipts] == [
            ("data-vlan", "RemoveNetwork", "CLEANED"),
            ("bond0", "RemoveNetwork", "CLEANED"),
            ("vf1", "RemoveNetwork", "CLEANED"),
            ("vf0", "RemoveNetwork", "CLEANED"),
            ("vf1", "NodeUnprepare", "CLEANED"),
            ("vf0", "NodeUnprepare", "CLEANED"),
        ]
        assert c.remove("att-a").state == "removed"  # idempotent
        assert c.status().claims == ()
    assert diff(before, rig.snapshot()) == []
    assert check_invariants(rig) == []


def test_a_bad_token_is_refused_before_anything_happens(rig: CoordinatorRig) -> None:
    sandbox = rig.sandbox()
    before, states = rig.snapshot(), application_states(rig)
    with CoordinatorClient(rig.program.socket, "not-the-token") as intruder:
        for call in (
            intruder.status,
            lambda: intruder.apply("att-x", "claim-x", MACVLAN, sandbox),
            lambda: intruder.remove("att-a"),
        ):
            with pytest.raises(CoordinatorCallError) as refused:
                call()
            assert refused.value.code == "UNAUTHENTICATED"
            assert "Bearer <token>" in refused.value.message
    assert application_states(rig) == states
    assert diff(before, rig.snapshot()) == []


def test_bad_input_is_one_clear_error_and_changes_nothing(rig: CoordinatorRig) -> None:
    sandbox = rig.sandbox()
    relative = SandboxHandle(SANDBOX, NamespaceHandle("run/netns/pod-a", 1, 2, "boot"))
    with client(rig) as c:
        c.apply("att-b", "claim-b", MACVLAN, sandbox)  # for the mismatched re-apply below
        before, before_status = rig.snapshot(), c.status()
        cases = [
            (
                lambda: c.apply("att-c", "claim-c", "no-such-topology", sandbox),
                "INVALID_ARGUMENT",
                "topology 'no-such-topology' is not configured (known: sdk-ipvlan, sdk-macvlan, "
                "sdk-vf-bond-vlan)",
            ),
            (
                lambda: c.apply("Att_C", "claim-c", MACVLAN, sandbox),
                "INVALID_ARGUMENT",
                "attachment id 'Att_C' must be a DNS label: 1-63 lowercase letters, digits and "
                "'-', starting and ending with a letter or digit",
            ),
            (
                lambda: c.apply("att-c", "claim-c", MACVLAN, relative),
                "INVALID_ARGUMENT",
                "sandbox.network_namespace.path 'run/netns/pod-a' is not an absolute path",
            ),
            (
                lambda: c.apply("att-b", "claim-b", VF_BOND_VLAN, sandbox),
                "FAILED_PRECONDITION",
                "attachment att-b was applied as topology sdk-macvlan for claim claim-b in "
                "sandbox pod-a; a request under the same attachment id must be the same request",
            ),
            (
                lambda: c.apply("att-c", "claim-b", MACVLAN, sandbox),
                "FAILED_PRECONDITION",
                "claim claim-b is already applied by attachment att-b",
            ),
            (
                lambda: c.remove("att-never"),
                "NOT_FOUND",
                "attachment att-never: this coordinator never applied it",
            ),
        ]
        for call, code, message in cases:
            with pytest.raises(CoordinatorCallError) as refused:
                call()
            assert (refused.value.code, refused.value.message) == (code, message)
        assert c.status() == before_status
        assert diff(before, rig.snapshot()) == []
        assert c.remove("att-b").state == "removed"
    assert check_invariants(rig) == []


def test_a_bad_config_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    config = tmp_path / "coordinator.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "stateDir": "state",
                "socket": "run/coordinator.sock",
                "tokenFile": "token",
                "topologies": [str(REPO / "topologies" / "macvlan.yaml")],
                "inventory": str(REPO / "topologies" / "inventory.yaml"),
                "plugins": {"macvlan": {"socket": "macvlan.sock", "tokenFiel": "t"}},
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "plugins.coordinator", "--config", str(config)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"networkplugin-coordinator: coordinator config {config}: "
        "$.plugins.macvlan.tokenFiel: unknown key 'tokenFiel' [unknown-key]; "
        "$.plugins.macvlan.tokenFile: missing required field 'tokenFile' [required]"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coordinator.yaml"]


def connect_commit(operation: str, side: PhaseKind, commit: str, state: str = "") -> CrashPoint:
    """A boundary of the coordinator's journal during a ConnectNetwork call."""
    phase = Phase.commit(side, commit, state)
    return CrashPoint("ConnectNetwork", operation, UNSCOPED, phase, Owner.COORDINATOR)


def kill_mid_apply(rig: CoordinatorRig, point: CrashPoint, topology: str) -> None:
    """Start the program armed at ``point``, apply, and see it die there by SIGKILL."""
    rig.program.stop()
    rig.program.start(crash_at=point)
    with client(rig) as c, pytest.raises(CoordinatorCallError) as died:
        c.apply("att-kill", "claim-kill", topology, rig.sandbox())
    assert died.value.code == "UNAVAILABLE", died.value
    assert rig.program.wait_exit() == -signal.SIGKILL


def test_sigkill_mid_apply_then_restart_completes_it(rig: CoordinatorRig) -> None:
    # The bond service made the bond; the coordinator died before journaling its answer.
    kill_mid_apply(
        rig,
        connect_commit(BOND_CONNECT, PhaseKind.BEFORE_COMMIT, "finish_call", "succeeded"),
        VF_BOND_VLAN,
    )
    rig.program.start()  # ready only once recovery is done
    assert application_states(rig)["att-kill"] == "applied"
    assert "recovery: att-kill: the interrupted apply completed" in rig.program.log.read_text()
    assert {"net1", "net2", "bond0", "data0"} <= set(pod_links(rig))
    with client(rig) as c:
        again = c.apply("att-kill", "claim-kill", VF_BOND_VLAN, rig.sandbox())
        assert [(o.step, o.port) for o in again.outputs][-1] == ("data-vlan", "interface")
        assert c.remove("att-kill").state == "removed"
    assert check_invariants(rig) == []


def test_sigkill_mid_apply_then_restart_undoes_what_cannot_complete(
    rig: CoordinatorRig,
) -> None:
    point = connect_commit(
        "att-kill2:secondary:ConnectNetwork:g1", PhaseKind.AFTER_COMMIT, "record_call"
    )
    rig.program.stop()
    rig.program.start(crash_at=point)
    with client(rig) as c, pytest.raises(CoordinatorCallError):
        c.apply("att-kill2", "claim-kill2", MACVLAN, rig.sandbox())
    assert rig.program.wait_exit() == -signal.SIGKILL
    # While the coordinator is down the pod goes away: its namespace is no longer the one
    # the apply was for, so the apply cannot complete and recovery undoes it.
    rig.kernel.delete_namespace(SANDBOX)
    rig.sandbox()  # a new pod of the same name: another namespace
    rig.program.start()
    now = status(rig)
    (app,) = [a for a in now.applications if a.attachment == "att-kill2"]
    assert app.state == "removed", app
    # Its status keeps no error once removed; the log says why the apply was undone.
    assert app.error == ""
    assert (
        "recovery: att-kill2: the interrupted apply failed (step secondary: ConnectNetwork failed"
        in rig.program.log.read_text()
    )
    assert now.open_calls == ()
    assert now.claims == ()
    assert leaks(rig.kernel) == []
    with client(rig) as c, pytest.raises(CoordinatorCallError) as refused:
        c.apply("att-kill2", "claim-kill2", MACVLAN, rig.sandbox())
    assert (refused.value.code, refused.value.message) == (
        "FAILED_PRECONDITION",
        "attachment att-kill2 is removed; apply the topology under a new attachment id",
    )
    assert check_invariants(rig) == []


def test_a_damaged_journal_is_served_never_recreated(rig: CoordinatorRig) -> None:
    """The journal id gone: the program serves status saying why, refuses every request
    with DATA_LOSS and creates nothing in its place; put back, it serves again."""
    rig.program.stop()
    identity = rig.program.state_dir / "journal.id"
    saved = identity.read_bytes()
    identity.unlink()
    try:
        rig.program.start(wait_ready=False)
        with client(rig) as c:
            now = c.status()
            assert not now.ready
            assert "journal.id" in now.fault, now.fault
            for call in (
                lambda: c.apply("att-d", "claim-d", MACVLAN, rig.sandbox()),
                lambda: c.remove("att-a"),
            ):
                with pytest.raises(CoordinatorCallError) as refused:
                    call()
                assert (refused.value.code, refused.value.message) == ("DATA_LOSS", now.fault)
        rig.program.stop()
        assert not identity.exists()
    finally:
        identity.write_bytes(saved)
        identity.chmod(0o600)
    rig.program.start()
    assert status(rig).ready


def test_the_coordinator_contract_is_generated_and_current() -> None:
    spec = importlib.util.spec_from_file_location("gen_proto", REPO / "scripts" / "gen_proto.py")
    assert spec is not None
    assert spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, gen)
    spec.loader.exec_module(gen)
    assert gen.COORDINATOR_PROTO_REL in gen.PROTOS
    assert gen.stale_files(proto_rel=gen.COORDINATOR_PROTO_REL) == []


def test_the_config_resolves_paths_against_its_directory(tmp_path: Path) -> None:
    config = CoordinatorConfig.load(write_config(tmp_path, epoch=3, callTimeoutSeconds=None))
    assert config.socket == tmp_path / "run" / "coordinator.sock"
    assert config.lease_dir == tmp_path / "run"  # no runtimeDir: the socket's directory
    assert [(p.name, p.socket, p.token_file) for p in config.plugins] == [
        ("macvlan", tmp_path / "macvlan.sock", tmp_path / "macvlan.token")
    ]
    assert (config.epoch, config.call_timeout_seconds) == (3, 60.0)  # null: the default


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        (
            {"socket": "run/coordinator"},
            "$.socket: 'coordinator' must be a plain socket name like 'coordinator.sock'",
        ),
        ({"socket": "d" * 100 + "/coordinator.sock"}, "/coordinator.sock is longer than 97 bytes"),
        (
            {"plugins": {"macvlan": {"socket": "d" * 110 + "/m.sock", "tokenFile": "t"}}},
            "$.plugins.macvlan.socket: ",
        ),
        ({"topologies": []}, "$.topologies: must have at least 1 items, got 0 [size]"),
        ({"epoch": 0}, "$.epoch: must be >= 1, got 0 [range]"),
        # the operability keys (issue 26: paths expanded by nothing, logs, metrics)
        (
            {"stateDir": "/var/lib/${ARTIFACT_ID}/state"},
            "$.stateDir: '/var/lib/${ARTIFACT_ID}/state' holds an unexpanded ${...}: the "
            "coordinator expands no variables; write the path itself",
        ),
        (
            {"plugins": {"macvlan": {"socket": "${RUN}/m.sock", "tokenFile": "t"}}},
            "$.plugins.macvlan.socket: '${RUN}/m.sock' holds an unexpanded ${...}",
        ),
        ({"logFormat": "xml"}, "$.logFormat: "),
        ({"metrics": {"port": 9464, "textfile": "m.prom"}}, "$.metrics.textfile: "),
        ({"metrics": {}}, "$.metrics.textfile: missing required field 'textfile'"),
        # the Kubernetes node (issue 27)
        ({"kubernetes": {}}, "$.kubernetes.nodeName: missing required field 'nodeName'"),
        ({"kubernetes": {"nodeName": "n", "nriIndex": "7"}}, "$.kubernetes.nriIndex: "),
        (
            {"kubernetes": {"nodeName": "n", "answerWithinSeconds": 2.5}},
            "$.kubernetes.answerWithinSeconds: ",
        ),
        (
            {"kubernetes": {"nodeName": "n", "kubeconfig": "k", "apiServer": "http://a"}},
            "$.kubernetes.apiServer: ",
        ),
        (
            {"kubernetes": {"nodeName": "n", "kubeletPluginsDir": "${ROOT}/plugins"}},
            "$.kubernetes.kubeletPluginsDir: '${ROOT}/plugins' holds an unexpanded ${...}",
        ),
    ],
)
def test_a_bad_config_is_refused_naming_the_key(
    tmp_path: Path, changes: dict[str, object], problem: str
) -> None:
    path = write_config(tmp_path, **changes)
    with pytest.raises(StartupRefused) as refused:
        CoordinatorConfig.load(path)
    assert refused.value.message.startswith(f"coordinator config {path}: ")
    assert problem in refused.value.message
    assert "\n" not in refused.value.message


def test_the_kubernetes_section_is_read_with_its_defaults(tmp_path: Path) -> None:
    config = CoordinatorConfig.load(
        write_config(tmp_path, kubernetes={"nodeName": "node-1", "nriSocket": None})
    )
    k8s = config.kubernetes
    assert k8s is not None
    assert (k8s.node_name, k8s.driver, k8s.nri_socket) == ("node-1", "dra.networking", None)
    assert str(k8s.registry_dir) == "/var/lib/kubelet/plugins_registry"
    assert k8s.answer_within_seconds == 1.5
    assert CoordinatorConfig.load(write_config(tmp_path)).kubernetes is None


def test_a_topology_naming_an_unlisted_plugin_is_refused(tmp_path: Path) -> None:
    vf_bond_vlan = REPO / "topologies" / "vf-bond-vlan.yaml"
    config = CoordinatorConfig.load(write_config(tmp_path, topologies=[str(vf_bond_vlan)]))
    with pytest.raises(StartupRefused) as refused:
        load_manifests(config)
    assert refused.value.message == (
        f"topology {vf_bond_vlan}: names plugins the config does not list: bond, sriov, vlan"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coordinator.yaml"]
