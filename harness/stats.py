"""Where test processes leave the rig's figures (see harness.pytest_plugin, harness.rig).

Each process writes one ``stats-<worker>.json``: ``counts`` (added up across processes)
and ``facts`` (single values such as the guest's kernel release or its boot seconds;
when processes disagree, the last one read wins, so a fact should be the same in all;
a fact that is a mapping is merged key by key, a list joined: the ``hosts`` each SR-IOV
worker provisioned). A process that served SR-IOV groups (the ``sriov_groups`` fact)
also has its counts in the section of those groups, so a run of several hosts on
several workers reports each group's figures beside the total.
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
    sections: dict[str, dict[str, int]] = field(default_factory=dict)


def gather(directory: Path) -> Gathered:
    """Add up the counters every test process wrote, and collect their facts."""
    total: Counter[str] = Counter()
    facts: dict[str, Any] = {}
    sections: dict[str, Counter[str]] = {}
    for path in sorted(directory.glob("stats-*.json")):
        written = json.loads(path.read_text())
        total.update(written["counts"])
        for key, value in written["facts"].items():
            known = facts.get(key)
            if isinstance(known, dict) and isinstance(value, dict):
                facts[key] = {**known, **value}
            elif isinstance(known, list) and isinstance(value, list):
                facts[key] = sorted({*known, *value})
            else:
                facts[key] = value
        groups = written["facts"].get("sriov_groups")
        if groups:
            sections.setdefault(", ".join(groups), Counter()).update(written["counts"])
    return Gathered(dict(total), facts, {name: dict(c) for name, c in sections.items()})
