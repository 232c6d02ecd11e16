"""Which services the CLI looks at: a node config naming each service's own config file.

The CLI reads the very files the services read (``--config`` of each service), so it
can never disagree with them about a state directory, a socket or a token. The node
config only says which service each file belongs to (the file itself does not: one
format serves all three):

    services:
      networkplugin-links: /etc/dra-networkplugins/networkplugin-links.yaml
      networkplugin-vf: vf.yaml          # relative paths: against this file's directory
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
        }
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


def load_node(path: Path) -> tuple[Service, ...]:
    """The services a node config names, each with its config loaded as the service does."""
    path = path.absolute()
    try:
        document = load_yaml_mapping(path)
        DocumentSchema(_SCHEMA).check(document, str(path))
    except YAMLLoadError as exc:
        raise CtlError(Exit.USAGE, f"node config {exc}") from None
    except DocumentError as exc:
        raise CtlError(Exit.USAGE, f"node config {exc}") from None
    services = []
    for name, value in sorted(document["services"].items()):
        config_path = path.parent / value
        try:
            config = ServiceConfig.load(config_path)
        except NetworkPluginError as exc:
            raise CtlError(Exit.USAGE, f"{name}: {exc}") from None
        registrations = Registry.of(SERVICES[name]).seal()
        services.append(Service(name, config_path, config, registrations))
    return tuple(services)
