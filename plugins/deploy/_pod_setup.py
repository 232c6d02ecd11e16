"""What the DaemonSet's pod-setup init container writes before the programs start.

- The four tokens (``vf``, ``bond``, ``links``, ``coordinator``): the coordinator presents
  a service's token to it, ``networkplugin-ctl`` presents the coordinator's. The programs
  accept only a regular file of their own uid with mode 0600 or stricter, which a Secret
  volume (symlinks) cannot give; so they are made here, random, in the pod's in-memory
  volume, and never leave the pod. A token already there is kept (an init container that
  runs again must not make the running programs' tokens wrong).
- The coordinator's config: the ConfigMap's, with ``kubernetes.nodeName`` set to this
  node (the downward API's ``spec.nodeName``) and ``kubernetes.podUID`` to this pod (its
  ``metadata.uid``: the kubelet sockets of each pod have names of their own, so the old
  and the new pod of a rolling update coexist): the programs expand no variables.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Final

import yaml

from plugins.sdk import YAMLLoadError, load_yaml_documents

__all__ = ["TOKENS", "PodSetupError", "set_up_pod"]

TOKENS: Final = ("vf", "bond", "links", "coordinator")


class PodSetupError(ValueError):
    """The pod cannot be set up: one line naming what is wrong."""


def set_up_pod(
    node_name: str, coordinator_config: Path, out_dir: Path, pod_uid: str | None = None
) -> list[Path]:
    """Write the tokens that are missing and the coordinator's config into ``out_dir``;
    the files written. ``pod_uid``: this pod's (None: the kubelet sockets' plain names)."""
    if not node_name:
        raise PodSetupError("node name is empty (the downward API's spec.nodeName)")
    try:
        documents = load_yaml_documents(coordinator_config.read_bytes(), str(coordinator_config))
    except YAMLLoadError as exc:
        raise PodSetupError(f"coordinator config {exc}") from None
    except OSError as exc:
        raise PodSetupError(f"coordinator config {coordinator_config}: {exc.strerror}") from None
    if len(documents) != 1 or not isinstance(documents[0].get("kubernetes"), dict):
        raise PodSetupError(
            f"coordinator config {coordinator_config}: expected one mapping with a kubernetes section"
        )
    config = documents[0]
    config["kubernetes"]["nodeName"] = node_name
    if pod_uid is not None:
        config["kubernetes"]["podUID"] = pod_uid
    written = []
    for name in TOKENS:
        token = out_dir / f"{name}.token"
        if not token.exists():
            _write(token, secrets.token_hex(32) + "\n")
            written.append(token)
    target = out_dir / "coordinator.yaml"
    _write(target, yaml.safe_dump(config, sort_keys=False))
    written.append(target)
    return written


def _write(path: Path, text: str) -> None:
    """Atomically, mode 0600: a program never reads half a file."""
    staging = path.with_name(f".{path.name}.tmp")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(staging, path)
