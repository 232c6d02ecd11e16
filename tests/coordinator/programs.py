"""Helpers for the tests of the coordinator program: its client, its status, a config of
its own and one run of the program that is expected to refuse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from harness.coordinator_process import CoordinatorRig
from plugins.coordinator import CoordinatorClient, CoordinatorStatus

REPO = Path(__file__).resolve().parents[2]
PROG = "networkplugin-coordinator"
VF_BOND_VLAN = "sdk-vf-bond-vlan"
MACVLAN = "sdk-macvlan"


def client(rig: CoordinatorRig) -> CoordinatorClient:
    return rig.program.coordinator_client()


def status(rig: CoordinatorRig) -> CoordinatorStatus:
    with client(rig) as c:
        return c.status()


def write_config(tmp_path: Path, **changes: object) -> Path:
    """A coordinator config in ``tmp_path`` (its paths relative to it), with ``changes``."""
    document: dict[str, object] = {
        "stateDir": "state",
        "socket": "run/coordinator.sock",
        "tokenFile": "token",
        "topologies": [str(REPO / "topologies" / "macvlan.yaml")],
        "inventory": str(REPO / "topologies" / "inventory.yaml"),
        "policies": str(REPO / "topologies" / "policies.yaml"),
        "plugins": {"macvlan": {"socket": "macvlan.sock", "tokenFile": "macvlan.token"}},
        **changes,
    }
    path = tmp_path / "coordinator.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def write_token(path: Path, token: str = "coordinator-token") -> Path:
    path.write_text(token)
    path.chmod(0o600)
    return path


def run_program(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m plugins.coordinator ARGS`` to its end (a refusal, ``--version``)."""
    return subprocess.run(
        [sys.executable, "-m", "plugins.coordinator", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
