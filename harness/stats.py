"""Where test processes leave the rig's counters (see harness.pytest_plugin, harness.rig)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

STATS_DIR_ENV = "RIG_STATS_DIR"


def gather(directory: Path) -> dict[str, int]:
    """Add up the counters every test process wrote."""
    total: Counter[str] = Counter()
    for path in directory.glob("stats-*.json"):
        total.update(json.loads(path.read_text()))
    return dict(total)
