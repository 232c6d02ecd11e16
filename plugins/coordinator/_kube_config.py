"""The ``kubernetes`` section of the coordinator config, read without loading any
Kubernetes client (the program loads those only when the section is there)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ._pods import DEFAULT_ANSWER_WITHIN_S
from ._policy import DRIVER_DOMAIN

DEFAULT_NRI_SOCKET: Final = Path("/var/run/nri/nri.sock")
# The kubelet's defaults (kubelet --root-dir /var/lib/kubelet).
DEFAULT_PLUGINS_DIR: Final = Path("/var/lib/kubelet/plugins")
DEFAULT_REGISTRY_DIR: Final = Path("/var/lib/kubelet/plugins_registry")


@dataclass(frozen=True)
class KubernetesConfig:
    """The ``kubernetes`` section of the coordinator config (docs/kubernetes.md)."""

    node_name: str
    driver: str = DRIVER_DOMAIN
    kubeconfig: Path | None = None
    api_server: str | None = None
    """A plain URL (test rigs); neither this nor ``kubeconfig``: in-cluster."""
    plugins_dir: Path = DEFAULT_PLUGINS_DIR
    registry_dir: Path = DEFAULT_REGISTRY_DIR
    nri_socket: Path | None = DEFAULT_NRI_SOCKET
    """None: no NRI plugin (the sandboxes reach the coordinator some other way)."""
    nri_index: str = "10"
    publish_slices: bool = True
    answer_within_seconds: float = DEFAULT_ANSWER_WITHIN_S
    health_interval_seconds: float = 10.0
    """How often the plugins are asked for the kubelet's device health stream."""
    pod_uid: str | None = None
    """This pod's UID: the kubelet sockets named per pod (a rolling update's handover);
    None: the single-instance names."""

    @classmethod
    def from_config(cls, section: dict[str, Any], base: Path) -> KubernetesConfig:
        """From the schema-checked section; relative paths are relative to ``base``."""
        nri = section.get("nriSocket", str(DEFAULT_NRI_SOCKET))
        return cls(
            node_name=section["nodeName"],
            driver=section.get("driver", DRIVER_DOMAIN),
            kubeconfig=base / section["kubeconfig"] if "kubeconfig" in section else None,
            api_server=section.get("apiServer"),
            plugins_dir=base / section.get("kubeletPluginsDir", DEFAULT_PLUGINS_DIR),
            registry_dir=base / section.get("kubeletRegistryDir", DEFAULT_REGISTRY_DIR),
            nri_socket=None if nri is None else base / nri,
            nri_index=section.get("nriIndex", "10"),
            publish_slices=bool(section.get("publishSlices", True)),
            answer_within_seconds=float(
                section.get("answerWithinSeconds", DEFAULT_ANSWER_WITHIN_S)
            ),
            health_interval_seconds=float(section.get("healthIntervalSeconds", 10.0)),
            pod_uid=section.get("podUID"),
        )
