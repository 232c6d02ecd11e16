"""Which services the CLI looks at: a node config naming each service's own config file.

The CLI reads the very files the services read (``--config`` of each service), so it
can never disagree with them about a state directory, a socket or a token. The node
config only says which service each file belongs to (the file itself does not: one
format serves all three), and where the coordinator's config is (its socket and token):

    services:
      networkplugin-links: /etc/dra-networkplugins/links.yaml
      networkplugin-vf: vf.yaml          # relative paths: against this file's directory
    coordinator: coordinator.yaml        # optional: for ``networkplugin-ctl coordinator``

Which node config: ``--node``, else ``$NETWORKPLUGIN_CTL_NODE``, else the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from plugins.sdk import (
    DocumentError,
    DocumentSchema,
    NetworkPluginError,
    Registration,
    Registry,
    YAMLLoadError,
    load_yaml_mapping,
)
from plugins.sdk.service import ServiceConfig
from plugins.services import SERVICES

from ._errors import CtlError, Exit

DEFAULT_NODE_CONFIG: Final = Path("/etc/dra-networkplugins/node.yaml")
NODE_ENV: Final = "NETWORKPLUGIN_CTL_NODE"
"""The environment variable naming the node config when ``--node`` does not (as KUBECONFIG)."""

_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "required": ["services"],
    "additionalProperties": False,
    "properties": {
        "services": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"enum": sorted(SERVICES)},
            "additionalProperties": {"type": "string", "minLength": 1},
        },
        "coordinator": {"type": "string", "minLength": 1},
    },
}


@dataclass(frozen=True)
class Service:
    """One service of the node: its name, its own config and its logical plugins."""

    name: str
    config_path: Path
    config: ServiceConfig
    registrations: tuple[Registration, ...]

    def socket(self, registration: Registration) -> Path:
        return self.config.socket_dir / registration.endpoint.socket_name

    def registration(self, partition: str) -> Registration | None:
        """The logical plugin whose journal partition (state namespace) is ``partition``."""
        for reg in self.registrations:
            if reg.endpoint.state_namespace == partition:
                return reg
        return None


@dataclass(frozen=True)
class NodeConfig:
    """A node config, read and checked; each service's and the coordinator's config path."""

    path: Path
    service_configs: Mapping[str, Path]
    coordinator_config: Path | None
    origin: str = ""  # where the path came from when not --node (for the error lines)

    @classmethod
    def load(cls, path: Path, *, origin: str = "") -> NodeConfig:
        path = path.absolute()
        named = f" (named by {origin})" if origin else ""
        try:
            document = load_yaml_mapping(path)
            DocumentSchema(_SCHEMA).check(document, str(path))
        except (YAMLLoadError, DocumentError) as exc:
            raise CtlError(Exit.USAGE, f"node config {exc}{named}") from None
        services = {name: path.parent / value for name, value in document["services"].items()}
        coordinator = document.get("coordinator")
        return cls(
            path,
            dict(sorted(services.items())),
            None if coordinator is None else path.parent / coordinator,
            origin,
        )

    def services(self) -> tuple[Service, ...]:
        """The services it names, each with its config loaded as the service does."""
        loaded = []
        for name, config_path in self.service_configs.items():
            try:
                config = ServiceConfig.load(config_path)
            except NetworkPluginError as exc:
                raise CtlError(Exit.USAGE, f"{name}: {exc}") from None
            registrations = Registry.of(SERVICES[name]).seal()
            loaded.append(Service(name, config_path, config, registrations))
        return tuple(loaded)


def node_config_path(flag: Path | None, environ: Mapping[str, str]) -> tuple[Path, str]:
    """The node config to read and where its name came from: ``--node``, else
    ``$NETWORKPLUGIN_CTL_NODE`` (unless empty, as an empty KUBECONFIG), else the default."""
    if flag is not None:
        return flag, ""
    named = environ.get(NODE_ENV, "")
    if named:
        return Path(named), f"${NODE_ENV}"
    return DEFAULT_NODE_CONFIG, ""


def load_node(path: Path) -> tuple[Service, ...]:
    """The services a node config names, each with its config loaded as the service does."""
    return NodeConfig.load(path).services()
