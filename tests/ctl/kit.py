"""Nodes as the CLI's tests need them, and ``networkplugin-ctl`` run in this process.

``crashed_connect`` runs the macvlan topology's NodePrepare, then its ConnectNetwork
with the links service armed to SIGKILL itself at a chosen point: what is left is what
a coordinator that gave up (or died) leaves behind. ``clone`` copies the journals of
such a node (conftest.py's ``crashed``) with configs naming them, every service down.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import signal
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.scenarios import Lifecycle
from labs import FakeServerLab, Node
from plugins.coordinator import StepFailed
from plugins.ctl import main
from plugins.sdk.runner import CrashPoint, Phase, PhaseKind

LINKS = "networkplugin-links"
SERVICES = ("networkplugin-bond", LINKS, "networkplugin-vf")


def _after_call(call: int, method: str) -> CrashPoint:
    """After the ``call``-th kernel call of the secondary's create-child effect."""
    phase = Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, call, method)
    return CrashPoint("ConnectNetwork", "att-1:secondary:ConnectNetwork:g1", "create-child", phase)


UNMARKED = _after_call(1, "create_link")  # born under its temporary name
MARKED = _after_call(2, "set_link")  # carries the marker as its alias


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


def ctl(
    node_config: Path | None,
    args: Sequence[str],
    capsys: Any,
    environ: Mapping[str, str] | None = None,
) -> Run:
    """One run; ``node_config`` None gives no ``--node`` (then ``environ`` names it)."""
    capsys.readouterr()
    out = io.StringIO()
    node = [] if node_config is None else ["--node", str(node_config)]
    try:
        code = main([*node, *args], out=out, environ={} if environ is None else environ)
    except SystemExit as exc:  # argparse's refusals (and --help, --version) exit
        code = int(exc.code or 0)
    return Run(code, out.getvalue(), capsys.readouterr().err)


def one_line(err: str) -> str:
    assert err.count("\n") == 1, err
    assert err.startswith("networkplugin-ctl: "), err
    return err


def process_node(root: Path) -> Node:
    return Node(FakeServerLab(), root, processes=True)


def crashed_connect(
    node: Node, point: CrashPoint, claim: str = "claim-1", att: str = "att-1"
) -> None:
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


def clone(node: Node, dest: Path) -> Path:
    """Copies of every service's journal, a token, configs naming them, a node config.

    Sockets go in a directory that does not exist: every service is down. It is under
    /tmp, not ``dest``: a socket path must fit in 107 bytes, and pytest's temporary paths
    under xdist can be longer (the ctl then failed on the path, not on the absent
    service). Each keeps its lease in ``run`` beside its state (none yet: no process of
    this boot opened the copy).
    """
    sockets = Path("/tmp") / f"np-absent-{uuid.uuid4().hex[:12]}"
    assert not sockets.exists()
    services = {}
    for name in SERVICES:
        root = dest / name
        shutil.copytree(node.services.state_dir(name), root / "state")
        token = root / "token"
        token.write_text("a-token\n")
        token.chmod(0o600)
        config = root / "service.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "socketDir": str(sockets / name),
                    "stateDir": str(root / "state"),
                    "tokenFile": str(token),
                    "kernel": node.lab.kernel_url,
                    "runtimeDir": str(root / "run"),
                    # The rig keeps pytest's temporary files on /dev/shm, where a service
                    # refuses a journal unless told it may (labs' ServiceProcess does too).
                    "allowVolatileStateDir": True,
                }
            )
        )
        services[name] = str(config)
    node_config = dest / "node.yaml"
    node_config.write_text(yaml.safe_dump({"services": services}))
    return node_config


def state_files(dest: Path) -> dict[str, dict[str, bytes]]:
    """Every file of every cloned state directory (``clone``), by service."""
    return {name: files_of(dest / name / "state") for name in SERVICES}


def coordinator_config(dest: Path, socket: Path, token: str = "a-token") -> Path:
    """A coordinator config as the coordinator reads it (only its socket and token matter
    to the CLI), and its token file."""
    token_file = dest / "coordinator.token"
    token_file.write_text(f"{token}\n")
    token_file.chmod(0o600)
    path = dest / "coordinator.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "stateDir": str(dest / "coordinator-state"),
                "socket": str(socket),
                "tokenFile": str(token_file),
                "topologies": [str(dest / "topology.yaml")],
                "inventory": str(dest / "inventory.yaml"),
                "plugins": {"macvlan": {"socket": "macvlan.sock", "tokenFile": "links.token"}},
            }
        )
    )
    return path


def with_coordinator(node_config: Path, coordinator: Path | str) -> Path:
    """The node config, naming ``coordinator`` (the coordinator's config) too."""
    document = yaml.safe_load(node_config.read_text())
    node_config.write_text(yaml.safe_dump({**document, "coordinator": str(coordinator)}))
    return node_config


# Values the CLI copies from a journal as the journal has them (a plan, a request, a
# before-image): their keys are the SDK's wire format, not the CLI's to name.
_JOURNAL_VALUES = {"request", "plan", "response", "error", "beforeImage", "outputs"}
_CAMEL = re.compile(r"[a-z][a-zA-Z0-9]*")


def _keys(document: Any, path: str = "$") -> Iterator[tuple[str, str]]:
    if isinstance(document, dict):
        for key, value in document.items():
            yield path, key
            if key not in _JOURNAL_VALUES:
                yield from _keys(value, f"{path}.{key}")
    elif isinstance(document, list):
        for i, item in enumerate(document):
            yield from _keys(item, f"{path}[{i}]")


def camel_case_problems(document: Any) -> list[str]:
    """Every key of a ``-o json`` document that is not camelCase, by path."""
    return [f"{path}.{key}" for path, key in _keys(document) if not _CAMEL.fullmatch(key)]
