"""``KubeletSim``: the kubelet as a DRA driver sees it, written from the public protocols.

What it does, in the kubelet's way:

- **Plugin watcher.** A thread scans the registry directory. Names starting with ``.``
  and files that are not sockets are ignored (a plugin binds under a dot name and links
  the socket into place). A new socket, or one re-created under the same name (a new
  inode), is dialled: ``GetInfo``, then validation (type ``DRAPlugin``; a non-empty
  name; a supported version this kubelet speaks, the first of ``speaks`` wins, so v1
  before v1beta1; the endpoint, or the registration socket when it names none, an
  absolute path to a socket), then ``NotifyRegistrationStatus`` with the verdict. A
  socket that goes away deregisters the driver it registered. A socket that does not
  answer is tried again at the next scan; a rejected one when it is re-created or the
  rejection is lifted (the real kubelet retries with backoff instead).
- **Prepare and unprepare.** Claims are grouped by driver, one RPC per driver with a
  45 s deadline (the kubelet's). A claim already prepared for another pod only gains the
  pod; a claim is unprepared only when the last pod using it is done. Which pods use
  which claims is kept in a JSON checkpoint written atomically (temporary file, fsync,
  rename, fsync of the directory) with a checksum, before and after each RPC.
- **Restart.** A new ``KubeletSim`` on the same checkpoint is the restarted kubelet:
  ``restart_recovery()`` prepares every claim a pod still uses again, which a driver
  must answer idempotently.

Records for tests: ``registrations``, ``rejections``, ``deregistrations`` and ``calls``
(each DRA RPC sent). ``reject`` makes validation refuse every plugin with that reason.

Its codec is the generated protobuf modules only: nothing of the adapter under test
(``plugins.coordinator.kubelet``) is used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import grpc

from plugins.api.kubelet.dra.v1 import dra_pb2 as v1
from plugins.api.kubelet.dra.v1 import dra_pb2_grpc as v1_grpc
from plugins.api.kubelet.dra.v1beta1 import dra_pb2 as v1beta1
from plugins.api.kubelet.dra.v1beta1 import dra_pb2_grpc as v1beta1_grpc
from plugins.api.kubelet.drahealth.v1alpha1 import health_pb2 as health_pb
from plugins.api.kubelet.drahealth.v1alpha1 import health_pb2_grpc as health_grpc
from plugins.api.kubelet.pluginregistration.v1 import registration_pb2 as reg_pb
from plugins.api.kubelet.pluginregistration.v1 import registration_pb2_grpc as reg_grpc

__all__ = [
    "DRA_CALL_TIMEOUT_S",
    "KUBELET_VERSIONS",
    "CheckpointError",
    "ClaimResult",
    "Deregistration",
    "DriverCall",
    "HealthWatch",
    "KubeletSim",
    "PodClaim",
    "Registration",
    "Rejection",
    "SimDevice",
]

log = logging.getLogger("harness.k8s.kubelet")

DRA_CALL_TIMEOUT_S: Final = 45.0
"""The kubelet's deadline for one NodePrepareResources/NodeUnprepareResources call."""
KUBELET_VERSIONS: Final = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
"""The DRA services a current kubelet speaks, in its order of preference."""
_REGISTRATION_TIMEOUT_S: Final = 5.0
_CHECKPOINT_VERSION: Final = 1


@dataclass(frozen=True)
class PodClaim:
    """A claim of a pod, as the kubelet reads it from the pod's status: which driver
    allocated it, and the claim's uid, namespace and name."""

    driver: str
    uid: str
    namespace: str
    name: str


@dataclass(frozen=True)
class SimDevice:
    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...] = ()
    share_id: str | None = None
    """``None`` when the driver did not set it (always on v1beta1, which lacks it)."""


@dataclass(frozen=True)
class ClaimResult:
    """A claim's prepare: its devices or an error; ``sent`` False when no RPC was made
    for it (already prepared for another pod, or its driver is not registered)."""

    devices: tuple[SimDevice, ...] = ()
    error: str = ""
    sent: bool = True


@dataclass(frozen=True)
class Registration:
    driver: str
    endpoint: str
    version: str
    socket: Path


@dataclass(frozen=True)
class Rejection:
    socket: Path
    driver: str
    reason: str


@dataclass(frozen=True)
class Deregistration:
    driver: str
    socket: Path


@dataclass(frozen=True)
class DriverCall:
    """One DRA RPC sent: ``method`` is ``NodePrepareResources`` or ``NodeUnprepareResources``."""

    method: str
    driver: str
    version: str
    claim_uids: tuple[str, ...]


class CheckpointError(ValueError):
    """The checkpoint cannot be read as this kubelet wrote it."""


@dataclass
class _ClaimState:
    driver: str
    namespace: str
    name: str
    pods: set[str] = field(default_factory=set)
    prepared: bool = False
    devices: tuple[SimDevice, ...] = ()


@dataclass
class _Seen:
    """A socket the watcher has handled: its inode and the verdict."""

    inode: int
    driver: str
    rejected: bool


# -- checkpoint -----------------------------------------------------------------------


def _claims_to_json(claims: Mapping[str, _ClaimState]) -> dict[str, Any]:
    return {
        uid: {
            "driver": c.driver,
            "namespace": c.namespace,
            "name": c.name,
            "pods": sorted(c.pods),
            "prepared": c.prepared,
            "devices": [
                {
                    "requests": list(d.requests),
                    "pool": d.pool,
                    "device": d.device,
                    "cdi_device_ids": list(d.cdi_device_ids),
                    "share_id": d.share_id,
                }
                for d in c.devices
            ],
        }
        for uid, c in sorted(claims.items())
    }


def _checksum(claims_json: Mapping[str, Any]) -> str:
    canonical = json.dumps(claims_json, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def write_checkpoint(path: Path, claims: Mapping[str, _ClaimState]) -> None:
    body = _claims_to_json(claims)
    data = {"version": _CHECKPOINT_VERSION, "claims": body, "checksum": _checksum(body)}
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_checkpoint(path: Path) -> dict[str, _ClaimState]:
    """The claims of ``path``; none if it does not exist yet."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {path}: unreadable: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != _CHECKPOINT_VERSION:
        raise CheckpointError(f"checkpoint {path}: not a version {_CHECKPOINT_VERSION} checkpoint")
    body = data.get("claims")
    if not isinstance(body, dict) or data.get("checksum") != _checksum(body):
        raise CheckpointError(f"checkpoint {path}: checksum mismatch (the file was damaged)")
    claims = {}
    for uid, c in body.items():
        claims[uid] = _ClaimState(
            driver=c["driver"],
            namespace=c["namespace"],
            name=c["name"],
            pods=set(c["pods"]),
            prepared=c["prepared"],
            devices=tuple(
                SimDevice(
                    requests=tuple(d["requests"]),
                    pool=d["pool"],
                    device=d["device"],
                    cdi_device_ids=tuple(d["cdi_device_ids"]),
                    share_id=d["share_id"],
                )
                for d in c["devices"]
            ),
        )
    return claims


# -- the simulator --------------------------------------------------------------------


class KubeletSim:
    """The kubelet's plugin watcher and DRA manager over ``registry_dir`` and
    ``checkpoint_path``. ``speaks`` lists the DRA versions this kubelet speaks, preferred
    first (``("v1beta1.DRAPlugin",)`` is an older kubelet)."""

    def __init__(
        self,
        registry_dir: Path | str,
        checkpoint_path: Path | str,
        *,
        speaks: Sequence[str] = KUBELET_VERSIONS,
        reject: str | None = None,
        call_timeout: float = DRA_CALL_TIMEOUT_S,
        scan_interval: float = 0.05,
    ) -> None:
        unknown = [v for v in speaks if v not in KUBELET_VERSIONS]
        if not speaks or unknown:
            raise ValueError(
                f"speaks: {unknown or 'nothing'}; a kubelet speaks some of {KUBELET_VERSIONS}"
            )
        self.registry_dir = Path(registry_dir)
        self.checkpoint_path = Path(checkpoint_path)
        self._speaks = tuple(speaks)
        self._call_timeout = call_timeout
        self._scan_interval = scan_interval
        self._claims = read_checkpoint(self.checkpoint_path)
        self._ops = threading.Lock()  # one prepare/unprepare at a time, as the claim cache
        self._changed = threading.Condition()
        self._reject = reject
        self._seen: dict[str, _Seen] = {}
        self._registered: dict[str, Registration] = {}
        self.registrations: list[Registration] = []
        self.rejections: list[Rejection] = []
        self.deregistrations: list[Deregistration] = []
        self.calls: list[DriverCall] = []
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="kubelet-sim-watcher")
        self._watcher.start()

    # -- lifecycle

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher.is_alive() and self._watcher is not threading.current_thread():
            self._watcher.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- registration

    def reject_registrations(self, reason: str | None) -> None:
        """Refuse every plugin with ``reason`` from now on (``None``: validate normally).
        Sockets refused so far are tried again at the next scan."""
        with self._changed:
            self._reject = reason
            for name in [n for n, s in self._seen.items() if s.rejected]:
                del self._seen[name]

    def registered(self, driver: str) -> Registration | None:
        with self._changed:
            return self._registered.get(driver)

    def wait_registered(self, driver: str, timeout: float) -> Registration:
        """The driver's registration once it is registered; ``TimeoutError`` naming what
        happened instead."""
        with self._changed:
            if self._changed.wait_for(lambda: driver in self._registered, timeout):
                return self._registered[driver]
            refused = [r.reason for r in self.rejections if r.driver == driver]
        raise TimeoutError(
            f"DRA driver {driver!r} not registered within {timeout} s"
            + (f"; refused: {refused[-1]}" if refused else "")
        )

    def wait_for(self, predicate: Callable[[], object], timeout: float) -> bool:
        """Wait, under the sim's lock, until ``predicate()`` holds (records change under it)."""
        with self._changed:
            return bool(self._changed.wait_for(predicate, timeout))

    def _watch(self) -> None:
        while not self._stopping.is_set():
            try:
                self._scan()
            except Exception:
                log.exception("plugin watcher: scan of %s failed", self.registry_dir)
            self._stopping.wait(self._scan_interval)

    def _scan(self) -> None:
        present: dict[str, int] = {}
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.registry_dir):
                if entry.name.startswith("."):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISSOCK(st.st_mode):
                    present[entry.name] = st.st_ino
        with self._changed:
            gone = [n for n, s in self._seen.items() if present.get(n) != s.inode]
        for name in gone:
            self._deregister(name)
        for name, inode in sorted(present.items()):
            with self._changed:
                if name in self._seen:
                    continue
            self._register(self.registry_dir / name, inode)

    def _deregister(self, name: str) -> None:
        socket_path = self.registry_dir / name
        with self._changed:
            seen = self._seen.pop(name)
            current = self._registered.get(seen.driver)
            if seen.rejected or current is None or current.socket != socket_path:
                return
            del self._registered[seen.driver]
            self.deregistrations.append(Deregistration(seen.driver, socket_path))
            self._changed.notify_all()
        log.info("deregistered DRA driver %s (%s is gone)", seen.driver, socket_path)

    def _register(self, socket_path: Path, inode: int) -> None:
        with grpc.insecure_channel(f"unix:{socket_path}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            try:
                info = stub.GetInfo(
                    reg_pb.InfoRequest(), timeout=_REGISTRATION_TIMEOUT_S, wait_for_ready=True
                )
            except grpc.RpcError as exc:
                log.info(
                    "plugin watcher: GetInfo on %s failed (%s); next scan retries",
                    socket_path,
                    _describe(exc),
                )
                return
            verdict = self._validate(socket_path, info)
            if isinstance(verdict, str):
                outcome: Registration | Rejection = Rejection(socket_path, info.name, verdict)
                status = reg_pb.RegistrationStatus(plugin_registered=False, error=verdict)
            else:
                outcome = verdict
                status = reg_pb.RegistrationStatus(plugin_registered=True)
            try:
                stub.NotifyRegistrationStatus(status, timeout=_REGISTRATION_TIMEOUT_S)
            except grpc.RpcError as exc:
                # The kubelet registers the plugin even when the notification fails.
                log.warning(
                    "plugin watcher: NotifyRegistrationStatus on %s failed: %s",
                    socket_path,
                    _describe(exc),
                )
        with self._changed:
            rejected = isinstance(outcome, Rejection)
            self._seen[socket_path.name] = _Seen(inode, info.name, rejected)
            if isinstance(outcome, Rejection):
                self.rejections.append(outcome)
            else:
                self._registered[outcome.driver] = outcome
                self.registrations.append(outcome)
            self._changed.notify_all()
        log.info("plugin watcher: %s: %s", socket_path, outcome)

    def _validate(self, socket_path: Path, info: reg_pb.PluginInfo) -> Registration | str:
        """The registration, or why it is refused (wording after the kubelet's)."""
        if info.type != "DRAPlugin":
            return f"no handler registered for plugin type: {info.type!r}"
        if not info.name:
            return "plugin validation failed: the plugin name is empty"
        version = next((v for v in self._speaks if v in info.supported_versions), None)
        if version is None:
            return (
                f"plugin validation failed: none of the versions {list(info.supported_versions)}"
                f" is one of {list(self._speaks)}"
            )
        endpoint = info.endpoint or str(socket_path)
        try:
            is_socket = os.path.isabs(endpoint) and stat.S_ISSOCK(os.lstat(endpoint).st_mode)
        except OSError:
            is_socket = False
        if not is_socket:
            return f"plugin validation failed: endpoint {endpoint!r} is not an absolute path to a socket"
        with self._changed:
            reject = self._reject
        if reject is not None:
            return reject
        return Registration(info.name, endpoint, version, socket_path)

    # -- prepare / unprepare

    def prepare(self, pod_uid: str, claims: Iterable[PodClaim]) -> dict[str, ClaimResult]:
        """Prepare the pod's claims; a result per claim uid."""
        with self._ops:
            results: dict[str, ClaimResult] = {}
            batches: dict[str, list[PodClaim]] = {}
            for claim in claims:
                if claim.uid in results or any(claim in b for b in batches.values()):
                    continue
                state = self._claims.get(claim.uid)
                if state is None:
                    state = _ClaimState(claim.driver, claim.namespace, claim.name)
                    self._claims[claim.uid] = state
                elif (state.driver, state.namespace, state.name) != (
                    claim.driver,
                    claim.namespace,
                    claim.name,
                ):
                    results[claim.uid] = ClaimResult(
                        error=f"claim uid {claim.uid} is {state.namespace}/{state.name} of "
                        f"{state.driver}, not {claim.namespace}/{claim.name} of {claim.driver}",
                        sent=False,
                    )
                    continue
                state.pods.add(pod_uid)
                if state.prepared:
                    results[claim.uid] = ClaimResult(devices=state.devices, sent=False)
                else:
                    batches.setdefault(claim.driver, []).append(claim)
            # The pod's references are durable before any driver is asked.
            write_checkpoint(self.checkpoint_path, self._claims)
            for driver, batch in batches.items():
                for uid, result in self._send_prepare(driver, batch).items():
                    results[uid] = result
                    if not result.error:
                        self._claims[uid].prepared = True
                        self._claims[uid].devices = result.devices
            write_checkpoint(self.checkpoint_path, self._claims)
            return results

    def unprepare(self, pod_uid: str, claims: Iterable[PodClaim]) -> dict[str, str]:
        """The pod is done with its claims; an error per claim uid (``""``: done, or still
        used by another pod, or never prepared here). A claim is unprepared, and
        forgotten, only when its last pod is done."""
        with self._ops:
            results: dict[str, str] = {}
            batches: dict[str, list[PodClaim]] = {}
            for claim in claims:
                state = self._claims.get(claim.uid)
                results[claim.uid] = ""
                if state is None:
                    continue
                state.pods.discard(pod_uid)
                if not state.pods:
                    known = PodClaim(state.driver, claim.uid, state.namespace, state.name)
                    if known not in batches.get(state.driver, []):
                        batches.setdefault(state.driver, []).append(known)
            write_checkpoint(self.checkpoint_path, self._claims)
            for driver, batch in batches.items():
                for uid, error in self._send_unprepare(driver, batch).items():
                    results[uid] = error
                    if not error:
                        del self._claims[uid]
            write_checkpoint(self.checkpoint_path, self._claims)
            return results

    def restart_recovery(self, timeout: float = 10.0) -> dict[str, ClaimResult]:
        """After a restart: prepare again every claim a pod still uses, once its driver
        has registered (up to ``timeout`` s each). A driver must answer idempotently."""
        with self._ops:
            batches: dict[str, list[PodClaim]] = {}
            for uid, state in sorted(self._claims.items()):
                if state.pods:
                    claim = PodClaim(state.driver, uid, state.namespace, state.name)
                    batches.setdefault(state.driver, []).append(claim)
            results: dict[str, ClaimResult] = {}
            for driver, batch in batches.items():
                self._wait_driver(driver, timeout)
                for uid, result in self._send_prepare(driver, batch).items():
                    results[uid] = result
                    if not result.error:
                        self._claims[uid].prepared = True
                        self._claims[uid].devices = result.devices
            write_checkpoint(self.checkpoint_path, self._claims)
            return results

    def _wait_driver(self, driver: str, timeout: float) -> None:
        with self._changed:
            self._changed.wait_for(lambda: driver in self._registered, timeout)

    def pods_of(self, claim_uid: str) -> set[str]:
        """The pods the checkpoint records as using the claim (empty: not known)."""
        with self._ops:
            state = self._claims.get(claim_uid)
            return set(state.pods) if state else set()

    def _target(self, driver: str) -> Registration | str:
        with self._changed:
            registration = self._registered.get(driver)
        if registration is None:
            return f"DRA driver {driver} is not registered"
        return registration

    def _record(self, call: DriverCall) -> None:
        with self._changed:
            self.calls.append(call)
            self._changed.notify_all()

    def _send_prepare(self, driver: str, batch: Sequence[PodClaim]) -> dict[str, ClaimResult]:
        target = self._target(driver)
        if isinstance(target, str):
            return {c.uid: ClaimResult(error=target, sent=False) for c in batch}
        beta = target.version == "v1beta1.DRAPlugin"
        self._record(DriverCall("NodePrepareResources", driver, target.version, _uids(batch)))
        try:
            with grpc.insecure_channel(f"unix:{target.endpoint}") as channel:
                response: v1.NodePrepareResourcesResponse | v1beta1.NodePrepareResourcesResponse
                if beta:
                    response = v1beta1_grpc.DRAPluginStub(channel).NodePrepareResources(
                        v1beta1.NodePrepareResourcesRequest(
                            claims=[
                                v1beta1.Claim(namespace=c.namespace, uid=c.uid, name=c.name)
                                for c in batch
                            ]
                        ),
                        timeout=self._call_timeout,
                    )
                else:
                    response = v1_grpc.DRAPluginStub(channel).NodePrepareResources(
                        v1.NodePrepareResourcesRequest(
                            claims=[
                                v1.Claim(namespace=c.namespace, uid=c.uid, name=c.name)
                                for c in batch
                            ]
                        ),
                        timeout=self._call_timeout,
                    )
        except grpc.RpcError as exc:
            failure = f"NodePrepareResources: {_describe(exc)}"
            return {c.uid: ClaimResult(error=failure) for c in batch}
        results: dict[str, ClaimResult] = {}
        for claim in batch:
            if claim.uid not in response.claims:
                results[claim.uid] = ClaimResult(error="missing from the driver's response")
                continue
            entry = response.claims[claim.uid]
            if entry.error:
                results[claim.uid] = ClaimResult(error=entry.error)
                continue
            results[claim.uid] = ClaimResult(devices=tuple(_sim_device(d) for d in entry.devices))
        return results

    def _send_unprepare(self, driver: str, batch: Sequence[PodClaim]) -> dict[str, str]:
        target = self._target(driver)
        if isinstance(target, str):
            return {c.uid: target for c in batch}
        self._record(DriverCall("NodeUnprepareResources", driver, target.version, _uids(batch)))
        try:
            with grpc.insecure_channel(f"unix:{target.endpoint}") as channel:
                response: v1.NodeUnprepareResourcesResponse | v1beta1.NodeUnprepareResourcesResponse
                if target.version == "v1beta1.DRAPlugin":
                    response = v1beta1_grpc.DRAPluginStub(channel).NodeUnprepareResources(
                        v1beta1.NodeUnprepareResourcesRequest(
                            claims=[
                                v1beta1.Claim(namespace=c.namespace, uid=c.uid, name=c.name)
                                for c in batch
                            ]
                        ),
                        timeout=self._call_timeout,
                    )
                else:
                    response = v1_grpc.DRAPluginStub(channel).NodeUnprepareResources(
                        v1.NodeUnprepareResourcesRequest(
                            claims=[
                                v1.Claim(namespace=c.namespace, uid=c.uid, name=c.name)
                                for c in batch
                            ]
                        ),
                        timeout=self._call_timeout,
                    )
        except grpc.RpcError as exc:
            failure = f"NodeUnprepareResources: {_describe(exc)}"
            return {c.uid: failure for c in batch}
        return {
            c.uid: response.claims[c.uid].error
            if c.uid in response.claims
            else "missing from the driver's response"
            for c in batch
        }

    # -- health

    def watch_health(self, driver: str) -> HealthWatch:
        """Open the driver's ``NodeWatchResources`` stream (use it in ``with``)."""
        target = self._target(driver)
        if isinstance(target, str):
            raise LookupError(target)
        return HealthWatch(target.endpoint)


def _sim_device(d: v1.Device | v1beta1.Device) -> SimDevice:
    share_id = d.share_id if isinstance(d, v1.Device) and d.HasField("share_id") else None
    return SimDevice(
        requests=tuple(d.request_names),
        pool=d.pool_name,
        device=d.device_name,
        cdi_device_ids=tuple(d.cdi_device_ids),
        share_id=share_id,
    )


def _uids(batch: Sequence[PodClaim]) -> tuple[str, ...]:
    return tuple(c.uid for c in batch)


def _describe(exc: grpc.RpcError) -> str:
    if isinstance(exc, grpc.Call):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc)


_HEALTH_NAMES: Final = {
    health_pb.HEALTHY: "Healthy",
    health_pb.UNHEALTHY: "Unhealthy",
    health_pb.UNKNOWN: "Unknown",
}


class HealthWatch:
    """One ``NodeWatchResources`` stream, read by a thread into a queue."""

    def __init__(self, endpoint: str) -> None:
        self._channel = grpc.insecure_channel(f"unix:{endpoint}")
        stub = health_grpc.DRAResourceHealthStub(self._channel)
        self._stream = stub.NodeWatchResources(health_pb.NodeWatchResourcesRequest())
        self._updates: queue.Queue[list[tuple[str, str, str]] | BaseException] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="kubelet-sim-health")
        self._reader.start()

    def _read(self) -> None:
        try:
            for response in self._stream:
                self._updates.put(
                    [
                        (d.device.pool_name, d.device.device_name, _HEALTH_NAMES[d.health])
                        for d in response.devices
                    ]
                )
        except grpc.RpcError as exc:
            self._updates.put(exc)

    def next_update(self, timeout: float) -> list[tuple[str, str, str]]:
        """The next complete list, as ``(pool, device, health)``."""
        deadline = time.monotonic() + timeout
        try:
            item = self._updates.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"no health update within {timeout} s") from None
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        # Closing the channel cancels the stream; the reader then sees CANCELLED and ends.
        self._channel.close()
        self._reader.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
