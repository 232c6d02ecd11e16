"""A plugin the suite reaches only over its socket: a ``WireTarget``, read from a file.

The file (format: ``conformance/schemas/wire-target.schema.json``, docs/file-formats.md)
names the socket and token file, the commands that start, stop and kill the plugin, the
kernel the suite observes (``fake://``: a fake kernel server per check; ``linux://``: a
netns lab on this machine's kernel), and one valid request per hook. Nothing in it is
Python: a plugin in any language is described the same way.
"""

from __future__ import annotations

import dataclasses
import json
import string
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plugins.kernel import LinkChanges, VFChanges
from plugins.sdk import (
    AllocationBinding,
    CleanupRequest,
    ConnectRequest,
    DocumentSchema,
    Hook,
    PreparedState,
    PrepareRequest,
    SandboxHandle,
    Sharing,
    load_yaml_mapping,
)

from .target import envelope

WIRE_TARGET_SCHEMA = "wire-target.schema.json"
PLACEHOLDERS = frozenset({"run", "socket", "tokenFile", "kernel", "python"})
"""What the start command may name; stop and kill may also name ``{pid}``, the socket
and token file only ``{run}``."""


class WireTargetError(ValueError):
    """A target file the suite cannot drive: names the file and every problem."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(problems))
        self.source = source
        self.problems = tuple(problems)


@dataclass(frozen=True)
class Commands:
    start: tuple[str, ...]
    stop: tuple[str, ...] | None = None
    kill: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Tamper:
    """An administrator's change of a node field the plugin set (external-change): a link
    of the node's namespace (``link``) or VF ``vf[1]`` of PF ``vf[0]``, ``changes`` the
    fields of ``LinkChanges`` or ``VFChanges`` it sets."""

    changes: Mapping[str, Any]
    link: str | None = None
    vf: tuple[str, int] | None = None


@dataclass(frozen=True)
class WireTarget:
    """One logical plugin as the wire suite drives it (see ``load_wire_target``)."""

    name: str
    step_kind: str
    socket: str
    token_file: str
    kernel_url: str
    commands: Commands
    directory: Path
    """The target file's directory: where commands run and relative paths start."""
    connect_config: Mapping[str, Any]
    interface_names: Mapping[str, str]
    prepare_config: Mapping[str, Any] | None = None
    allocation: AllocationBinding | None = None
    lab: Path | None = None
    sandbox: str = "pod-a"
    contract_digest: str | None = None
    start_timeout_s: float = 30.0
    tamper: Tamper | None = None
    state_files: tuple[str, ...] = ()
    """The plugin's journal, its first file the journal proper (``{run}`` expanded; empty:
    the journal checks do not apply)."""
    source: str = field(default="", compare=False)

    @property
    def operation_only(self) -> bool:
        return self.step_kind == "Operation"

    @property
    def interface(self) -> str:
        """The first interface the connect assigns: where a foreign link is planted."""
        return next(iter(self.interface_names.values()))

    def expand(self, text: str, values: Mapping[str, str]) -> str:
        return text.format_map(dict(values))

    def prepare(self, op: str, generation: int = 1) -> PrepareRequest:
        assert self.allocation is not None, "an Operation step has no NodePrepare"
        assert self.prepare_config is not None
        return PrepareRequest(
            envelope(Hook.NODE_PREPARE, op, "prep-1", "step-1", generation),
            self.allocation,
            json.dumps(dict(self.prepare_config)),
        )

    def connect(
        self,
        sandbox: SandboxHandle,
        prepared: PreparedState | None,
        op: str,
        *,
        config_json: str | None = None,
        interface_names: Mapping[str, str] | None = None,
    ) -> ConnectRequest:
        return ConnectRequest(
            envelope(Hook.CONNECT_NETWORK, op, "att-1", "step-1"),
            sandbox,
            json.dumps(dict(self.connect_config)) if config_json is None else config_json,
            interface_names=dict(
                self.interface_names if interface_names is None else interface_names
            ),
            prepared=prepared,
            allocation=self.allocation,
        )

    def remove(self, op: str = "remove-1") -> CleanupRequest:
        return CleanupRequest(envelope(Hook.REMOVE_NETWORK, op, "att-1", "step-1"))

    def unprepare(self, op: str = "unprepare-1") -> CleanupRequest:
        return CleanupRequest(envelope(Hook.NODE_UNPREPARE, op, "prep-1", "step-1"))


def _placeholder_problems(where: str, text: str, allowed: frozenset[str]) -> list[str]:
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]
    except ValueError as exc:
        return [f"{where}: {exc}"]
    return [
        f"{where}: unknown placeholder {{{name}}} (known: {', '.join(sorted(allowed))})"
        for name in names
        if name not in allowed
    ]


def _argv(data: Any) -> tuple[str, ...] | None:
    return None if data is None else tuple(str(a) for a in data)


def load_wire_target(path: str | Path) -> WireTarget:
    """Read and check a target file; raises ``WireTargetError`` (or the strict loader's
    ``YAMLLoadError``, or the schema's ``DocumentError``), each naming the file."""
    path = Path(path)
    data = load_yaml_mapping(path)
    DocumentSchema.packaged("conformance", WIRE_TARGET_SCHEMA).check(data, str(path))
    problems: list[str] = []
    requests = data["requests"]
    if data["stepKind"] == "Allocation" and "prepare" not in requests:
        problems.append("$.requests.prepare: required for an Allocation root")
    if data["stepKind"] == "Operation" and "prepare" in requests:
        problems.append("$.requests.prepare: an Operation step has no NodePrepare")
    kernel = data["kernel"]
    directory = path.resolve().parent
    lab = (directory / kernel["lab"]) if "lab" in kernel else None
    if lab is not None and kernel["url"] != "fake://":
        problems.append("$.kernel.lab: only a fake:// kernel starts from a lab file")
    elif lab is not None and not lab.is_file():
        problems.append(f"$.kernel.lab: {lab} is not a file")
    for key in ("socket", "tokenFile"):
        problems += _placeholder_problems(f"$.{key}", data[key], frozenset({"run"}))
    for i, state_file in enumerate(data.get("stateFiles", ())):
        problems += _placeholder_problems(f"$.stateFiles[{i}]", state_file, frozenset({"run"}))
    commands = data["commands"]
    for name, argv in commands.items():
        allowed = PLACEHOLDERS | ({"pid"} if name != "start" else frozenset())
        for i, arg in enumerate(argv):
            problems += _placeholder_problems(f"$.commands.{name}[{i}]", arg, allowed)
    tamper = _tamper(data.get("tamper"), problems)
    if problems:
        raise WireTargetError(str(path), problems)
    allocation = None
    if "prepare" in requests:
        a = requests["prepare"]["allocation"]
        allocation = AllocationBinding(
            a["rootId"],
            a["driver"],
            a["pool"],
            a["device"],
            a["deviceType"],
            Sharing(a["sharing"]),
            a.get("attributes", {}),
            a.get("capacity", {}),
        )
    return WireTarget(
        name=data["plugin"],
        step_kind=data["stepKind"],
        socket=data["socket"],
        token_file=data["tokenFile"],
        kernel_url=kernel["url"],
        commands=Commands(
            _argv(commands["start"]) or (), _argv(commands.get("stop")), _argv(commands.get("kill"))
        ),
        directory=directory,
        connect_config=requests["connect"]["config"],
        interface_names=requests["connect"]["interfaceNames"],
        prepare_config=requests["prepare"]["config"] if "prepare" in requests else None,
        allocation=allocation,
        lab=lab,
        sandbox=data.get("sandbox", "pod-a"),
        contract_digest=data.get("contractDigest"),
        start_timeout_s=float(data.get("startTimeoutSeconds", 30.0)),
        state_files=tuple(data.get("stateFiles", ())),
        tamper=tamper,
        source=str(path),
    )


def _tamper(data: Mapping[str, Any] | None, problems: list[str]) -> Tamper | None:
    """The file's tamper; a field its change type does not have is a problem."""
    if data is None:
        return None
    changes = VFChanges if "vf" in data else LinkChanges
    known = {f.name for f in dataclasses.fields(changes)}
    problems += [
        f"$.tamper.set.{key}: not a field of {changes.__name__} (known: {', '.join(sorted(known))})"
        for key in data["set"]
        if key not in known
    ]
    vf = data.get("vf")
    return Tamper(
        dict(data["set"]), data.get("link"), None if vf is None else (vf["pf"], int(vf["index"]))
    )


def placeholder_values(target: WireTarget, run: Path, kernel_url: str) -> dict[str, str]:
    """``{run}``, ``{python}``, ``{kernel}``, then the socket and token file expanded with them."""
    values = {"run": str(run), "python": sys.executable, "kernel": kernel_url}
    values["socket"] = str(target.directory / target.expand(target.socket, values))
    values["tokenFile"] = str(target.directory / target.expand(target.token_file, values))
    return values
