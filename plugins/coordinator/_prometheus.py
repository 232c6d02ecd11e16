"""The coordinator's metrics in prometheus_client, on a registry of their own.

Imported only when the config turns metrics on; published by the services' publisher
(``plugins.sdk.telemetry.MetricsPublisher``: a localhost port or a textfile).
docs/observability.md lists every metric.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ._telemetry import CoordinatorGauges

log = logging.getLogger(__name__)

# A request is a chain of plugin calls (each a few fsyncs and kernel calls), a call one.
_REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class CoordinatorPrometheus:
    """Every metric of the coordinator program, on ``registry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._requests = Histogram(
            "networkplugin_coordinator_request_duration_seconds",
            "Time from an ApplyTopology or RemoveTopology to its answer, by outcome.",
            ["request", "outcome"],
            buckets=_REQUEST_BUCKETS,
            registry=self.registry,
        )
        self._calls = Histogram(
            "networkplugin_coordinator_plugin_call_duration_seconds",
            "Time of one call to a plugin as the coordinator sees it, by outcome.",
            ["plugin", "hook", "outcome"],
            buckets=_CALL_BUCKETS,
            registry=self.registry,
        )
        self._recovery = Gauge(
            "networkplugin_coordinator_recovery_duration_seconds",
            "How long start-up recovery took (0 until it finished).",
            registry=self.registry,
        )
        self._journal = _JournalCollector()
        self.registry.register(self._journal)

    def request_finished(self, request: str, outcome: str, seconds: float) -> None:
        self._requests.labels(request, outcome).observe(seconds)

    def call_finished(self, plugin: str, hook: str, outcome: str, seconds: float) -> None:
        self._calls.labels(plugin, hook, outcome).observe(seconds)

    def recovery_finished(self, seconds: float) -> None:
        self._recovery.set(seconds)

    def watch(self, gauges: CoordinatorGauges) -> None:
        self._journal.watch(gauges)

    def render(self) -> bytes:
        """The text exposition format, as a scrape would get it."""
        return generate_latest(self.registry)


class _JournalCollector(Collector):
    """The journal's counts, read when collected."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gauges: CoordinatorGauges | None = None

    def watch(self, gauges: CoordinatorGauges) -> None:
        with self._lock:
            self._gauges = gauges

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        open_calls, applications = self._families()
        with self._lock:
            gauges = self._gauges
        if gauges is not None:
            # A scrape must never fail because the journal is closing or damaged.
            try:
                open_calls.add_metric([], gauges.open_calls())
                for state, count in sorted(gauges.applications().items()):
                    applications.add_metric([state], count)
            except Exception as exc:
                log.debug("journal metrics not read: %s", exc)
        yield open_calls
        yield applications

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "networkplugin_coordinator_open_calls",
                "Plugin calls the coordinator still owes something (requested, failed, "
                "pending or quarantined).",
            ),
            GaugeMetricFamily(
                "networkplugin_coordinator_applications",
                "Applications in the coordinator journal, by state.",
                labels=["state"],
            ),
        )
