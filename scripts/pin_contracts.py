"""Pin the contract bundles: write plugins/contracts/pins.json, or --check it.

Run after editing a bundle on purpose. A pin that no longer matches its bundle
makes registration fail, which is the point: contracts change only deliberately.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "plugins" / "contracts"


def current_pins(root: Path = ROOT) -> dict[str, str]:
    return {
        str(p.relative_to(root).with_suffix("")): "sha256:"
        + hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.glob("*/*.json"))
    }


def render(pins: dict[str, str]) -> str:
    return json.dumps(pins, indent=2, sort_keys=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if pins.json is stale")
    parser.add_argument("--root", type=Path, default=ROOT, help="bundle root (default: ours)")
    args = parser.parse_args()
    text = render(current_pins(args.root))
    pins_file = args.root / "pins.json"
    if args.check:
        if not pins_file.exists() or pins_file.read_text() != text:
            print(
                f"{pins_file} is stale; run: "
                f"uv run python scripts/pin_contracts.py --root {args.root}",
                file=sys.stderr,
            )
            return 1
        return 0
    pins_file.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
