"""Where test processes leave the rig's figures (see harness.pytest_plugin, harness.rig).

Each process writes one ``stats-<worker>.json``: ``counts`` (added up across processes)
and ``facts`` (single values such as the guest's kernel release or its boot seconds;
when processes disagree, the last one read wins, so a fact should be the same in all).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATS_DIR_ENV = "RIG_STATS_DIR"


@dataclass
class Gathered:
    counts: dict[str, int] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)


def gather(directory: Path) -> Gathered:
    """Add up the counters every test process wrote, and collect their facts."""
    total: Counter[str] = Counter()
    facts: dict[str, Any] = {}
    for path in sorted(directory.glob("stats-*.json")):
        written = json.loads(path.read_text())
        total.update(written["counts"])
        facts.update(written["facts"])
    return Gathered(dict(total), facts)
