"""The metrics behind :class:`~._metrics.Metrics`, in prometheus_client, on its own registry.

Imported only when a service config turns metrics on: the no-metrics path never loads
prometheus_client. Each :class:`PrometheusMetrics` owns a fresh ``CollectorRegistry``
(never the library's process-global one), so two services or two tests in one process
never see each other's samples. docs/observability.md lists every metric.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
    write_to_textfile,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ._metrics import JournalGauges, MetricsConfig

__all__ = ["MetricsPublisher", "PrometheusMetrics"]

log = logging.getLogger(__name__)

# A hook's time is dominated by kernel calls and two or more fsyncs: milliseconds to
# seconds. A commit is one fsync, shared by a group of writers: sub-millisecond up.
_HOOK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_COMMIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1)
_LOCALHOST = "127.0.0.1"


class PrometheusMetrics:
    """Every metric of one service process, on ``registry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._hooks = Histogram(
            "networkplugin_hook_duration_seconds",
            "Time from a lifecycle hook's arrival at the runner to its answer.",
            ["plugin", "hook", "outcome"],
            buckets=_HOOK_BUCKETS,
            registry=self.registry,
        )
        self._effects = Counter(
            "networkplugin_effects",
            "Effects that reached an outcome, by effect kind.",
            ["kind", "outcome"],
            registry=self.registry,
        )
        self._recovery = Gauge(
            "networkplugin_recovery_duration_seconds",
            "How long start-up recovery took (0 until it finished).",
            registry=self.registry,
        )
        self._commits = Histogram(
            "networkplugin_journal_commit_duration_seconds",
            "Time for one journal write to be durable, by the runner's boundary.",
            ["boundary"],
            buckets=_COMMIT_BUCKETS,
            registry=self.registry,
        )
        self._journal = _JournalCollector()
        self.registry.register(self._journal)
        self._stuck = Gauge(
            "networkplugin_kernel_stuck_calls",
            "Kernel calls past their deadline whose threads have not returned (0 until a "
            "kernel that counts them is watched).",
            registry=self.registry,
        )

    def hook_finished(self, plugin: str, hook: str, outcome: str, seconds: float) -> None:
        self._hooks.labels(plugin, hook, outcome).observe(seconds)

    def effect_finished(self, kind: str, outcome: str) -> None:
        self._effects.labels(kind, outcome).inc()

    def recovery_finished(self, seconds: float) -> None:
        self._recovery.set(seconds)

    def journal_committed(self, boundary: str, seconds: float) -> None:
        self._commits.labels(boundary).observe(seconds)

    def watch_journal(self, gauges: JournalGauges) -> None:
        self._journal.watch(gauges)

    def watch_kernel(self, stuck_calls: Callable[[], int]) -> None:
        self._stuck.set_function(stuck_calls)  # read at each scrape

    def render(self) -> bytes:
        """The text exposition format, as a scrape would get it."""
        return generate_latest(self.registry)


class _JournalCollector(Collector):
    """The journal's counts, read when collected: nothing to update on the hot path."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gauges: JournalGauges | None = None

    def watch(self, gauges: JournalGauges) -> None:
        with self._lock:
            self._gauges = gauges

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        fsyncs, quarantined = self._families()
        with self._lock:
            gauges = self._gauges
        if gauges is not None:
            # A scrape must never fail because the journal is closing or unavailable.
            try:
                fsyncs.add_metric([], gauges.fsyncs())
                for namespace, count in sorted(gauges.quarantined_scopes().items()):
                    quarantined.add_metric([namespace], count)
            except Exception as exc:
                log.debug("journal metrics not read: %s", exc)
        yield fsyncs
        yield quarantined

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, GaugeMetricFamily]:
        return (
            CounterMetricFamily(
                "networkplugin_journal_fsyncs",
                "Journal COMMITs since the service started, each one WAL fsync.",
            ),
            GaugeMetricFamily(
                "networkplugin_quarantined_scopes",
                "Scopes whose latest cleanup ended QUARANTINED, by state namespace.",
                labels=["namespace"],
            ),
        )


class Registered(Protocol):
    """Metrics on a registry of their own: :class:`PrometheusMetrics`, the coordinator's."""

    @property
    def registry(self) -> CollectorRegistry: ...


class MetricsPublisher:
    """Publishes one program's metrics (:class:`PrometheusMetrics`, or any on a registry
    of their own) where the config says, until ``stop``.

    ``start`` raises ``OSError`` (naming the port or the file) when it cannot publish:
    the port is taken, the textfile's directory is missing or not writable.
    """

    def __init__(self, metrics: Registered, config: MetricsConfig) -> None:
        self._metrics = metrics
        self._config = config
        self._server: WSGIServer | None = None
        self._stopping = threading.Event()
        self._writer: threading.Thread | None = None

    @property
    def where(self) -> str:
        """``http://127.0.0.1:9464/metrics`` or the textfile's path."""
        if self._config.port is not None:
            return f"http://{_LOCALHOST}:{self._config.port}/metrics"
        return str(self._config.textfile)

    def start(self) -> None:
        config = self._config
        if config.port is not None:
            self._server, _ = start_http_server(
                config.port, addr=_LOCALHOST, registry=self._metrics.registry
            )
            return
        self._write()  # once now: a path that cannot be written refuses start-up
        self._writer = threading.Thread(target=self._write_every, name="metrics-textfile")
        self._writer.daemon = True
        self._writer.start()

    def stop(self) -> None:
        """Stop serving; a textfile gets its last write (the final counts) first."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._writer is not None:
            self._writer.join()
            self._writer = None
            with contextlib.suppress(OSError):
                self._write()

    def _write(self) -> None:
        assert self._config.textfile is not None
        write_to_textfile(str(self._config.textfile), self._metrics.registry)

    def _write_every(self) -> None:
        # A period, not a synchronization: the textfile collector reads whenever it likes.
        while not self._stopping.wait(self._config.textfile_interval_seconds):
            try:
                self._write()
            except OSError as exc:
                log.error("metrics textfile %s not written: %s", self._config.textfile, exc)
