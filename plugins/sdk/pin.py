"""networkplugin-pin ROOT [--check]: pin the contract bundles under ROOT, or check the pins.

``ROOT`` holds one bundle per schema id, ``ROOT/<name>/<version>.json``, and the pins
beside them, ``ROOT/pins.json`` (each bundle's SHA-256). Run it after every deliberate
change to a bundle: a bundle whose bytes no longer match its pin fails registration,
which is the point (contracts change only on purpose). Each bundle is checked as
registration would check it before anything is written.

Also ``python -m plugins.sdk.pin``. Exit codes: 0 pinned (``--check``: the pins are
current); 1 ``--check``: pins.json is stale or missing; 2 the root or a bundle is wrong
(one line naming it; nothing is written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ._contracts import PINS_FILE, BundleStore, file_digest
from ._errors import RegistrationError

PROG = "networkplugin-pin"


class PinError(ValueError):
    """The root or one of its bundles cannot be pinned (one line naming it)."""


def current_pins(root: Path) -> dict[str, str]:
    """Schema id -> digest of every bundle under ``root``, each checked as registration
    checks it (format, schema id, config schema)."""
    if not root.is_dir():
        raise PinError(f"{root}: not a directory of contract bundles")
    pins = {}
    for path in sorted(root.glob("*/*.json")):
        schema_id = str(path.relative_to(root).with_suffix(""))
        try:
            pin = file_digest(path.read_bytes())
            BundleStore(root, pins={schema_id: pin}).load(schema_id)  # as registration loads it
        except OSError as exc:
            raise PinError(f"{path}: unreadable ({exc.strerror})") from exc
        except RegistrationError as exc:
            raise PinError(f"{path}: {exc}") from exc
        pins[schema_id] = pin
    if not pins:
        raise PinError(f"{root}: no contract bundles (<name>/<version>.json) under it")
    return pins


def render(pins: dict[str, str]) -> str:
    return json.dumps(pins, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the directory of the bundles and pins.json")
    parser.add_argument("--check", action="store_true", help="fail (1) if pins.json is stale")
    args = parser.parse_args(argv)
    root: Path = args.root
    try:
        text = render(current_pins(root))
    except PinError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    pins_file = root / PINS_FILE
    if args.check:
        try:
            written = pins_file.read_text()
        except OSError:
            written = None
        if written != text:
            state = "missing" if written is None else "stale"
            print(f"{PROG}: {pins_file} is {state}; run: {PROG} {root}", file=sys.stderr)
            return 1
        return 0
    staged = pins_file.with_name(f".{PINS_FILE}.{os.getpid()}")
    staged.write_text(text)
    staged.replace(pins_file)  # a reader sees the old pins or the new, never half a file
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
