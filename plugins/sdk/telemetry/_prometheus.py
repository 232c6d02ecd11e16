"""The metrics behind :class:`~._metrics.Metrics`, in the Prometheus exposition format.

Imported only when a service config turns metrics on. Each :class:`PrometheusMetrics`
owns its families (no process-global registry), so two services or two tests in one
process never see each other's samples. docs/observability.md lists every metric.

The families and the text format are ``_exposition``'s: what prometheus_client's own
metrics would collect and ``generate_latest`` write, without importing it, which cost
~25 ms of CPU at each service start (the rig publishes every service's metrics to a
textfile). A metrics port is served by prometheus_client's HTTP server (its content
negotiation: the text format or OpenMetrics), loaded only then, over the same samples.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ._exposition import Counter, Family, Gauge, Histogram, render, write_textfile
from ._metrics import JournalGauges, MetricsConfig

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.registry import CollectorRegistry

__all__ = ["MetricsPublisher", "PrometheusMetrics"]

log = logging.getLogger(__name__)

# A hook's time is dominated by kernel calls and two or more fsyncs: milliseconds to
# seconds. A commit is one fsync, shared by a group of writers: sub-millisecond up.
_HOOK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_COMMIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1)
_LOCALHOST = "127.0.0.1"


class PrometheusMetrics:
    """Every metric of one service process."""

    def __init__(self) -> None:
        self._hooks = Histogram(
            "networkplugin_hook_duration_seconds",
            "Time from a lifecycle hook's arrival at the runner to its answer.",
            ["plugin", "hook", "outcome"],
            buckets=_HOOK_BUCKETS,
        )
        self._effects = Counter(
            "networkplugin_effects",
            "Effects that reached an outcome, by effect kind.",
            ["kind", "outcome"],
        )
        self._recovery = Gauge(
            "networkplugin_recovery_duration_seconds",
            "How long start-up recovery took (0 until it finished).",
        )
        self._commits = Histogram(
            "networkplugin_journal_commit_duration_seconds",
            "Time for one journal write to be durable, by the runner's boundary.",
            ["boundary"],
            buckets=_COMMIT_BUCKETS,
        )
        self._journal = _JournalCollector()

    def hook_finished(self, plugin: str, hook: str, outcome: str, seconds: float) -> None:
        self._hooks.observe((plugin, hook, outcome), seconds)

    def effect_finished(self, kind: str, outcome: str) -> None:
        self._effects.inc((kind, outcome))

    def recovery_finished(self, seconds: float) -> None:
        self._recovery.set(seconds)

    def journal_committed(self, boundary: str, seconds: float) -> None:
        self._commits.observe((boundary,), seconds)

    def watch_journal(self, gauges: JournalGauges) -> None:
        self._journal.watch(gauges)

    def collect(self) -> Iterator[Family]:
        """Every family, in the order a scrape lists them."""
        yield self._hooks.collect()
        yield self._effects.collect()
        yield self._recovery.collect()
        yield self._commits.collect()
        yield from self._journal.collect()

    def render(self) -> bytes:
        """The text exposition format, as a scrape would get it."""
        return render(self.collect())


class _JournalCollector:
    """The journal's counts, read when collected: nothing to update on the hot path."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gauges: JournalGauges | None = None

    def watch(self, gauges: JournalGauges) -> None:
        with self._lock:
            self._gauges = gauges

    def collect(self) -> Iterator[Family]:
        fsyncs = Family(
            "networkplugin_journal_fsyncs",
            "Journal COMMITs since the service started, each one WAL fsync.",
            "counter",
        )
        quarantined = Family(
            "networkplugin_quarantined_scopes",
            "Scopes whose latest cleanup ended QUARANTINED, by state namespace.",
            "gauge",
        )
        with self._lock:
            gauges = self._gauges
        if gauges is not None:
            # A scrape must never fail because the journal is closing or unavailable.
            try:
                fsyncs.add("_total", {}, gauges.fsyncs())
                for namespace, count in sorted(gauges.quarantined_scopes().items()):
                    quarantined.add("", {"namespace": namespace}, count)
            except Exception as exc:
                log.debug("journal metrics not read: %s", exc)
        yield fsyncs
        yield quarantined


def _registry(metrics: PrometheusMetrics) -> CollectorRegistry:
    """A prometheus_client registry over ``metrics``' samples, for its HTTP server."""
    # Imported here: only a metrics port needs prometheus_client (see the module's doc).
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

    class Samples:
        """``metrics``' families as prometheus_client's Metric objects, sample by sample."""

        def collect(self) -> Iterator[Metric]:
            for family in metrics.collect():
                metric = Metric(family.name, family.documentation, family.type)
                for name, labels, value in family.samples:
                    # What prometheus_client's own metrics do in collect(): the same
                    # samples, so both exposition formats come out as they would.
                    metric.add_sample(name, labels, value)
                yield metric

    registry = CollectorRegistry(auto_describe=True)
    registry.register(Samples())
    return registry


class MetricsPublisher:
    """Publishes one :class:`PrometheusMetrics` where the config says, until ``stop``.

    ``start`` raises ``OSError`` (naming the port or the file) when it cannot publish:
    the port is taken, the textfile's directory is missing or not writable.
    """

    def __init__(self, metrics: PrometheusMetrics, config: MetricsConfig) -> None:
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
            # Imported here: only a metrics port needs prometheus_client (module doc).
            from prometheus_client import start_http_server

            self._server, _ = start_http_server(
                config.port, addr=_LOCALHOST, registry=_registry(self._metrics)
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
        write_textfile(str(self._config.textfile), self._metrics.collect)

    def _write_every(self) -> None:
        # A period, not a synchronization: the textfile collector reads whenever it likes.
        while not self._stopping.wait(self._config.textfile_interval_seconds):
            try:
                self._write()
            except OSError as exc:
                log.error("metrics textfile %s not written: %s", self._config.textfile, exc)
