"""The node's systemd units, rendered from the one template every deployment uses.

``python -m plugins.services.units [--bin-dir D] [--config-dir D] [--grace S]
[--metrics-port] [--metrics-textfile-dir D] [--coordinator]`` prints
``dra-networkplugin@.service``, the three services' unit (install it in
``/etc/systemd/system`` and enable ``dra-networkplugin@vf``, ``@bond`` and ``@links``),
or with ``--coordinator`` ``dra-networkplugin-coordinator.service``. The SR-IOV lab's
Ansible role renders the same file (``UNIT_TEMPLATE``), so the lab's hosts run the
hardened unit an operator deploys, and the lab's systemd kill tests exercise it.

The unit allows no IP socket and writes nowhere but its own directories. Metrics need
one of two allowances, and each option adds exactly its own: ``--metrics-port`` (the
configs' ``metrics.port``) an ``AF_INET`` socket and IP traffic with localhost,
``--metrics-textfile-dir`` (the directory of their ``metrics.textfile``) that directory
writable.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

UNIT_NAME = "dra-networkplugin@.service"
COORDINATOR_UNIT_NAME = "dra-networkplugin-coordinator.service"
UNIT_TEMPLATE = Path(__file__).with_name("systemd") / f"{UNIT_NAME}.j2"
"""The jinja2 template (variables: bin_dir, config_dir, shutdown_grace_seconds; optional:
coordinator, metrics_port, textfile_dir)."""

DEFAULT_BIN_DIR = "/usr/local/bin"
DEFAULT_CONFIG_DIR = "/etc/dra-networkplugins"
DEFAULT_SHUTDOWN_GRACE_SECONDS = 10
RUNTIME_ROOT = "/run"
STATE_ROOT = "/var/lib"
UNIT_DIRECTORY = "dra-networkplugins"
"""``RuntimeDirectory=`` and ``StateDirectory=`` are ``dra-networkplugins/<name>``."""


@dataclass(frozen=True)
class UnitPaths:
    """Where a rendered unit runs one program: what its config must name."""

    program: str  # networkplugin-vf
    config: Path  # --config: /etc/dra-networkplugins/vf.yaml
    runtime_dir: Path  # RuntimeDirectory=: /run/dra-networkplugins/vf (socketDir)
    state_dir: Path  # StateDirectory=: /var/lib/dra-networkplugins/vf (stateDir)


def unit_paths(
    name: str, *, bin_dir: str = DEFAULT_BIN_DIR, config_dir: str = DEFAULT_CONFIG_DIR
) -> UnitPaths:
    """The paths the unit gives the program ``name`` (``vf``, ``bond``, ``links`` as the
    services' instance name, or ``coordinator``): the same text the template writes."""
    return UnitPaths(
        program=f"{bin_dir.rstrip('/')}/networkplugin-{name}",
        config=Path(config_dir) / f"{name}.yaml",
        runtime_dir=Path(RUNTIME_ROOT) / UNIT_DIRECTORY / name,
        state_dir=Path(STATE_ROOT) / UNIT_DIRECTORY / name,
    )


def render_unit(
    *,
    bin_dir: str = DEFAULT_BIN_DIR,
    config_dir: str = DEFAULT_CONFIG_DIR,
    shutdown_grace_seconds: int = DEFAULT_SHUTDOWN_GRACE_SECONDS,
    coordinator: bool = False,
    metrics_port: bool = False,
    textfile_dir: str | None = None,
) -> str:
    """The unit's text. Paths must be absolute: systemd resolves none of them.

    ``coordinator``: the coordinator's unit instead of the services' template.
    ``metrics_port``: the configs publish metrics on a 127.0.0.1 port. ``textfile_dir``:
    the directory their metrics textfile is written in.
    """
    paths = {"bin_dir": bin_dir, "config_dir": config_dir}
    if textfile_dir is not None:
        paths["textfile_dir"] = textfile_dir
    for name, path in paths.items():
        if not path.startswith("/"):
            raise ValueError(f"{name} {path!r}: must be an absolute path")
        if any(c.isspace() for c in path) or "%" in path:
            # A unit line splits at white space and expands % specifiers.
            raise ValueError(f"{name} {path!r}: must not hold white space or '%'")
    if shutdown_grace_seconds < 0:
        raise ValueError(f"shutdown_grace_seconds {shutdown_grace_seconds}: must be >= 0")
    # jinja2 only here: rendering a unit is no part of a service's start-up.
    import jinja2

    environment = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    template = environment.from_string(UNIT_TEMPLATE.read_text(encoding="utf-8"))
    return template.render(
        bin_dir=bin_dir.rstrip("/") or "/",
        config_dir=config_dir.rstrip("/") or "/",
        shutdown_grace_seconds=shutdown_grace_seconds,
        coordinator=coordinator,
        metrics_port=metrics_port,
        textfile_dir=(textfile_dir.rstrip("/") or "/") if textfile_dir else "",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m plugins.services.units",
        description=f"print {UNIT_NAME} (or {COORDINATOR_UNIT_NAME})",
    )
    parser.add_argument("--bin-dir", default=DEFAULT_BIN_DIR, help="where networkplugin-* are")
    parser.add_argument("--config-dir", default=DEFAULT_CONFIG_DIR, help="the <name>.yaml dir")
    parser.add_argument(
        "--grace", type=int, default=DEFAULT_SHUTDOWN_GRACE_SECONDS, help="shutdownGraceSeconds"
    )
    parser.add_argument(
        "--metrics-port",
        action="store_true",
        help="the configs publish metrics on a 127.0.0.1 port (metrics.port): allow an "
        "AF_INET socket and IP traffic with localhost (IPAddressAllow=localhost)",
    )
    parser.add_argument(
        "--metrics-textfile-dir",
        metavar="DIR",
        help="the directory of the configs' metrics.textfile: made writable (ReadWritePaths=)",
    )
    parser.add_argument(
        "--coordinator",
        action="store_true",
        help=f"print the coordinator's unit, {COORDINATOR_UNIT_NAME}",
    )
    args = parser.parse_args(argv)
    try:
        text = render_unit(
            bin_dir=args.bin_dir,
            config_dir=args.config_dir,
            shutdown_grace_seconds=args.grace,
            coordinator=args.coordinator,
            metrics_port=args.metrics_port,
            textfile_dir=args.metrics_textfile_dir,
        )
    except ValueError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
