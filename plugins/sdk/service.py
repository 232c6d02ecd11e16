"""Service plumbing shared by the three plugin services.

Read the administrator's config, open the single-writer journal, register and
validate every endpoint, serve GetInfo (not ready) while recovering, recover,
then serve; on SIGTERM stop admitting work and leave in-flight work recoverable.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import yaml

from ._errors import NetworkPluginError, RegistrationError
from ._registry import Registry
from .host import Host, read_token
from .runner import CrashPoints, EffectRegistry, Runner
from .store import JournalUnavailable, Store

log = logging.getLogger(__name__)

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
_CONFIG_KEYS = {"socketDir", "stateDir", "tokenFile", "kernel", "bootId", "shutdownGraceSeconds"}


@dataclass(frozen=True)
class ServiceConfig:
    """The administrator-owned service configuration (see docs/deploying.md)."""

    socket_dir: Path
    state_dir: Path
    token_file: Path
    kernel: str
    boot_id: str | None = None  # None: read it from the kernel
    shutdown_grace_seconds: float = 10.0

    @classmethod
    def load(cls, path: Path) -> ServiceConfig:
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise RegistrationError(f"service config {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise RegistrationError(f"service config {path}: not a mapping")
        unknown = sorted(set(data) - _CONFIG_KEYS)
        missing = sorted({"socketDir", "stateDir", "tokenFile", "kernel"} - set(data))
        if unknown or missing:
            raise RegistrationError(
                f"service config {path}: unknown keys {unknown}, missing keys {missing}"
            )
        for key in ("socketDir", "stateDir", "tokenFile", "kernel"):
            if not isinstance(data[key], str) or not data[key]:
                raise RegistrationError(f"service config {path}: {key} must be a non-empty string")
        base = path.parent
        return cls(
            socket_dir=base / data["socketDir"],
            state_dir=base / data["stateDir"],
            token_file=base / data["tokenFile"],
            kernel=data["kernel"],
            boot_id=data.get("bootId"),
            shutdown_grace_seconds=float(data.get("shutdownGraceSeconds", 10.0)),
        )


def artifact_digest(root: Path = PACKAGE_ROOT) -> str:
    """The digest of the code this service runs: every module and pinned bundle, in order."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".json") and p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return "sha256:" + h.hexdigest()


EffectsFactory = Callable[[str, CrashPoints], tuple[EffectRegistry, str]]
"""Builds the approved executors for a kernel URL; returns them and the node's boot id."""


def serve(
    config: ServiceConfig,
    make_registry: Callable[[], Registry],
    make_effects: EffectsFactory,
    *,
    crash: CrashPoints | None = None,
    stop: threading.Event | None = None,
) -> int:
    crash = crash or CrashPoints.from_environment()
    registrations = make_registry().seal()  # one invalid registration fails startup
    token = read_token(config.token_file)
    effects, kernel_boot_id = make_effects(config.kernel, crash)
    try:
        store: Store | None = Store.open(config.state_dir)
        reason = ""
    except JournalUnavailable as exc:  # serve, but every scope stays unavailable
        store, reason = None, str(exc)
        log.error("%s", exc)
    runner = Runner(
        store,
        registrations,
        effects,
        artifact_digest=artifact_digest(),
        boot_id=config.boot_id or kernel_boot_id,
        crash=crash,
        unavailable_reason=reason,
    )
    host = Host(config.socket_dir, token)
    host.start(runner.endpoints())  # GetInfo answers ready=false until recovery is done
    for note in runner.recover():
        log.warning("recovery: %s", note)
    log.info("serving %s", ", ".join(str(p) for p in host.socket_paths))
    stop = stop or threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stop.wait()
    host.stop(
        config.shutdown_grace_seconds
    )  # stop admitting; in-flight work finishes or stays journaled
    if store is not None:
        store.close()
    return 0


def main(
    argv: Sequence[str] | None,
    prog: str,
    make_registry: Callable[[], Registry],
    make_effects: EffectsFactory,
) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=f"{prog}: a NetworkPlugin service")
    parser.add_argument("--config", type=Path, required=True, help="administrator config (YAML)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format=f"{prog} %(levelname)s %(name)s: %(message)s")
    try:
        return serve(ServiceConfig.load(args.config), make_registry, make_effects)
    except NetworkPluginError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2


__all__ = ["ServiceConfig", "artifact_digest", "main", "serve"]
