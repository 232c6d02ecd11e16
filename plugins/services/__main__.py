"""``python -m plugins.services NAME --config FILE``: run one service by name."""

import sys

from plugins.services import run

if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
