"""Service plumbing shared by the three plugin services.

Read the administrator's config, open the single-writer journal, register and
validate every endpoint, serve GetInfo (not ready) while recovering, recover,
then serve; on SIGTERM stop admitting work and leave in-flight work recoverable.

Every startup refusal is one line on stderr naming the path and the cause, and exit
status 2 (``main``); nothing is created before the checks that can refuse. Shutdown is
bounded: once the grace period is over the process exits, whatever a kernel call is
doing, and the interrupted work stays journaled for recovery at the next start.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import logging
import os
import re
import sqlite3
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from ._documents import SERVICE_CONFIG_SCHEMA, DocumentError, DocumentSchema
from ._errors import NetworkPluginError, RegistrationError
from ._registry import Registration, Registry
from ._yaml import YAMLLoadError, load_yaml_documents
from .host import Host, check_socket_paths, read_token
from .runner import NO_CRASH, CrashPoints, EffectRegistry, Runner
from .signals import SignalStop
from .store import JournalFault, JournalUnavailable, WriterLock
from .systemd import notify
from .telemetry import (
    LOG_FORMATS,
    NO_METRICS,
    LogFormat,
    Metrics,
    MetricsConfig,
    configure_logging,
)

if TYPE_CHECKING:
    from .telemetry import MetricsPublisher

log = logging.getLogger(__name__)

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "dra-networkplugins"
_PATH_KEYS = ("socketDir", "stateDir", "tokenFile", "runtimeDir")

EXIT_REFUSED = 2
"""Exit status of a startup refusal (one line on stderr naming the path and the cause)."""
EXIT_UNFINISHED = 1
"""Exit status of a shutdown that ended the process with calls still running."""
EXIT_MARGIN_S = 0.5
"""After ``grace + EXIT_MARGIN_S`` seconds of stopping, the process exits regardless."""
WRITER_WAIT_MARGIN_S = 5.0
"""The default wait for a previous instance's writer lock is its shutdown grace plus
this: what the DaemonSet gives the old pod (``terminationGracePeriodSeconds``), and a
previous instance exits at most ``EXIT_MARGIN_S`` after its grace."""


def default_writer_wait(shutdown_grace_seconds: float) -> float:
    """How long a new instance waits for the writer lock of its previous one, by default."""
    return shutdown_grace_seconds + WRITER_WAIT_MARGIN_S


class StartupRefused(NetworkPluginError):
    """The service cannot start as configured: the message names the path and the cause."""


@dataclass(frozen=True)
class ServiceConfig:
    """The administrator-owned service configuration (see docs/deploying.md)."""

    socket_dir: Path
    state_dir: Path
    token_file: Path
    kernel: str
    boot_id: str | None = None  # None: read it from the kernel
    shutdown_grace_seconds: float = 10.0
    runtime_dir: Path = Path()  # Path() (the default): the socket dir
    metrics: MetricsConfig | None = None  # None (the default): no metrics at all
    log_format: LogFormat = "text"
    allow_volatile_state_dir: bool = False  # a journal on tmpfs or under /run: test rigs only
    writer_lock_wait_seconds: float | None = None  # None: default_writer_wait(grace)

    def __post_init__(self) -> None:
        if self.runtime_dir == Path():
            object.__setattr__(self, "runtime_dir", self.socket_dir)

    @property
    def writer_wait(self) -> float:
        """How long startup waits for another process holding the state directory's
        writer lock (a previous instance still stopping) before it refuses."""
        if self.writer_lock_wait_seconds is not None:
            return self.writer_lock_wait_seconds
        return default_writer_wait(self.shutdown_grace_seconds)

    @classmethod
    def load(cls, path: Path) -> ServiceConfig:
        def refuse(problem: str) -> NoReturn:
            raise RegistrationError(f"service config {path}: {_one_line(problem)}")

        try:
            text = path.read_bytes()
        except OSError as exc:
            refuse(_os_cause(exc))
        # The one strict loader: a repeated key, an alias or a non-JSON tag is refused
        # with its line and column, never silently resolved.
        try:
            documents = load_yaml_documents(text, str(path))
        except YAMLLoadError as exc:
            refuse(f"not valid YAML: {exc.problem} (line {exc.line}, column {exc.column})")
        if len(documents) != 1 or not isinstance(documents[0], dict):
            refuse("not a mapping")
        # The file format's JSON Schema: every problem named with its path and rule.
        try:
            DocumentSchema.packaged("plugins.sdk", SERVICE_CONFIG_SCHEMA).check(
                documents[0], str(path)
            )
        except DocumentError as exc:
            refuse("; ".join(exc.lines))
        # An optional key set to null takes its default.
        data = {k: v for k, v in documents[0].items() if v is not None}
        unexpanded = unexpanded_path(_path_values(data), "service")
        if unexpanded is not None:
            refuse(unexpanded)
        grace = data.get("shutdownGraceSeconds", 10.0)
        base = path.parent
        paths = {key: base / data[key] for key in _PATH_KEYS if key in data}
        return cls(
            socket_dir=paths["socketDir"],
            state_dir=paths["stateDir"],
            token_file=paths["tokenFile"],
            kernel=data["kernel"],
            boot_id=data.get("bootId"),
            shutdown_grace_seconds=float(grace),
            runtime_dir=paths.get("runtimeDir", Path()),
            metrics=MetricsConfig.from_config(data.get("metrics"), base),
            log_format=data.get("logFormat", "text"),
            allow_volatile_state_dir=bool(data.get("allowVolatileStateDir", False)),
            writer_lock_wait_seconds=(
                float(data["writerLockWaitSeconds"]) if "writerLockWaitSeconds" in data else None
            ),
        )


def _path_values(data: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(key path, value)`` of every path the config names (the kernel URL's included)."""
    for key in (*_PATH_KEYS, "kernel"):
        if isinstance(data.get(key), str):
            yield key, data[key]
    metrics = data.get("metrics")
    if isinstance(metrics, dict) and isinstance(metrics.get("textfile"), str):
        yield "metrics.textfile", metrics["textfile"]


def artifact_digest(root: Path = PACKAGE_ROOT) -> str:
    """The digest of the code this service runs: every module and pinned bundle, in order.

    Each ``.py`` and ``.json`` file under ``root`` (as ``root.rglob("*")`` and
    ``Path.suffix`` find them: a symlinked directory is not descended into, a symlinked
    file is read), in the order of their paths, hashed as its path relative to ``root``,
    NUL, its bytes, NUL. Walked with ``os.scandir`` and plain strings: rglob's Path
    object for every file (each bytecode file included), their sorting and
    ``relative_to`` were ~60 % of the digest's CPU (8 ms) at each service start.
    """
    h = hashlib.sha256()
    for relative, path in sorted(_sources(os.fspath(root)), key=_path_order):
        with open(path, "rb") as f:
            h.update(relative.encode() + b"\0" + f.read() + b"\0")
    return "sha256:" + h.hexdigest()


def _sources(root: str) -> Iterator[tuple[str, str]]:
    """``(path relative to root, path)`` of every ``.py`` and ``.json`` file under ``root``."""
    pending = [("", root)]
    while pending:
        prefix, directory = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append((f"{prefix}{entry.name}/", entry.path))
                elif _suffix(entry.name) in (".py", ".json") and entry.is_file():
                    yield prefix + entry.name, entry.path


def _suffix(name: str) -> str:
    """``PurePath(name).suffix``: ``.py`` for ``a.py``, nothing for ``.py`` itself."""
    dot = name.rfind(".")
    return name[dot:] if 0 < dot < len(name) - 1 else ""


def _path_order(source: tuple[str, str]) -> list[str]:
    """Paths in the order ``sorted(Path, ...)`` puts them: part by part."""
    return source[0].split("/")


EffectsFactory = Callable[[str, CrashPoints], tuple[EffectRegistry, str]]
"""Builds the approved executors for a kernel URL; returns them and the node's boot id."""


# ---------------------------------------------------------------------- startup checks


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _os_cause(exc: OSError) -> str:
    """``No such file or directory (ENOENT)``: the errno's text and name."""
    code = exc.errno
    if code is None:
        return _one_line(str(exc))
    return f"{os.strerror(code)} ({errno.errorcode.get(code, str(code))})"


def check_private_dir(what: str, path: Path, *, follow_symlinks: bool = True) -> None:
    """Refuse a directory that exists with another owner or any group/other access, or
    on a read-only file system.

    A missing one is fine if it can be created (with mode 0700, when needed): the
    nearest directory that exists must be writable. Creates nothing. ``what`` names it in
    the message (``state directory``).
    """
    try:
        st = os.stat(path, follow_symlinks=follow_symlinks)
    except FileNotFoundError:
        _check_writable(what, path, created=True)
        return
    except OSError as exc:
        raise StartupRefused(f"{what} {path}: {_os_cause(exc)}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise StartupRefused(f"{what} {path}: exists and is not a directory")
    problems = []
    if st.st_uid != os.geteuid():
        problems.append(f"owned by uid {st.st_uid}, not the service uid {os.geteuid()}")
    if st.st_mode & 0o077:
        problems.append(f"mode {stat.S_IMODE(st.st_mode):04o} gives group/other access")
    if problems:
        raise StartupRefused(
            f"{what} {path}: {' and '.join(problems)}; it must be owned by uid "
            f"{os.geteuid()} with mode 0700"
        )
    _check_writable(what, path, created=False)


def _check_writable(what: str, path: Path, *, created: bool) -> None:
    """Refuse ``path`` (or, ``created``, its nearest existing ancestor) that cannot be
    written: a read-only mount (a unit's ``ProtectSystem=strict`` outside its own
    directories), or no write permission. Without this the refusal came only when the
    journal or its lease was opened, after metrics were published."""
    where = path
    while created and not os.path.lexists(where) and where != where.parent:
        where = where.parent
    try:
        read_only = bool(os.statvfs(where).f_flag & os.ST_RDONLY)
    except OSError:
        return  # said by the check that opens it
    cause = None
    if read_only:
        cause = _os_cause(OSError(errno.EROFS, ""))
    elif not os.access(where, os.W_OK | os.X_OK):
        cause = _os_cause(OSError(errno.EACCES, ""))
    if cause is not None:
        if created:
            raise StartupRefused(f"{what} {path}: cannot be created in {where}: {cause}")
        raise StartupRefused(f"{what} {path}: cannot be written: {cause}")


VOLATILE_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})
"""File systems whose contents are gone at the next boot: no journal belongs on one."""


def unexpanded_path(paths: Iterable[tuple[str, str]], program: str) -> str | None:
    """The refusal of the first ``(key path, value)`` whose value holds an unexpanded
    ``${...}`` (a unit's or a shell's variable left in a config file), else None.
    Nothing expands variables in a config: the path would be taken literally."""
    for key, value in paths:
        if "${" in value:
            return (
                f"$.{key}: {value!r} holds an unexpanded ${{...}}: the {program} expands "
                "no variables; write the path itself"
            )
    return None


def check_state_dir(
    path: Path, *, init: bool = False, allow_volatile: bool = False, what: str = "state directory"
) -> None:
    """Refuse a state directory that would start an empty journal where none belongs.

    The one check of a journal's directory for every program that keeps one (the three
    services, the coordinator), before anything is created; it creates nothing itself:

    - an existing ``path`` must be a directory of the service uid, mode 0700
      (:func:`check_private_dir`);
    - a missing ``path`` is created later only if its parent exists: a mistyped parent
      would otherwise start an empty journal beside the real one. ``init`` (the
      programs' ``--init``) says the operator means a new one: the parents are created;
    - ``path`` must not be under ``/run`` nor on a file system emptied at every boot
      (tmpfs, ramfs), unless ``allow_volatile`` (the config's
      ``allowVolatileStateDir``: test rigs that keep journals in RAM).

    Raises :class:`StartupRefused`, one line: ``state directory PATH: <why>``.
    """
    check_private_dir(what, path)
    if not allow_volatile:
        _check_persistent(what, path)
    if not init and not os.path.lexists(path) and not path.parent.is_dir():
        raise StartupRefused(
            f"{what} {path}: its parent {path.parent} does not exist (a mistyped path would "
            "start an empty journal); start once with --init to create a new one"
        )


def _check_persistent(what: str, path: Path) -> None:
    """Refuse ``path`` under ``/run`` or on a file system emptied at every boot."""
    resolved = os.path.realpath(path)
    if resolved == "/run" or resolved.startswith("/run/"):
        where = "" if resolved == os.fspath(path) else f" ({resolved})"
        raise StartupRefused(
            f"{what} {path}: under /run{where}, which is emptied at every boot; the journal "
            "must be on persistent storage (e.g. /var/lib/dra-networkplugins/<name>)"
        )
    mounted = _filesystem_of(resolved)
    if mounted is not None and mounted[0] in VOLATILE_FILESYSTEMS:
        raise StartupRefused(
            f"{what} {path}: on a {mounted[0]} mounted at {mounted[1]}, which is emptied at "
            "every boot; the journal must be on persistent storage "
            "(e.g. /var/lib/dra-networkplugins/<name>)"
        )


def _filesystem_of(path: str) -> tuple[str, str] | None:
    """``(type, mount point)`` of the file system ``path`` (or its nearest existing
    ancestor) is on, from ``/proc/self/mountinfo``; None if that cannot be told.

    Matched by device number, not by path prefix: a bind mount or a mount hidden under
    another has the device of the file system it shows."""
    existing = path
    while True:
        try:
            device = os.stat(existing).st_dev
            break
        except FileNotFoundError:
            if existing == os.path.dirname(existing):
                return None
            existing = os.path.dirname(existing)
        except OSError:
            return None
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as table:
            lines = table.read().splitlines()
    except OSError:
        return None
    candidates = []  # (contains the path, mount point length, type, mount point)
    for line in lines:
        fields, sep, rest = line.partition(" - ")
        parts, kind = fields.split(), rest.split()
        if not sep or len(parts) < 5 or not kind or parts[2] != wanted:
            continue
        mount_point = _MOUNTINFO_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), parts[4])
        inside = existing == mount_point or existing.startswith(mount_point.rstrip("/") + "/")
        candidates.append((inside, len(mount_point), kind[0], mount_point))
    if not candidates:
        return None
    _, _, kind_of, mount_point = max(candidates)
    return kind_of, mount_point


_MOUNTINFO_ESCAPE = re.compile(r"\\([0-7]{3})")


def check_directories(config: ServiceConfig, *, init: bool = False) -> None:
    """The directories the service writes to, checked before anything is created.

    ``init``: the operator asked for a new state directory (``--init``)."""
    check_state_dir(config.state_dir, init=init, allow_volatile=config.allow_volatile_state_dir)
    # The host refuses a symlink here too (it binds sockets in the directory itself).
    check_private_dir("socket directory", config.socket_dir, follow_symlinks=False)
    if config.runtime_dir != config.socket_dir:
        check_private_dir("runtime directory", config.runtime_dir)


def _open_kernel(make_effects: EffectsFactory, url: str, crash: CrashPoints) -> tuple[Any, str]:
    try:
        return make_effects(url, crash)
    except OSError as exc:  # KernelError included: the namespace mount or socket is not there
        path = exc.filename or urlsplit(url).path or url
        raise StartupRefused(f"kernel {url}: {path}: {_os_cause(exc)}") from None


def _open_runner(
    config: ServiceConfig,
    registrations: Sequence[Registration],
    effects: EffectRegistry,
    kernel_boot_id: str,
    crash: CrashPoints,
    metrics: Metrics = NO_METRICS,
    writer_lock: WriterLock | None = None,
) -> Runner:
    """The runner over the journal; a damaged journal is served (every scope unavailable).

    ``writer_lock``: the state directory's, taken already (``await_writer``)."""
    state_dir = config.state_dir
    try:
        runner = Runner.open(
            state_dir,
            registrations,
            effects,
            artifact_digest=artifact_digest(),
            boot_id=config.boot_id or kernel_boot_id,
            crash=crash,
            runtime_dir=config.runtime_dir,
            metrics=metrics,
            writer_wait_s=config.writer_wait,
            writer_lock=writer_lock,
        )
    except (OSError, sqlite3.Error, JournalFault) as exc:  # read-only, full, not writable
        raise StartupRefused(
            f"state directory {state_dir}: cannot open the journal: {_store_cause(exc, state_dir)}"
        ) from None
    if runner.store is None:
        log.error("%s", runner.unavailable_reason)
    return runner


def await_writer(state_dir: Path, wait_s: float) -> WriterLock | None:
    """The writer lock of ``state_dir``, once a previous instance holding it let it go
    (up to ``wait_s``; then ``StoreLocked``, one line naming the holder, nothing
    changed); None if the directory never had one (nothing created).

    Taken before the program binds anything the previous instance may still hold (its
    metrics port, its sockets): a rolling update's new instance starts while the old
    one stops (docs/runner.md, "The writer lock and handover")."""
    try:
        return WriterLock.await_holder(state_dir, wait_s=wait_s)
    except OSError as exc:
        raise StartupRefused(f"state directory {state_dir}: {_os_cause(exc)}") from None


def _release(lock: WriterLock | None) -> None:
    if lock is not None:
        lock.release()


def _store_cause(exc: BaseException, state_dir: Path) -> str:
    if isinstance(exc, JournalFault) and isinstance(exc.__cause__, OSError | sqlite3.Error):
        exc = exc.__cause__
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename and Path(exc.filename) != state_dir else ""
        return f"{where}{_os_cause(exc)}"
    if isinstance(exc, JournalFault):
        return _one_line(exc.reason)
    return _one_line(str(exc))


# ---------------------------------------------------------------------- serving


def serve(
    config: ServiceConfig,
    make_registry: Callable[[], Registry],
    make_effects: EffectsFactory,
    *,
    crash: CrashPoints = NO_CRASH,
    stop: threading.Event | None = None,
    exit_process: bool = False,
    init: bool = False,
) -> int:
    """Run the service until ``stop`` is set (or SIGTERM/SIGINT); return the exit status.

    ``init`` (``--init``): create the state directory's missing parents, a new state
    directory the operator asked for (:func:`check_state_dir`).

    ``exit_process`` (a service process: ``main``): once stopping began, the process
    exits ``shutdown_grace_seconds`` later with :data:`EXIT_UNFINISHED` if calls are
    still running (a kernel call that never answers), and in any case at most
    :data:`EXIT_MARGIN_S` after that. In-process callers leave it False and get
    :data:`EXIT_UNFINISHED` back instead.

    ``crash`` is ``NO_CRASH`` in production: a service never arms crash points itself
    (the test kit's launcher, ``labs.crashing_service``, injects its own).
    """
    stop = stop or threading.Event()
    registrations = make_registry().seal()  # one invalid registration fails startup
    token = read_token(config.token_file)
    # Every socket path must fit before the journal, its lease or metrics exist.
    check_socket_paths(config.socket_dir, [r.endpoint.socket_name for r in registrations])
    check_directories(config, init=init)
    runner, publisher = _open(config, registrations, make_effects, crash)
    try:
        host = Host(config.socket_dir, token)
        # From the first socket on, SIGTERM stops gracefully (also during recovery). Not
        # a handler that sets ``stop`` itself: it could interrupt ``stop.wait()`` while
        # that holds the event's lock, and wait for it forever (plugins.sdk.signals).
        signals = SignalStop.install(stop)
        if exit_process:
            threading.Thread(
                target=_watchdog,
                args=(stop, host, config.shutdown_grace_seconds),
                name="shutdown-watchdog",
                daemon=True,
            ).start()
        host.start(runner.endpoints())  # GetInfo answers ready=false until recovery is done
    except BaseException:
        runner.close()
        _unpublish(publisher)
        raise
    serving = ", ".join(str(p) for p in host.socket_paths)
    try:
        notes = runner.recover()
    except JournalUnavailable as exc:  # found damaged while recovering: stays not ready
        log.error("recovery stopped: %s", _one_line(str(exc)))
        # Started all the same: it answers (ready=false) for the operator to inspect. A
        # manager waiting for READY would otherwise kill and restart it over and over.
        status = f"not ready: recovery stopped: {_one_line(str(exc))}"
    except BaseException:
        host.stop(None)
        runner.close()
        _unpublish(publisher)
        raise
    else:
        for note in notes if runner.store is not None else ():  # else: said once, above
            log.warning("recovery: %s", note)
        status = (
            f"serving {serving}"
            if runner.store is not None
            else f"not ready: {_one_line(runner.unavailable_reason)}"
        )
    log.info("serving %s", serving)
    notify("READY=1", f"STATUS={status}")
    stop.wait()
    notify("STOPPING=1")
    try:
        code = _stop(host, config.shutdown_grace_seconds, exit_process=exit_process)
    finally:
        signals.close()
        _unpublish(publisher)
    if code == 0:
        # The journal, and its writer lock, go last: a new instance waiting for the lock
        # binds at once what this one had (its metrics port, its sockets).
        runner.close()
    return code


def _open(
    config: ServiceConfig,
    registrations: Sequence[Registration],
    make_effects: EffectsFactory,
    crash: CrashPoints,
) -> tuple[Runner, MetricsPublisher | None]:
    """Wait for a previous instance's writer lock, publish the metrics, open the kernel
    and the journal; on a failure, nothing of it is left held."""
    writer_lock = await_writer(config.state_dir, config.writer_wait)
    try:
        metrics, publisher = _publish_metrics(config.metrics)
    except BaseException:
        _release(writer_lock)
        raise
    try:
        effects, kernel_boot_id = _open_kernel(make_effects, config.kernel, crash)
        runner = _open_runner(
            config, registrations, effects, kernel_boot_id, crash, metrics, writer_lock
        )
    except BaseException:
        _release(writer_lock)  # idempotent: the store released it if it failed to open
        _unpublish(publisher)
        raise
    return runner, publisher


def _publish_metrics(config: MetricsConfig | None) -> tuple[Metrics, MetricsPublisher | None]:
    """Metrics on (their modules loaded now, published) or off (nothing loaded)."""
    if config is None:
        return NO_METRICS, None
    from .telemetry import MetricsPublisher, PrometheusMetrics

    metrics = PrometheusMetrics()
    publisher = MetricsPublisher(metrics, config)
    try:
        publisher.start()
    except OSError as exc:
        raise StartupRefused(f"metrics {publisher.where}: {_os_cause(exc)}") from None
    log.info("metrics published at %s", publisher.where)
    return metrics, publisher


def _unpublish(publisher: MetricsPublisher | None) -> None:
    if publisher is not None:
        publisher.stop()


def _stop(host: Host, grace: float, *, exit_process: bool) -> int:
    """Stop admitting, drain for ``grace`` s; exit without waiting for what still runs.

    A call still running after the grace period (typically blocked in a kernel call)
    is not waited for: its operation stays ``Running`` and its effect ``Applying`` in
    the journal, exactly as after SIGKILL, and the next start recovers it by probe.
    Nothing is committed on its behalf on the way out. The caller closes the runner
    (0: every call finished).
    """
    host.stop(grace)  # stop admitting; in-flight calls finish or are cancelled at grace
    running = host.in_flight()
    if running:
        _log_unfinished(grace, running)
        if exit_process:
            _exit_now(EXIT_UNFINISHED)
        return EXIT_UNFINISHED
    return 0


def _log_unfinished(grace: float, running: Sequence[str]) -> None:
    log.error(
        "shutdown: grace period of %gs is over with %d call(s) still running: %s; "
        "exiting without them (their journal records stay as they are and are "
        "recovered at the next start)",
        grace,
        len(running),
        "; ".join(running),
    )


def _watchdog(stop: threading.Event, host: Host, grace: float) -> None:
    """Once stopping began, end the process ``grace + EXIT_MARGIN_S`` later, whatever runs.

    Never disarmed: it also bounds recovery (a SIGTERM while a probe hangs), closing
    the journal and the interpreter's own exit, which joins the server's threads.
    """
    stop.wait()
    threading.Event().wait(grace + EXIT_MARGIN_S)
    running = host.in_flight()
    if running:
        _log_unfinished(grace, running)
    else:
        log.error("shutdown: still not stopped %gs after it began; exiting", grace + EXIT_MARGIN_S)
    _exit_now(EXIT_UNFINISHED)


def _exit_now(status: int) -> NoReturn:
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(status)


def program_arguments(prog: str, description: str) -> argparse.ArgumentParser:
    """The command line every program of a node takes (the three services and the
    coordinator): ``--config``, ``--log-level``, ``--log-format``, ``--init``, ``--version``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", type=Path, required=True, help="administrator config (YAML)")
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=None,
        help="text or json lines on stderr (default: the config's logFormat, else text)",
    )
    parser.add_argument(
        "--init",
        action="store_true",
        help="create the state directory and its missing parents (a new journal): without "
        "it a stateDir whose parent is missing is refused",
    )
    add_version_option(parser)
    return parser


class _VersionAction(argparse.Action):
    """``--version``, its text read only when asked for: ``action="version"`` takes the
    text when the parser is built, and reading the installed distribution's metadata
    imports ``importlib.metadata`` (and ``email``, ``zipfile``, ``csv``): 1.6 MB of an idle
    service's memory on linux://, for an option it never sees (docs/benchmarks.md, P8)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="print the program's version and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(f"{parser.prog} {package_version()}\n")
        parser.exit()


def add_version_option(parser: argparse.ArgumentParser) -> None:
    """``--version``: ``PROG VERSION`` on stdout, exit 0; the version is read when asked."""
    parser.add_argument("--version", action=_VersionAction)


def package_version() -> str:
    """The installed distribution's version (``dra-networkplugins``), for ``--version``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def main(
    argv: Sequence[str] | None,
    prog: str,
    make_registry: Callable[[], Registry],
    make_effects: EffectsFactory,
    *,
    crash: CrashPoints = NO_CRASH,
) -> int:
    """A service's command line. ``crash``: only the test kit's launcher passes its own."""
    args = program_arguments(prog, f"{prog}: a NetworkPlugin service").parse_args(argv)
    configure_logging(prog, args.log_level, args.log_format or "text")
    try:
        config = ServiceConfig.load(args.config)
        if args.log_format is None and config.log_format != "text":
            configure_logging(prog, args.log_level, config.log_format)
        return serve(
            config,
            make_registry,
            make_effects,
            crash=crash,
            exit_process=True,
            init=args.init,
        )
    except NetworkPluginError as exc:
        print(f"{prog}: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_REFUSED
    except OSError as exc:  # a startup step this module did not expect to fail
        path = f"{exc.filename}: " if exc.filename else ""
        print(f"{prog}: {path}{_os_cause(exc)}", file=sys.stderr)
        return EXIT_REFUSED


__all__ = [
    "EXIT_MARGIN_S",
    "EXIT_REFUSED",
    "EXIT_UNFINISHED",
    "ServiceConfig",
    "StartupRefused",
    "add_version_option",
    "artifact_digest",
    "await_writer",
    "check_directories",
    "check_private_dir",
    "check_state_dir",
    "default_writer_wait",
    "main",
    "package_version",
    "program_arguments",
    "serve",
    "unexpanded_path",
]
