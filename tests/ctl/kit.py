"""A node of real service processes on the fake kernel server, as the CLI's tests need it.

``crashed_connect`` runs the macvlan topology's NodePrepare, then its ConnectNetwork
with the links service armed to SIGKILL itself at a chosen point: what is left is what
a coordinator that gave up (or died) leaves behind.
"""

from __future__ import annotations

import io
import json
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.scenarios import Lifecycle
from labs import FakeServerLab, Node
from plugins.coordinator import StepFailed
from plugins.ctl import main

LINKS = "networkplugin-links"


def write_node_config(node: Node, path: Path) -> Path:
    """The CLI's node config: each service's own config file, as the services read it."""
    services = {name: str(p.config) for name, p in node.processes.processes.items()}
    path.write_text(yaml.safe_dump({"services": services}))
    return path


@dataclass(frozen=True)
class Run:
    """One ``networkplugin-ctl`` run in this process: exit code, stdout and stderr."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def ctl(node_config: Path, args: Sequence[str], capsys: Any) -> Run:
    capsys.readouterr()
    out = io.StringIO()
    code = main(["--node", str(node_config), *args], out=out)
    return Run(code, out.getvalue(), capsys.readouterr().err)


def process_node(root: Path) -> Node:
    return Node(FakeServerLab(), root, processes=True)


def crashed_connect(node: Node, point: str, claim: str = "claim-1", att: str = "att-1") -> None:
    """Prepare macvlan, then connect with the links service SIGKILLed at ``point``."""
    life = Lifecycle("macvlan", node, claim=claim, attachment=att)
    life.results["prepare"] = life.phase("prepare")()
    links = node.processes.processes[LINKS]
    links.kill()
    links.start(crash_at=point)
    node.reconnect()
    try:
        life.phase("connect")()
    except StepFailed:
        pass
    else:
        raise AssertionError(f"{point} was not reached")
    assert links.wait_exit() == -signal.SIGKILL


def files_of(state_dir: Path) -> dict[str, bytes]:
    """Every file of a state directory, by name: to prove a command changed nothing."""
    return {p.name: p.read_bytes() for p in sorted(state_dir.iterdir()) if p.is_file()}
