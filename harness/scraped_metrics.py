"""What the rig's service processes reported as metrics, read back after the run.

Under the rig every start of a service process publishes its metrics to a textfile of
its own (``labs.METRICS_DIR_ENV``: node_exporter's textfile format, the one a deployment
with ``metrics: {textfile}`` writes). This reads them all with prometheus_client's own
parser, as a scraper would, and adds up each hook's latency histogram: how many answers
were observed and how long they took in all. A SIGKILLed process's file holds what it
had written by its last interval, so the figures are a lower bound of what was served.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

HOOK_HISTOGRAM = "networkplugin_hook_duration_seconds"
HOOKS = ("NodePrepare", "ConnectNetwork", "RemoveNetwork", "NodeUnprepare")


@dataclass
class HookMetrics:
    """Each hook's histogram, summed over every textfile (all plugins, all outcomes)."""

    textfiles: int = 0
    observations: Counter[str] = field(default_factory=Counter)
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The summary's ``metrics`` entry: every hook named, observed or not (0)."""
        return {
            "textfiles": self.textfiles,
            "hook_observations": {hook: self.observations[hook] for hook in HOOKS},
            "hook_seconds": {hook: round(self.seconds.get(hook, 0.0), 3) for hook in HOOKS},
        }


def scrape_textfiles(directory: Path) -> HookMetrics:
    """Parse every ``*.prom`` under ``directory``; a file that does not parse raises
    ``ValueError`` naming it (a service wrote it atomically, so that is a defect)."""
    scraped = HookMetrics()
    for path in sorted(directory.glob("*.prom")):
        try:
            families = list(text_string_to_metric_families(path.read_text()))
        except ValueError as exc:
            raise ValueError(f"{path}: not Prometheus text format: {exc}") from exc
        scraped.textfiles += 1
        for family in families:
            if family.name != HOOK_HISTOGRAM:
                continue
            for sample in family.samples:
                hook = sample.labels.get("hook", "")
                if sample.name == f"{HOOK_HISTOGRAM}_count":
                    scraped.observations[hook] += int(sample.value)
                elif sample.name == f"{HOOK_HISTOGRAM}_sum":
                    scraped.seconds[hook] = scraped.seconds.get(hook, 0.0) + sample.value
    return scraped
