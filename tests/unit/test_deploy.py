"""deploy/ starts under the shipped units: the rendered units, the shipped configs, as is.

Each program (the three services, then the coordinator) runs as its unit runs it
(``labs.unit_sandbox``: the unit's ``ExecStart=``, its directories, ``ProtectSystem=strict``,
``PrivateTmp=``, ``PrivateNetwork=``, its capability bounding set, ``READY=1``), under a
root prefix so that the real ``/etc``, ``/run`` and ``/var/lib`` are never touched. The
configs are ``deploy/*.yaml`` copied byte for byte to where the unit's ``--config`` names
them; only the tokens (never shipped), the coordinator's example manifests (the
repository's ``topologies/``) and the host network namespace mount (a fresh namespace at
``/run/netns/host``) are the test's. Then each socket answers health SERVING without a
token and GetInfo (GetStatus) ready with it, and the metrics are read where the unit lets
them be written.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from labs.unit_sandbox import Unit, missing, start_unit
from plugins.coordinator import CoordinatorClient
from plugins.sdk.host import PluginClient
from plugins.services.units import render_unit, unit_paths

# Root: mount namespaces, overlayfs and a network namespace for the host's. The netns
# tier's rule skips it, saying so, where those are not there.
pytestmark = pytest.mark.netns

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BIN_DIR = str(Path(sys.executable).parent)  # where this checkout's networkplugin-* are
TEXTFILE_DIR = "/var/lib/node_exporter/textfile"
SERVICES = {
    "vf": ("sriov.sock",),
    "bond": ("bond.sock",),
    "links": ("vlan.sock", "ipvlan.sock", "macvlan.sock"),
}
WAIT_S = 60.0


@pytest.fixture
def root() -> Iterator[Path]:
    """An empty node under a short root prefix, with a host network namespace mounted at
    ``/run/netns/host`` (a fresh one: the services never see the test machine's)."""
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    # Short: the test connects to R/run/dra-networkplugins/links/macvlan.sock from outside.
    prefix = Path(tempfile.mkdtemp(prefix="np-unit-", dir="/tmp"))
    netns = prefix / "run" / "netns" / "host"
    netns.parent.mkdir(parents=True)
    netns.touch()
    subprocess.run(["unshare", f"--net={netns}", "true"], check=True, timeout=30)
    try:
        yield prefix
    finally:
        subprocess.run(["umount", str(netns)], check=False, timeout=30)
        shutil.rmtree(prefix, ignore_errors=True)


def inside(root: Path, path: Path) -> Path:
    """Where ``path`` of the unit's view is under ``root`` (labs.unit_sandbox's layout)."""
    return root / path.relative_to("/")


def install(root: Path, unit_text: str, name: str, config: bytes) -> tuple[Path, str]:
    """The operator's part: the unit file, the config where the unit reads it, a token."""
    unit_file = root / "units" / f"{name}.service"
    unit_file.parent.mkdir(exist_ok=True)
    unit_file.write_text(unit_text)
    paths = unit_paths(name, bin_dir=BIN_DIR)
    etc = inside(root, paths.config.parent)
    etc.mkdir(parents=True, exist_ok=True)
    inside(root, paths.config).write_bytes(config)
    token = f"token-of-{name}"
    token_file = etc / f"{name}.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    return unit_file, token


def health(socket: Path) -> int:
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        response = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=WAIT_S
        )
    return int(response.status)


def stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(WAIT_S)


def test_the_services_and_the_coordinator_start_from_deploy_under_the_rendered_units(
    root: Path,
) -> None:
    services_unit = render_unit(bin_dir=BIN_DIR, textfile_dir=TEXTFILE_DIR)
    coordinator_unit = render_unit(bin_dir=BIN_DIR, textfile_dir=TEXTFILE_DIR, coordinator=True)
    assert Unit(services_unit, "vf").exec_start == [
        f"{BIN_DIR}/networkplugin-vf",
        "--config",
        "/etc/dra-networkplugins/vf.yaml",
    ]
    assert Unit(coordinator_unit).exec_start == [
        f"{BIN_DIR}/networkplugin-coordinator",
        "--config",
        "/etc/dra-networkplugins/coordinator.yaml",
    ]
    inside(root, Path(TEXTFILE_DIR)).mkdir(parents=True)  # node_exporter's, not ours
    # What deploy/coordinator.yaml names beside it: the repository's example manifests.
    etc = inside(root, Path("/etc/dra-networkplugins"))
    (etc / "topologies").mkdir(parents=True)
    for manifest in ("vf-bond-vlan", "vf-bond", "macvlan", "ipvlan"):
        shutil.copy(REPO / "topologies" / f"{manifest}.yaml", etc / "topologies")
    for manifest in ("inventory", "policies"):
        shutil.copy(REPO / "topologies" / f"{manifest}.yaml", etc)
    running: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in SERVICES:
            unit_file, _ = install(
                root, services_unit, name, (DEPLOY / f"{name}.yaml").read_bytes()
            )
            running[name] = start_unit(unit_file, name, root, root / f"{name}.log", WAIT_S)
        # The coordinator asks every plugin who it is at start: after the services.
        unit_file, token = install(
            root, coordinator_unit, "coordinator", (DEPLOY / "coordinator.yaml").read_bytes()
        )
        running["coordinator"] = start_unit(unit_file, "", root, root / "coordinator.log", WAIT_S)
        for name, sockets in SERVICES.items():
            socket_dir = inside(root, unit_paths(name).runtime_dir)
            assert stat.S_IMODE(socket_dir.stat().st_mode) == 0o700
            for socket in sockets:
                assert stat.S_IMODE((socket_dir / socket).stat().st_mode) == 0o600
                assert health(socket_dir / socket) == health_pb2.HealthCheckResponse.SERVING
                with PluginClient(socket_dir / socket, f"token-of-{name}") as client:
                    assert client.get_info().ready
        coordinator_socket = (
            inside(root, unit_paths("coordinator").runtime_dir) / "coordinator.sock"
        )
        assert stat.S_IMODE(coordinator_socket.stat().st_mode) == 0o600
        assert health(coordinator_socket) == health_pb2.HealthCheckResponse.SERVING
        with CoordinatorClient(coordinator_socket, token, timeout=WAIT_S) as coordinator:
            assert coordinator.status().ready
        # The metrics, where the units let them be written (ReadWritePaths=).
        for name, metric in [
            *((name, "networkplugin_journal_fsyncs") for name in SERVICES),
            ("coordinator", "networkplugin_coordinator_recovery_duration_seconds"),
        ]:
            textfile = inside(root, Path(TEXTFILE_DIR)) / f"networkplugin-{name}.prom"
            families = {f.name for f in text_string_to_metric_families(textfile.read_text())}
            assert metric in families, (name, families)
        for name in ("coordinator", *SERVICES):
            assert stop(running[name]) == 0, (root / f"{name}.log").read_text()
    finally:
        for proc in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(WAIT_S)
    for name in ("coordinator", *SERVICES):
        paths = unit_paths(name)
        # The journal where StateDirectory= keeps it, its lease where RuntimeDirectory= is.
        assert (inside(root, paths.state_dir) / "journal.db").is_file(), name
        left = [p.suffix for p in inside(root, paths.runtime_dir).iterdir()]
        assert left == [".lease"], (name, left)  # every socket removed at the stop
        log = (root / f"{name}.log").read_text()
        assert "Traceback" not in log, log
        assert " ERROR " not in log, log


def test_a_directory_outside_the_units_is_read_only_and_refused_once(root: Path) -> None:
    """What deploy/ shipped before: a lease directory outside RuntimeDirectory=. Under
    ProtectSystem=strict it is read-only; the service refuses with one line and exit 2,
    which RestartPreventExitStatus=2 keeps systemd from restarting."""
    unit_text = render_unit(bin_dir=BIN_DIR, textfile_dir=TEXTFILE_DIR)
    assert Unit(unit_text).values("RestartPreventExitStatus") == ["2"]
    inside(root, Path(TEXTFILE_DIR)).mkdir(parents=True)
    config = (DEPLOY / "vf.yaml").read_bytes() + b"runtimeDir: /run/dra-networkplugins/leases\n"
    unit_file, _ = install(root, unit_text, "vf", config)
    log = root / "vf.log"
    with pytest.raises(RuntimeError, match="exited with status 2"):
        start_unit(unit_file, "vf", root, log, WAIT_S)
    lines = log.read_text().splitlines()
    assert len(lines) == 1, lines
    assert lines[0] == (
        "networkplugin-vf: runtime directory /run/dra-networkplugins/leases: cannot be "
        "created in /run/dra-networkplugins: Read-only file system (EROFS)"
    )
    assert not inside(root, Path("/run/dra-networkplugins/leases")).exists()
    # Nothing created: no journal, no metrics.
    assert os.listdir(inside(root, unit_paths("vf").state_dir)) == []
    assert os.listdir(inside(root, Path(TEXTFILE_DIR))) == []


def test_a_metrics_textfile_the_unit_does_not_let_be_written_is_refused(root: Path) -> None:
    """Rendered without --metrics-textfile-dir, the unit leaves the textfile's directory
    read-only: one line, exit 2, nothing created."""
    unit_text = render_unit(bin_dir=BIN_DIR)
    textfiles = inside(root, Path(TEXTFILE_DIR))
    textfiles.mkdir(parents=True)
    unit_file, _ = install(root, unit_text, "vf", (DEPLOY / "vf.yaml").read_bytes())
    log = root / "vf.log"
    with pytest.raises(RuntimeError, match="exited with status 2"):
        start_unit(unit_file, "vf", root, log, WAIT_S)
    assert log.read_text().splitlines() == [
        f"networkplugin-vf: metrics {TEXTFILE_DIR}/networkplugin-vf.prom: "
        "Read-only file system (EROFS)"
    ]
    assert os.listdir(textfiles) == []
    assert os.listdir(inside(root, unit_paths("vf").state_dir)) == []


def test_the_node_config_names_each_programs_config_where_its_unit_reads_it() -> None:
    """deploy/node.yaml (networkplugin-ctl's default node config) names each service's
    and the coordinator's config at the unit's --config, and nothing else."""
    node = yaml.safe_load((DEPLOY / "node.yaml").read_text())
    assert node["services"] == {
        f"networkplugin-{name}": str(unit_paths(name).config) for name in SERVICES
    }
    assert node["coordinator"] == str(unit_paths("coordinator").config)
    shipped = {p.name for p in DEPLOY.glob("*.yaml")} - {"node.yaml"}
    assert {Path(p).name for p in [*node["services"].values(), node["coordinator"]]} == shipped
