"""The coordinator on a Kubernetes node: its pod side (``PodNetworks``) behind the kubelet's
DRA plugin, the runtime's NRI plugin and the API server's client, assembled once for the
program and for the test kit (which gives it simulators instead of the real peers).

The translations live here and only here: kubelet ``ClaimRef`` -> ``PodNetworks.prepare``
(every claim of a request answered, each error a string); NRI ``PodSandbox`` ->
``PodSandboxInfo``; the API's ``ResolvedClaim`` -> ``KubeClaim``; ``DeviceNetwork`` ->
claim status.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from plugins.sdk import NamespaceHandle, NetworkPluginError
from plugins.sdk.runner import NO_CRASH, CrashPoints

from ._allocate import Allocator
from ._compile import CompiledTopology
from ._journal import CoordinatorJournal
from ._kube_config import KubernetesConfig
from ._kube_health import PluginHealthWatch
from ._pod_values import (
    ClaimProblem,
    ClaimSourceUnavailable,
    DeviceNetwork,
    KubeClaim,
    NamespaceResolver,
    PodSandboxInfo,
)
from ._pods import PodNetworks
from ._runtime import Coordinator
from .kubeapi import (
    ApiRefused,
    ApiUnavailable,
    ClaimError,
    ClaimResolver,
    ClaimStatusWriter,
    DeviceStatus,
    SlicePublisher,
    make_client,
)
from .kubelet import (
    ClaimRef,
    DeviceHealthBoard,
    KubeletPlugin,
    PreparedDevice,
    PrepareOutcome,
)
from .nri import Container, PodSandbox

log = logging.getLogger("plugins.coordinator.kubernetes")

BOOT_ID: Final = Path("/proc/sys/kernel/random/boot_id")


def host_namespaces(path: str) -> NamespaceHandle | None:
    """A network namespace's identity on this host: nsfs device and inode, this boot."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    boot_id = BOOT_ID.read_text().strip()
    return NamespaceHandle(path, st.st_dev, st.st_ino, boot_id)


class ApiClaims:
    """``ClaimSource`` over the API server (``kubeapi.ClaimResolver``)."""

    def __init__(self, resolver: ClaimResolver) -> None:
        self._resolver = resolver

    def resolve(self, namespace: str, name: str, uid: str) -> KubeClaim:
        try:
            return self._resolver.resolve(namespace, name, uid).kube_claim()
        except ClaimError as exc:
            raise ClaimProblem(str(exc)) from exc
        except ApiUnavailable as exc:
            raise ClaimSourceUnavailable(f"claim {namespace}/{name}: {exc}") from exc
        except ApiRefused as exc:
            raise ClaimProblem(f"claim {namespace}/{name}: the API server refused: {exc}") from exc


class ApiStatus:
    """``StatusSink``: claim status through server-side apply (``kubeapi``)."""

    def __init__(self, writer: ClaimStatusWriter) -> None:
        self._writer = writer

    def connected(self, claim: KubeClaim, networks: Sequence[DeviceNetwork]) -> None:
        self._writer.report(
            claim.namespace,
            claim.name,
            claim.uid,
            [
                DeviceStatus(
                    n.pool,
                    n.device,
                    n.share_id,
                    interface_name=n.interface_name,
                    hardware_address=n.hardware_address,
                    ips=n.ips,
                )
                for n in networks
            ],
        )

    def disconnected(self, claim: KubeClaim) -> None:
        self._writer.clear(claim.namespace, claim.name, claim.uid)


class KubeletClaims:
    """``ClaimPreparer`` over the pod side: every claim answered, errors as strings."""

    def __init__(self, pods: PodNetworks) -> None:
        self._pods = pods

    def prepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareOutcome]:
        answers: dict[str, PrepareOutcome] = {}
        for ref in claims:
            try:
                devices = self._pods.prepare(ref.namespace, ref.name, ref.uid)
            except NetworkPluginError as exc:
                log.error("prepare claim %s/%s (uid %s): %s", ref.namespace, ref.name, ref.uid, exc)
                answers[ref.uid] = PrepareOutcome(error=f"{exc.code.name}: {exc}")
                continue
            answers[ref.uid] = PrepareOutcome(
                tuple(
                    PreparedDevice((d.request,), d.pool, d.device, share_id=d.share_id)
                    for d in devices
                )
            )
        return answers

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        answers: dict[str, str] = {}
        for ref in claims:
            try:
                self._pods.unprepare(ref.namespace, ref.name, ref.uid)
                answers[ref.uid] = ""
            except NetworkPluginError as exc:
                log.error(
                    "unprepare claim %s/%s (uid %s): %s", ref.namespace, ref.name, ref.uid, exc
                )
                answers[ref.uid] = f"{exc.code.name}: {exc}"
        return answers


def sandbox_info(sandbox: PodSandbox) -> PodSandboxInfo:
    """An NRI ``PodSandbox`` (``plugins.coordinator.nri``) as the pod side sees it."""
    return PodSandboxInfo(
        sandbox.id, sandbox.uid, sandbox.namespace, sandbox.name, sandbox.netns_path
    )


class RuntimeEvents:
    """The NRI plugin's handler over the pod side."""

    def __init__(self, pods: PodNetworks) -> None:
        self._pods = pods

    def synchronize(
        self, sandboxes: Sequence[PodSandbox], containers: Sequence[Container]
    ) -> list[str]:
        return self._pods.synchronize(
            [sandbox_info(s) for s in sandboxes], [(c.id, c.sandbox_id) for c in containers]
        )

    def run_pod_sandbox(self, sandbox: PodSandbox) -> None:
        self._pods.run_pod_sandbox(sandbox_info(sandbox))

    def stop_pod_sandbox(self, sandbox: PodSandbox) -> None:
        self._pods.stop_pod_sandbox(sandbox_info(sandbox))

    def remove_pod_sandbox(self, sandbox: PodSandbox) -> None:
        self._pods.remove_pod_sandbox(sandbox_info(sandbox))

    def create_container(self, sandbox: PodSandbox, container: Container) -> list[str]:
        return self._pods.create_container(sandbox_info(sandbox), container.id)


class KubernetesNode:
    """Everything the coordinator runs to serve a Kubernetes node, started after its
    recovery and stopped before its own server."""

    def __init__(
        self,
        config: KubernetesConfig,
        journal: CoordinatorJournal,
        coordinator: Coordinator,
        topologies: Mapping[str, CompiledTopology],
        allocator: Allocator,
        *,
        resolve_namespace: NamespaceResolver = host_namespaces,
        nri_plugin: Any = None,
        lock: threading.RLock | None = None,
        crash: CrashPoints = NO_CRASH,
    ) -> None:
        """``nri_plugin``: a factory ``(socket, name, index, handler) -> plugin`` with
        ``start``/``stop`` (``plugins.coordinator.nri.NRIPlugin``); None: no NRI."""
        self.config = config
        self.client = make_client(
            config.driver, kubeconfig=config.kubeconfig, server=config.api_server
        )
        self.pods = PodNetworks(
            journal,
            coordinator,
            topologies,
            allocator,
            ApiClaims(ClaimResolver(self.client, config.driver)),
            resolve_namespace,
            pool=config.node_name,
            status=ApiStatus(ClaimStatusWriter(self.client, config.driver)),
            answer_within_s=config.answer_within_seconds,
            lock=lock,
            crash=crash,
        )
        self._allocator = allocator
        self._stopped = False
        self.health = DeviceHealthBoard()
        self.health_watch = PluginHealthWatch(
            coordinator.clients,
            allocator.devices,
            topologies,
            config.node_name,
            self.health,
            interval_s=config.health_interval_seconds,
        )
        self.kubelet = KubeletPlugin(
            config.driver,
            KubeletClaims(self.pods),
            config.plugins_dir,
            config.registry_dir,
            health=self.health,
            instance=config.pod_uid,
        )
        self.slices = SlicePublisher(self.client, config.driver, config.node_name)
        self.nri = (
            None
            if nri_plugin is None or config.nri_socket is None
            else nri_plugin(
                str(config.nri_socket), config.driver, config.nri_index, RuntimeEvents(self.pods)
            )
        )

    def start(self) -> list[str]:
        """Recover the pod side, publish the devices, then let the kubelet and the
        runtime in; the recovery's notes."""
        notes = self.pods.recover()
        if self.config.publish_slices:
            try:
                outcome = self.slices.publish(self._allocator.devices)
                log.info("published %s", outcome)
            except (ApiUnavailable, ApiRefused) as exc:
                # The kubelet's prepares still work for claims allocated earlier; the
                # next start publishes again.
                log.error("ResourceSlices not published: %s", exc)
        self.health_watch.start()
        self.kubelet.start()
        if self.nri is not None:
            self.nri.start()
        return notes

    def stop(self) -> None:
        """Idempotent: the runtime's plugin, then the kubelet's, then the pod side."""
        if self._stopped:
            return
        self._stopped = True
        if self.nri is not None:
            self.nri.stop()
        self.kubelet.stop()
        self.health_watch.stop()
        self.pods.close()
        self.client.close()
