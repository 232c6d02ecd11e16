"""``python -m plugins.coordinator --config FILE``: the coordinator program."""

import sys

from plugins.coordinator import main

if __name__ == "__main__":
    sys.exit(main())
