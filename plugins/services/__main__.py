"""``python -m plugins.services NAME --config FILE``: run one service by name."""

import sys

from plugins.services import SERVICES

if __name__ == "__main__":
    name = sys.argv.pop(1) if len(sys.argv) > 1 else ""
    if name not in SERVICES:
        sys.exit(f"usage: python -m plugins.services {{{','.join(SERVICES)}}} --config FILE")
    sys.exit(SERVICES[name]())
