"""The coordinator as a kubelet DRA plugin: the DRA socket, then the registration socket.

Order matters both ways. The kubelet dials the endpoint that ``GetInfo`` names as soon
as it has registered us, so the DRA socket is served before the registration socket
appears; at stop the registration socket goes first, so the kubelet deregisters us
before the DRA socket stops answering.

Both sockets are bound as the node's other sockets are (``plugins.sdk.host``): a stale
socket is removed only if it is a socket and nothing answers on it; the server binds a
staging name (a dot directory, which the kubelet's watcher ignores) and hard-links it
into place, so the watcher never sees a socket that is not yet served, and at stop only
the file we linked is removed. Directories we create are 0750 (the kubelet reads them
as root; group for an operator's tools); existing ones are left as they are, being the
kubelet's.

**Rolling updates.** With an ``instance`` (the pod's UID) both sockets are named per
instance, as the upstream helper's ``RollingUpdate`` option names them:
``<registry_dir>/<driver>-<instance>-reg.sock`` and ``<plugins_dir>/<driver>/dra-<instance>.sock``.
A new coordinator's sockets then never replace the old one's: a kubelet that supports
rolling updates (1.33 and later) keeps every registered instance of a driver, calls the
most recently registered, and falls back to another when one's socket goes. Once the
kubelet has registered this instance, the sockets of other instances of the driver that
nobody answers on (left by a coordinator that was killed) are removed, so the kubelet
forgets them; one that answers is left alone. Not before: the kubelet keeps calling the
newest instance it registered, and a dead one removed first would leave it none until
this one is registered. Without an instance the names are ``<driver>-reg.sock`` and
``dra.sock``.

Out of scope: a registration socket deleted while we run is not re-created (the kubelet
would deregister us; restart the coordinator). The health service is served only when
a ``HealthSource`` is given; a kubelet with resource health on then logs Unimplemented.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Final, Self

import grpc

from plugins.api.kubelet.dra.v1 import dra_pb2_grpc as v1_grpc
from plugins.api.kubelet.dra.v1beta1 import dra_pb2_grpc as v1beta1_grpc
from plugins.api.kubelet.drahealth.v1alpha1 import health_pb2_grpc as health_grpc
from plugins.api.kubelet.pluginregistration.v1 import registration_pb2_grpc as registration_grpc
from plugins.sdk import RegistrationError
from plugins.sdk.host import (
    MAX_SOCKET_PATH,
    STAGING_EXTRA,
    bind_linked_socket,
    clear_stale_socket,
    remove_own_socket,
    socket_path_fits,
)

from ._dra import ClaimPreparer, DRAPluginV1, DRAPluginV1beta1
from ._health import HealthServicer, HealthSource
from ._registration import RegistrationEvent, RegistrationServicer

log = logging.getLogger("plugins.coordinator.kubelet")

DEFAULT_PLUGINS_DIR: Final = Path("/var/lib/kubelet/plugins")
DEFAULT_REGISTRY_DIR: Final = Path("/var/lib/kubelet/plugins_registry")
_DIR_MODE: Final = 0o750
# A DRA driver name is a DNS subdomain of at most 63 characters (resource.k8s.io).
_DRIVER_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MAX_DRIVER_NAME: Final = 63
# A pod UID, as the API server assigns them (RFC 4122, lowercase). Only names of this
# shape are taken for another instance's sockets: a driver named "<ours>-x" is not ours.
_INSTANCE: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def check_driver_name(driver: str) -> None:
    """Refuse a name the API server would refuse for a driver, naming why."""
    if not driver:
        raise ValueError("DRA driver name is empty")
    if len(driver) > _MAX_DRIVER_NAME:
        raise ValueError(
            f"DRA driver name {driver!r} is {len(driver)} characters; at most {_MAX_DRIVER_NAME}"
        )
    if not _DRIVER_NAME.fullmatch(driver):
        raise ValueError(
            f"DRA driver name {driver!r} is not a DNS subdomain (lowercase "
            "letters, digits, '-' and '.', starting and ending alphanumeric)"
        )


def registration_socket_path(
    registry_dir: Path | str, driver: str, instance: str | None = None
) -> Path:
    """Where the registration socket of ``driver`` (of this ``instance``) is served."""
    middle = f"-{instance}" if instance else ""
    return Path(registry_dir) / f"{driver}{middle}-reg.sock"


def dra_socket_path(plugins_dir: Path | str, driver: str, instance: str | None = None) -> Path:
    """Where the DRA service of ``driver`` (of this ``instance``) is served."""
    suffix = f"-{instance}" if instance else ""
    return Path(plugins_dir) / driver / f"dra{suffix}.sock"


def _instances(directory: Path, prefix: str, suffix: str) -> list[Path]:
    """The sockets in ``directory`` named ``<prefix>[-<instance>]<suffix>``."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        middle = name[len(prefix) : len(name) - len(suffix)]
        if middle == "" or (middle.startswith("-") and _INSTANCE.fullmatch(middle[1:])):
            found.append(directory / name)
    return sorted(found)


def _clear_stale_instances(ours: Path, others: list[Path], what: str) -> None:
    """Remove the sockets of other instances that nobody answers on; leave live ones."""
    for path in others:
        if path == ours:
            continue
        try:
            clear_stale_socket(path, serving=what)
        except RegistrationError as exc:  # alive (a previous instance still stopping)
            log.info("leaving %s: %s", path, exc.message)


def _make_dirs(d: Path) -> None:
    """Create ``d`` and its missing parents 0750; existing ones are not touched."""
    missing: list[Path] = []
    for p in (d, *d.parents):
        if p.exists():
            break
        missing.append(p)
    for p in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(p, _DIR_MODE)
            os.chmod(p, _DIR_MODE)  # mkdir's mode is filtered through the umask
    if not d.is_dir():
        raise RegistrationError(f"{d} exists and is not a directory")


class _Served:
    """A started server, its executor and the inode of the socket it linked."""

    def __init__(
        self, server: grpc.Server, executor: ThreadPoolExecutor, path: Path, inode: int
    ) -> None:
        self.server, self.executor, self.path, self.inode = server, executor, path, inode

    def stop(self, grace: float | None) -> None:
        remove_own_socket(self.path, self.inode)
        self.server.stop(grace).wait((grace or 0.0) + 5.0)
        self.executor.shutdown(wait=False)


def _serve(
    path: Path, what: str, add_services: Callable[[grpc.Server], None], max_workers: int
) -> _Served:
    _make_dirs(path.parent)
    clear_stale_socket(path, serving=what)
    executor = ThreadPoolExecutor(max_workers, thread_name_prefix=what.replace(" ", "-"))
    server = grpc.server(executor, options=[("grpc.so_reuseport", 0)])
    add_services(server)
    try:
        inode = bind_linked_socket(server, path, serving=what)
        server.start()
    except Exception as exc:
        server.stop(None)
        executor.shutdown(wait=False)
        if isinstance(exc, RegistrationError):
            raise
        raise RegistrationError(f"cannot serve {path}: {exc}") from exc
    log.info("serving the %s on %s", what, path)
    return _Served(server, executor, path, inode)


class KubeletPlugin:
    """Serve ``preparer`` to the kubelet as the DRA driver ``driver``.

    The DRA socket is ``<plugins_dir>/<driver>/dra.sock``, the registration socket
    ``<registry_dir>/<driver>-reg.sock``; with an ``instance`` (the pod's UID)
    ``dra-<instance>.sock`` and ``<driver>-<instance>-reg.sock``, so that two instances
    coexist during a rolling update. Nothing is created before ``start``; a bad driver
    name or instance, or a socket path too long to bind, is refused at construction.
    """

    def __init__(
        self,
        driver: str,
        preparer: ClaimPreparer,
        plugins_dir: Path | str = DEFAULT_PLUGINS_DIR,
        registry_dir: Path | str = DEFAULT_REGISTRY_DIR,
        health: HealthSource | None = None,
        *,
        max_workers: int = 4,
        instance: str | None = None,
    ) -> None:
        check_driver_name(driver)
        if instance is not None and not _INSTANCE.fullmatch(instance):
            raise ValueError(
                f"instance {instance!r} is not a pod UID (a lowercase RFC 4122 UUID, "
                "the downward API's metadata.uid)"
            )
        self.driver = driver
        self.instance = instance
        self.dra_socket = dra_socket_path(plugins_dir, driver, instance)
        self.registration_socket = registration_socket_path(registry_dir, driver, instance)
        for path in (self.dra_socket, self.registration_socket):
            if not path.is_absolute():
                raise ValueError(
                    f"socket path {path} is not absolute (the kubelet dials it "
                    "from its own working directory)"
                )
            if not socket_path_fits(path):
                raise ValueError(
                    f"socket path {path} is {len(os.fsencode(path))} bytes; at "
                    f"most {MAX_SOCKET_PATH - STAGING_EXTRA} fit"
                )
        self._preparer = preparer
        self._health_source = health
        self._health: HealthServicer | None = None
        self._registration = RegistrationServicer(driver, str(self.dra_socket))
        self._max_workers = max_workers
        self._dra: _Served | None = None
        self._registry: _Served | None = None
        self._stale_cleared = threading.Event()

    @property
    def registration_events(self) -> tuple[RegistrationEvent, ...]:
        """Every verdict the kubelet sent, in order."""
        return self._registration.events

    @property
    def registration_failures(self) -> int:
        return self._registration.failures

    @property
    def registered(self) -> bool:
        """True if the kubelet's latest verdict registered us."""
        return self._registration.registered

    def wait_registered(self, timeout: float) -> bool:
        """Wait until the kubelet's latest verdict is a success; False on timeout."""
        return self._registration.wait_registered(timeout)

    def wait_for_verdicts(self, count: int, timeout: float) -> bool:
        """Wait until the kubelet has sent ``count`` verdicts; False on timeout."""
        return self._registration.wait_for_verdicts(count, timeout)

    def start(self) -> None:
        if self._dra is not None:
            raise RuntimeError(f"DRA driver {self.driver}: already started")
        preparer = self._preparer
        health = HealthServicer(self._health_source) if self._health_source is not None else None

        def add_dra(server: grpc.Server) -> None:
            v1_grpc.add_DRAPluginServicer_to_server(DRAPluginV1(preparer), server)
            v1beta1_grpc.add_DRAPluginServicer_to_server(DRAPluginV1beta1(preparer), server)
            if health is not None:
                health_grpc.add_DRAResourceHealthServicer_to_server(health, server)

        def add_registration(server: grpc.Server) -> None:
            registration_grpc.add_RegistrationServicer_to_server(self._registration, server)

        self._registration.on_first_registered(self._clear_stale_instances)
        self._dra = _serve(self.dra_socket, "DRA service", add_dra, self._max_workers)
        self._health = health
        try:
            self._registry = _serve(
                self.registration_socket, "plugin registration", add_registration, 1
            )
        except BaseException:
            self.stop(None)
            raise

    def _clear_stale_instances(self) -> None:
        """Remove the sockets of other instances of this driver nobody answers on."""
        _clear_stale_instances(
            self.registration_socket,
            _instances(self.registration_socket.parent, self.driver, "-reg.sock"),
            "plugin registration",
        )
        _clear_stale_instances(
            self.dra_socket, _instances(self.dra_socket.parent, "dra", ".sock"), "DRA service"
        )
        self._stale_cleared.set()

    def wait_stale_cleared(self, timeout: float) -> bool:
        """Wait until the sockets of killed instances were removed (after the kubelet's
        first registration of this one); False on timeout."""
        return self._stale_cleared.wait(timeout)

    def stop(self, grace: float | None = 5.0) -> None:
        """Remove the registration socket, then stop serving DRA and remove its socket.
        In-flight calls get ``grace`` s to finish."""
        if self._registry is not None:
            self._registry.stop(None)
            self._registry = None
        if self._health is not None:
            self._health.close()
            self._health = None
        if self._dra is not None:
            self._dra.stop(grace)
            self._dra = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
