"""What the runner and the service report, and the report that costs nothing.

The runner never imports a metrics library: it calls a :class:`Metrics` it was given.
:data:`NO_METRICS` (the default) does nothing; :class:`~.PrometheusMetrics` is the one
real implementation, built only when a service config asks for metrics. Every label
the interface takes is bounded by the deployment (plugin names, hooks, effect kinds,
status codes, journal boundaries), never by the traffic (no operation, scope or
sandbox ids), so a long-running node cannot grow a metric without bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "NO_METRICS",
    "JournalGauges",
    "Metrics",
    "MetricsConfig",
    "NoMetrics",
]


@dataclass(frozen=True)
class JournalGauges:
    """Read at scrape time (nothing is counted on the hot path for these).

    ``fsyncs``: COMMITs of the journal writer since the process started (each one WAL
    fsync under ``synchronous=FULL``). ``quarantined_scopes``: scopes whose latest
    cleanup ended QUARANTINED, per state namespace (logical plugin).
    """

    fsyncs: Callable[[], int]
    quarantined_scopes: Callable[[], Mapping[str, int]]


class Metrics(Protocol):
    """The runner's reports. Implementations must be thread-safe and must not raise."""

    def hook_finished(self, plugin: str, hook: str, outcome: str, seconds: float) -> None:
        """A lifecycle hook returned; ``outcome`` is ``OK`` or the gRPC status code name."""
        ...

    def effect_finished(self, kind: str, outcome: str) -> None:
        """An effect reached an outcome (``applied``, ``apply_failed``, ``undone``, ...)."""
        ...

    def recovery_finished(self, seconds: float) -> None:
        """Start-up recovery took ``seconds``."""
        ...

    def journal_committed(self, boundary: str, seconds: float) -> None:
        """One journal write at ``boundary`` (``intent``, ``applying``, ...) was durable."""
        ...

    def watch_journal(self, gauges: JournalGauges) -> None:
        """The journal's own counts, read whenever the metrics are collected."""
        ...

    def watch_kernel(self, stuck_calls: Callable[[], int]) -> None:
        """The kernel backend's count of calls stuck past their deadline (threads blocked
        in the kernel), read whenever the metrics are collected; must not raise."""
        ...


class NoMetrics:
    """Metrics off: every report is a no-op method call."""

    def hook_finished(self, plugin: str, hook: str, outcome: str, seconds: float) -> None:
        pass

    def effect_finished(self, kind: str, outcome: str) -> None:
        pass

    def recovery_finished(self, seconds: float) -> None:
        pass

    def journal_committed(self, boundary: str, seconds: float) -> None:
        pass

    def watch_journal(self, gauges: JournalGauges) -> None:
        pass

    def watch_kernel(self, stuck_calls: Callable[[], int]) -> None:
        pass


NO_METRICS: Metrics = NoMetrics()


@dataclass(frozen=True)
class MetricsConfig:
    """Where a service publishes its metrics (the service config's ``metrics``).

    Exactly one of ``port`` (an HTTP endpoint on 127.0.0.1 only: the node's scraper,
    never the network) and ``textfile`` (node_exporter's textfile collector: the file
    is rewritten atomically every ``textfile_interval_seconds`` and at shutdown).
    """

    port: int | None = None
    textfile: Path | None = None
    textfile_interval_seconds: float = 15.0

    def __post_init__(self) -> None:
        if (self.port is None) == (self.textfile is None):
            raise ValueError("metrics: exactly one of port and textfile")
        if self.port is not None and not 1 <= self.port <= 65535:
            raise ValueError(f"metrics: port {self.port} is not in 1..65535")
        if self.textfile_interval_seconds <= 0:
            raise ValueError("metrics: textfileIntervalSeconds must be > 0")

    @classmethod
    def from_config(cls, data: Mapping[str, Any] | None, base: Path) -> MetricsConfig | None:
        """A schema-checked ``metrics`` mapping of a service's or the coordinator's config
        (``None``: no metrics); a relative ``textfile`` is against ``base``, the config's
        directory."""
        if data is None:
            return None
        textfile = data.get("textfile")
        return cls(
            port=data.get("port"),
            textfile=base / textfile if textfile is not None else None,
            textfile_interval_seconds=float(data.get("textfileIntervalSeconds", 15.0)),
        )
