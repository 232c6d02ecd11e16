"""The three services' systemd unit, rendered from the one template both deployments use.

``python -m plugins.services.units [--bin-dir D] [--config-dir D] [--grace S]`` prints
``dra-networkplugin@.service`` (install it in ``/etc/systemd/system`` and enable
``dra-networkplugin@vf``, ``@bond`` and ``@links``). The SR-IOV lab's Ansible role
renders the same file (``UNIT_TEMPLATE``), so the lab's hosts run the hardened unit an
operator deploys, and the lab's systemd kill tests exercise it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

UNIT_NAME = "dra-networkplugin@.service"
UNIT_TEMPLATE = Path(__file__).with_name("systemd") / f"{UNIT_NAME}.j2"
"""The jinja2 template (variables: bin_dir, config_dir, shutdown_grace_seconds)."""

DEFAULT_BIN_DIR = "/usr/local/bin"
DEFAULT_CONFIG_DIR = "/etc/dra-networkplugins"
DEFAULT_SHUTDOWN_GRACE_SECONDS = 10


def render_unit(
    *,
    bin_dir: str = DEFAULT_BIN_DIR,
    config_dir: str = DEFAULT_CONFIG_DIR,
    shutdown_grace_seconds: int = DEFAULT_SHUTDOWN_GRACE_SECONDS,
) -> str:
    """The unit's text. Paths must be absolute: systemd resolves none of them."""
    for name, path in (("bin_dir", bin_dir), ("config_dir", config_dir)):
        if not path.startswith("/"):
            raise ValueError(f"{name} {path!r}: must be an absolute path")
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
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m plugins.services.units", description=f"print {UNIT_NAME}"
    )
    parser.add_argument("--bin-dir", default=DEFAULT_BIN_DIR, help="where networkplugin-* are")
    parser.add_argument("--config-dir", default=DEFAULT_CONFIG_DIR, help="the <name>.yaml dir")
    parser.add_argument(
        "--grace", type=int, default=DEFAULT_SHUTDOWN_GRACE_SECONDS, help="shutdownGraceSeconds"
    )
    args = parser.parse_args(argv)
    try:
        text = render_unit(
            bin_dir=args.bin_dir, config_dir=args.config_dir, shutdown_grace_seconds=args.grace
        )
    except ValueError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
