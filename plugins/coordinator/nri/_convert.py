"""What the coordinator reads of the runtime's pods and containers, from NRI's messages.

The dataclasses are the adapter's whole vocabulary towards the coordinator; nothing of
protobuf leaks past this module. A message without the identity it must carry (a pod
without an id, a container without an id or pod) is refused here, naming what is
missing, before any handler runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from plugins.api.nri.v1alpha1 import pb

#: The LinuxNamespace type of the pod's network namespace.
NETWORK_NAMESPACE: Final = "network"


class MessageError(ValueError):
    """A call's message lacks what the coordinator needs (it names what)."""


def _frozen(values: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(values))


@dataclass(frozen=True)
class PodSandbox:
    """A pod's sandbox as the runtime reports it."""

    id: str
    name: str
    namespace: str
    uid: str
    #: The network namespace's path (linux.namespaces, type "network"); "" if none.
    netns_path: str
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    annotations: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Container:
    """A container of a sandbox (identity only)."""

    id: str
    sandbox_id: str
    name: str


def sandbox_from_pb(message: pb.PodSandbox, what: str) -> PodSandbox:
    """``message`` as a PodSandbox; ``what`` names the call in the error."""
    if not message.id:
        raise MessageError(f"{what}: the pod sandbox has no id")
    netns = [ns.path for ns in message.linux.namespaces if ns.type == NETWORK_NAMESPACE]
    if len(netns) > 1:
        raise MessageError(
            f"{what}: pod sandbox {message.id} lists {len(netns)} network namespaces"
        )
    return PodSandbox(
        id=message.id,
        name=message.name,
        namespace=message.namespace,
        uid=message.uid,
        netns_path=netns[0] if netns else "",
        labels=_frozen(message.labels),
        annotations=_frozen(message.annotations),
    )


def container_from_pb(message: pb.Container, what: str) -> Container:
    """``message`` as a Container; ``what`` names the call in the error."""
    if not message.id:
        raise MessageError(f"{what}: the container has no id")
    if not message.pod_sandbox_id:
        raise MessageError(f"{what}: container {message.id} names no pod sandbox")
    return Container(id=message.id, sandbox_id=message.pod_sandbox_id, name=message.name)


def required_sandbox(has_pod: bool, message: pb.PodSandbox, what: str) -> PodSandbox:
    """The call's pod, which it must carry."""
    if not has_pod:
        raise MessageError(f"{what}: the call carries no pod sandbox")
    return sandbox_from_pb(message, what)
