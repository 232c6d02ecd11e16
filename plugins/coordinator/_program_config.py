"""The coordinator program's config: one strict YAML file, checked before anything is created.

The same pattern as the plugin services' config (``plugins.sdk.service.ServiceConfig``):
the strict loader (a repeated key, an alias or a non-JSON tag is refused with its line and
column), then the format's JSON Schema
(``plugins/coordinator/schemas/coordinator-config.schema.json``, every problem named with
its path and rule), then the checks a schema cannot make, into a frozen value. Relative
paths are relative to the config file's directory. Every refusal is one
:class:`~plugins.sdk.service.StartupRefused` naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn

from plugins.sdk import DocumentError, DocumentSchema, YAMLLoadError, load_yaml_mapping
from plugins.sdk.host import MAX_SOCKET_PATH, SOCKET_NAME, STAGING_EXTRA, socket_path_fits
from plugins.sdk.service import StartupRefused, default_writer_wait, unexpanded_path
from plugins.sdk.telemetry import LogFormat, MetricsConfig

from ._kube_config import KubernetesConfig

CONFIG_SCHEMA: Final = "coordinator-config.schema.json"


@dataclass(frozen=True)
class PluginEndpoint:
    """One logical plugin the coordinator calls: its socket and its registration's token."""

    name: str
    socket: Path
    token_file: Path


@dataclass(frozen=True)
class CoordinatorConfig:
    """The administrator-owned coordinator config (docs/coordinator.md, "The program")."""

    state_dir: Path
    socket: Path
    token_file: Path
    topologies: tuple[Path, ...]
    inventory: Path
    plugins: tuple[PluginEndpoint, ...]
    policies: Path | None = None
    runtime_dir: Path | None = None  # None: the socket's directory
    epoch: int = 1
    call_timeout_seconds: float = 60.0
    plugin_wait_seconds: float = 30.0
    shutdown_grace_seconds: float = 10.0
    writer_lock_wait_seconds: float | None = None  # None: default_writer_wait(grace)
    allow_volatile_state_dir: bool = False  # a journal on tmpfs or under /run: test rigs only
    log_format: LogFormat = "text"
    metrics: MetricsConfig | None = None  # None (the default): no metrics at all
    kubernetes: KubernetesConfig | None = None  # None (the default): not a Kubernetes node
    path: Path | None = None  # the file it was loaded from

    @property
    def where(self) -> str:
        """``coordinator config FILE``: how a refusal names this config."""
        return f"coordinator config {self.path}" if self.path is not None else "coordinator config"

    @property
    def writer_wait(self) -> float:
        """How long startup waits for another process holding the journal's writer lock
        (a previous instance still stopping) before it refuses."""
        if self.writer_lock_wait_seconds is not None:
            return self.writer_lock_wait_seconds
        return default_writer_wait(self.shutdown_grace_seconds)

    @property
    def lease_dir(self) -> Path:
        """Where the journal keeps the lease of this boot."""
        return self.runtime_dir if self.runtime_dir is not None else self.socket.parent

    @classmethod
    def load(cls, path: Path) -> CoordinatorConfig:
        def refuse(problem: str) -> NoReturn:
            raise StartupRefused(f"coordinator config {path}: {' '.join(problem.split())}")

        try:
            data = load_yaml_mapping(path)
        except YAMLLoadError as exc:
            where = f" (line {exc.line}, column {exc.column})" if exc.line else ""
            refuse(f"not valid YAML: {exc.problem}{where}")
        except OSError as exc:
            refuse(exc.strerror or str(exc))
        try:
            DocumentSchema.packaged("plugins.coordinator", CONFIG_SCHEMA).check(data, str(path))
        except DocumentError as exc:
            refuse("; ".join(exc.lines))
        data = {k: v for k, v in data.items() if v is not None}  # null takes the default
        unexpanded = unexpanded_path(_path_values(data), "coordinator")
        if unexpanded is not None:
            refuse(unexpanded)
        base = path.parent
        socket = base / data["socket"]
        if SOCKET_NAME.fullmatch(socket.name) is None:
            refuse(f"$.socket: {socket.name!r} must be a plain socket name like 'coordinator.sock'")
        # Bound at a staging name first, as the services' sockets are.
        if not socket_path_fits(socket):
            refuse(f"$.socket: {socket} is longer than {MAX_SOCKET_PATH - STAGING_EXTRA} bytes")
        plugins = tuple(
            _plugin(base, name, entry) for name, entry in sorted(data["plugins"].items())
        )
        for plugin in plugins:  # only connected to: the whole sun_path
            if len(os.fsencode(plugin.socket)) > MAX_SOCKET_PATH:
                refuse(
                    f"$.plugins.{plugin.name}.socket: {plugin.socket} is longer than "
                    f"{MAX_SOCKET_PATH} bytes, the most a Unix socket path holds"
                )
        return cls(
            state_dir=base / data["stateDir"],
            socket=socket,
            token_file=base / data["tokenFile"],
            topologies=tuple(base / t for t in data["topologies"]),
            inventory=base / data["inventory"],
            plugins=plugins,
            policies=base / data["policies"] if "policies" in data else None,
            runtime_dir=base / data["runtimeDir"] if "runtimeDir" in data else None,
            epoch=int(data.get("epoch", 1)),
            call_timeout_seconds=float(data.get("callTimeoutSeconds", 60.0)),
            plugin_wait_seconds=float(data.get("pluginWaitSeconds", 30.0)),
            shutdown_grace_seconds=float(data.get("shutdownGraceSeconds", 10.0)),
            writer_lock_wait_seconds=(
                float(data["writerLockWaitSeconds"]) if "writerLockWaitSeconds" in data else None
            ),
            allow_volatile_state_dir=bool(data.get("allowVolatileStateDir", False)),
            log_format=data.get("logFormat", "text"),
            metrics=MetricsConfig.from_config(data.get("metrics"), base),
            kubernetes=(
                KubernetesConfig.from_config(data["kubernetes"], base)
                if "kubernetes" in data
                else None
            ),
            path=path,
        )


def _plugin(base: Path, name: str, entry: dict[str, Any]) -> PluginEndpoint:
    return PluginEndpoint(name, base / entry["socket"], base / entry["tokenFile"])


def _path_values(data: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(key path, value)`` of every path the (schema-checked) config names."""
    for key in ("stateDir", "runtimeDir", "socket", "tokenFile", "policies", "inventory"):
        if key in data:
            yield key, data[key]
    for i, topology in enumerate(data["topologies"]):
        yield f"topologies[{i}]", topology
    for name, entry in sorted(data["plugins"].items()):
        yield f"plugins.{name}.socket", entry["socket"]
        yield f"plugins.{name}.tokenFile", entry["tokenFile"]
    for key in ("kubeconfig", "kubeletPluginsDir", "kubeletRegistryDir", "nriSocket"):
        value = (data.get("kubernetes") or {}).get(key)
        if isinstance(value, str):
            yield f"kubernetes.{key}", value
    if "textfile" in data.get("metrics", {}):
        yield "metrics.textfile", data["metrics"]["textfile"]
