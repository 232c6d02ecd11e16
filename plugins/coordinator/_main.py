"""``networkplugin-coordinator --config FILE``: the node coordinator as a service program.

Startup, in order, each refusal one line on stderr naming the path and the cause and exit
status 2, with nothing created before the checks that can refuse: read the config; read
its token and every plugin's; load the inventory, the policies and the topologies and
validate each topology against the pinned contract bundles (every plugin a topology
names must be configured); ask every plugin socket that answers who it is (GetInfo's
plugin name and contract digest against the pinned descriptor: ``_peers``); check the
state directory (``plugins.sdk.service.check_state_dir``: its parent must exist unless
``--init``, never under /run or on a tmpfs unless ``allowVolatileStateDir``), the socket
and runtime directories; wait, bounded (``writerLockWaitSeconds``), for a previous instance
still holding the journal's writer lock (a rolling update's handover; past the deadline one
line naming the holder, nothing changed); publish the metrics if asked; open the journal (a
damaged one is served, never recreated: status says why, every request is ``DATA_LOSS``); bind the
socket (status answers ``ready=false``, health ``NOT_SERVING``); finish what a crash
interrupted; serve. SIGTERM stops admitting requests, lets a running one finish within
``shutdownGraceSeconds``, then the process exits whatever it is doing: the request stays
journaled and the next start finishes it. The last line says ``stopped exit=N``.

Crash points: production passes none (``NO_CRASH``); the test kit's launcher
(``python -m labs.crashing_service plugins.coordinator --config FILE``) calls ``run`` with
its own, so a SIGKILL can be armed at any ``Coordinator/...`` boundary.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from plugins.sdk import BundleStore, Descriptor, NetworkPluginError, pinned_bundles
from plugins.sdk.host import PluginCallError, read_token
from plugins.sdk.runner import NO_CRASH, CrashPoints
from plugins.sdk.service import (
    EXIT_MARGIN_S,
    EXIT_REFUSED,
    EXIT_UNFINISHED,
    StartupRefused,
    await_writer,
    check_private_dir,
    check_state_dir,
    program_arguments,
)
from plugins.sdk.signals import SignalStop
from plugins.sdk.store import JournalFault, JournalUnavailable, WriterLock
from plugins.sdk.systemd import notify
from plugins.sdk.telemetry import configure_logging, log_event

from ._allocate import Allocator
from ._compile import CompiledTopology, validate_topology
from ._inventory import load_inventory
from ._journal import CoordinatorJournal
from ._peers import CheckedPluginClient, PeerMismatch
from ._policy import DeviceExposurePolicy, load_policies
from ._program import CoordinatorService
from ._program_config import CoordinatorConfig
from ._server import CoordinatorServer
from ._telemetry import NO_METRICS, CoordinatorMetrics
from ._topology import load_topology

if TYPE_CHECKING:
    from plugins.sdk.telemetry import MetricsPublisher

    from ._kube_node import KubernetesNode

PROG = "networkplugin-coordinator"
log = logging.getLogger("plugins.coordinator")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def pinned_descriptors(store: BundleStore | None = None) -> dict[str, Descriptor]:
    """Every logical plugin's descriptor from the contract bundles this artifact pins."""
    store = store or pinned_bundles()
    bundles = [store.load(schema_id) for schema_id in store.schema_ids]
    return {b.descriptor.name: b.descriptor for b in bundles}


def load_manifests(
    config: CoordinatorConfig, descriptors: Mapping[str, Descriptor] | None = None
) -> tuple[Allocator, dict[str, CompiledTopology]]:
    """The allocator over the node's inventory and policies, and the compiled topologies
    (``descriptors``: the pinned ones, ``pinned_descriptors()`` when not given)."""

    def refuse(what: str, path: Path, exc: BaseException) -> NoReturn:
        message = exc.message if isinstance(exc, NetworkPluginError) else str(exc)
        # The loaders' messages already start with the file they name.
        text = message if message.startswith(str(path)) else f"{path}: {message}"
        raise StartupRefused(f"{what} {_one_line(text)}") from None

    try:
        inventory = load_inventory(config.inventory)
    except (NetworkPluginError, OSError) as exc:
        refuse("inventory", config.inventory, exc)
    policies: tuple[DeviceExposurePolicy, ...] = ()
    if config.policies is not None:
        try:
            policies = load_policies(config.policies)
        except (NetworkPluginError, OSError) as exc:
            refuse("policies", config.policies, exc)
    descriptors = pinned_descriptors() if descriptors is None else descriptors
    configured = {p.name for p in config.plugins}
    compiled: dict[str, CompiledTopology] = {}
    for path in config.topologies:
        try:
            topology = validate_topology(load_topology(path), descriptors, policies)
        except (NetworkPluginError, OSError) as exc:
            refuse("topology", path, exc)
        name = topology.topology.name
        if name in compiled:
            raise StartupRefused(f"topology {path}: a second topology named {name!r}")
        missing = sorted({s.plugin for s in topology.steps.values()} - configured)
        if missing:
            raise StartupRefused(
                f"topology {path}: names plugins the config does not list: {', '.join(missing)}"
            )
        compiled[name] = topology
    return Allocator(inventory, policies), compiled


def plugin_clients(
    config: CoordinatorConfig, descriptors: Mapping[str, Descriptor]
) -> dict[str, CheckedPluginClient]:
    """A client per configured plugin that checks its peer against the pinned descriptor;
    a plugin no pinned contract names is refused (its identity could not be checked)."""
    unknown = sorted(p.name for p in config.plugins if p.name not in descriptors)
    if unknown:
        raise StartupRefused(
            f"{config.where}: $.plugins: no contract this artifact pins is for "
            f"{', '.join(repr(n) for n in unknown)} (pinned: {', '.join(sorted(descriptors))})"
        )
    tokens = {p.name: read_token(p.token_file) for p in config.plugins}
    return {
        p.name: CheckedPluginClient(
            p.name,
            p.socket,
            tokens[p.name],
            descriptors[p.name],
            timeout=config.call_timeout_seconds,
        )
        for p in config.plugins
    }


def check_plugins(config: CoordinatorConfig, clients: Mapping[str, CheckedPluginClient]) -> None:
    """Ask every plugin socket that answers who it is; refuse one that is another plugin
    or refuses the token. One that does not answer yet is checked at its first connection."""
    for endpoint in config.plugins:
        try:
            clients[endpoint.name].admit()
        except PeerMismatch as exc:
            raise StartupRefused(
                f"{config.where}: $.plugins.{endpoint.name}.socket: {exc.problem}"
            ) from None
        except PluginCallError as exc:
            if exc.code == "UNAUTHENTICATED":
                raise StartupRefused(
                    f"{config.where}: $.plugins.{endpoint.name}.tokenFile: {endpoint.socket} "
                    f"refuses the token in {endpoint.token_file}"
                ) from None
            log.warning(
                "plugin %s: %s does not answer yet (%s: %s); it is checked at its first connection",
                endpoint.name,
                endpoint.socket,
                exc.code,
                _one_line(exc.message),
            )


def _open_journal(
    config: CoordinatorConfig, writer_lock: WriterLock | None = None
) -> tuple[CoordinatorJournal | None, str]:
    """The journal (``writer_lock``: its lock, taken already by ``await_writer``)."""
    try:
        journal = CoordinatorJournal(
            config.state_dir,
            runtime_dir=config.lease_dir,
            writer_wait_s=config.writer_wait,
            writer_lock=writer_lock,
        )
        return journal, ""
    except JournalUnavailable as exc:  # served damaged: status says why
        log.error("%s", _one_line(str(exc)))
        return None, _one_line(str(exc))
    except (OSError, sqlite3.Error, JournalFault) as exc:
        cause = exc.reason if isinstance(exc, JournalFault) else str(exc)
        raise StartupRefused(
            f"state directory {config.state_dir}: cannot open the journal: {_one_line(cause)}"
        ) from None


def serve(
    config: CoordinatorConfig,
    *,
    crash: CrashPoints = NO_CRASH,
    stop: threading.Event | None = None,
    exit_process: bool = False,
    init: bool = False,
) -> int:
    """Run the coordinator until ``stop`` is set (or SIGTERM/SIGINT); the exit status.

    ``init`` (``--init``): the operator asks for a new state directory, its missing
    parents included (``check_state_dir``); without it such a state directory is refused.
    """
    stop = stop or threading.Event()
    token = read_token(config.token_file)
    descriptors = pinned_descriptors()
    allocator, topologies = load_manifests(config, descriptors)
    clients = plugin_clients(config, descriptors)
    publisher = None
    writer_lock = None
    try:
        # Before anything is created: who answers on the plugin sockets, then the directories.
        check_plugins(config, clients)
        check_state_dir(config.state_dir, init=init, allow_volatile=config.allow_volatile_state_dir)
        check_private_dir("socket directory", config.socket.parent, follow_symlinks=False)
        if config.runtime_dir is not None:
            check_private_dir("runtime directory", config.runtime_dir)
        # A previous instance still stopping holds the journal, its metrics port, its
        # sockets: wait for it before binding any of them.
        writer_lock = await_writer(config.state_dir, config.writer_wait)
        metrics, publisher = _publish_metrics(config)
        journal, fault = _open_journal(config, writer_lock)
    except BaseException:
        if writer_lock is not None:
            writer_lock.release()  # idempotent: the journal released it if it failed to open
        _unpublish(publisher)
        for client in clients.values():
            client.close()
        raise
    service = CoordinatorService(
        journal,
        clients,
        topologies,
        allocator,
        epoch=config.epoch,
        crash=crash,
        fault=fault,
        plugin_wait_seconds=config.plugin_wait_seconds,
        metrics=metrics,
    )
    server = CoordinatorServer(config.socket, token, service)
    # Not a handler that sets ``stop`` itself: it could interrupt ``stop.wait()`` while
    # that holds the event's lock, and wait for it forever (plugins.sdk.signals).
    signals = SignalStop.install(stop)
    node: KubernetesNode | None = None
    try:
        if exit_process:
            threading.Thread(
                target=_watchdog,
                args=(stop, config.shutdown_grace_seconds),
                name="shutdown-watchdog",
                daemon=True,
            ).start()
        server.start()  # status and health answer not ready until recovery is done
        node = _recover(config, journal, service, topologies, allocator, crash)
        log.info("serving %s", config.socket)
        # A damaged journal is served too (its status says why), as the services do.
        status = f"not ready: {fault}" if fault else f"serving {config.socket}"
        notify("READY=1", f"STATUS={status}")
        stop.wait()
        code = _stop_serving(config, node, server, service, exit_process=exit_process)
    finally:
        signals.close()
        if node is not None:
            node.stop()
        server.stop(None)
        _unpublish(publisher)  # its last textfile reads the journal's counts
        for client in clients.values():
            client.close()
        if journal is not None and not service.busy():
            journal.close()
    _stopped(code)
    return code


def _stop_serving(
    config: CoordinatorConfig,
    node: KubernetesNode | None,
    server: CoordinatorServer,
    service: CoordinatorService,
    *,
    exit_process: bool,
) -> int:
    """SIGTERM: the kubelet and the runtime first (no new pod work), then the requests
    running get ``shutdownGraceSeconds``; the exit status."""
    notify("STOPPING=1")
    if node is not None:
        node.stop()
    finished = server.stop(config.shutdown_grace_seconds)
    if finished and not service.busy():
        return 0
    log.error(
        "shutdown: a request is still running after %gs; exiting without it (it "
        "stays journaled and is finished at the next start)",
        config.shutdown_grace_seconds,
    )
    if exit_process:
        _exit_now(EXIT_UNFINISHED)
    return EXIT_UNFINISHED


def _recover(
    config: CoordinatorConfig,
    journal: CoordinatorJournal | None,
    service: CoordinatorService,
    topologies: Mapping[str, CompiledTopology],
    allocator: Allocator,
    crash: CrashPoints,
) -> KubernetesNode | None:
    """Finish what a crash interrupted, then start the Kubernetes node if the config asks
    for one (its pod side recovers first, then the kubelet and the runtime are let in;
    the Kubernetes clients are loaded only then)."""
    notes = service.recover()
    node = None
    if config.kubernetes is not None and journal is not None and service.coordinator is not None:
        from ._kube_node import KubernetesNode
        from .nri import NRIPlugin

        node = KubernetesNode(
            config.kubernetes,
            journal,
            service.coordinator,
            topologies,
            allocator,
            nri_plugin=NRIPlugin,
            lock=service.lock,
            crash=crash,
        )
        notes += node.start()
    for note in notes:
        log.warning("recovery: %s", note)
    return node


def _publish_metrics(
    config: CoordinatorConfig,
) -> tuple[CoordinatorMetrics, MetricsPublisher | None]:
    """Metrics on (prometheus_client loaded now, published) or off (nothing loaded)."""
    if config.metrics is None:
        return NO_METRICS, None
    from plugins.sdk.telemetry import MetricsPublisher

    from ._prometheus import CoordinatorPrometheus

    metrics = CoordinatorPrometheus()
    publisher = MetricsPublisher(metrics, config.metrics)
    try:
        publisher.start()
    except OSError as exc:
        raise StartupRefused(
            f"metrics {publisher.where}: {exc.strerror or _one_line(str(exc))}"
        ) from None
    log.info("metrics published at %s", publisher.where)
    return metrics, publisher


def _unpublish(publisher: MetricsPublisher | None) -> None:
    if publisher is not None:
        publisher.stop()


def _stopped(code: int) -> None:
    """The last line of a coordinator that ran."""
    log_event(log, logging.INFO if code == 0 else logging.ERROR, "stopped", exit=code)


def _watchdog(stop: threading.Event, grace: float) -> None:
    """Once stopping began, end the process ``grace + EXIT_MARGIN_S`` later, whatever runs."""
    stop.wait()
    threading.Event().wait(grace + EXIT_MARGIN_S)
    log.error("shutdown: still not stopped %gs after it began; exiting", grace + EXIT_MARGIN_S)
    _exit_now(EXIT_UNFINISHED)


def _exit_now(status: int) -> NoReturn:
    _stopped(status)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(status)


def run(argv: Sequence[str], *, crash: CrashPoints = NO_CRASH) -> int:
    """``--config FILE [--log-level L] [--log-format F] [--init]``, ``--version``;
    ``crash``: only the test kit's launcher passes one."""
    args = program_arguments(PROG, f"{PROG}: the node coordinator").parse_args(argv)
    configure_logging(PROG, args.log_level, args.log_format or "text")
    try:
        config = CoordinatorConfig.load(args.config)
        if args.log_format is None and config.log_format != "text":
            configure_logging(PROG, args.log_level, config.log_format)
        return serve(config, crash=crash, exit_process=True, init=args.init)
    except NetworkPluginError as exc:
        print(f"{PROG}: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_REFUSED
    except OSError as exc:
        path = f"{exc.filename}: " if exc.filename else ""
        print(f"{PROG}: {path}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_REFUSED


def main() -> int:
    """The console script ``networkplugin-coordinator``."""
    return run(sys.argv[1:])
