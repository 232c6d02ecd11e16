"""The service's metric families and their text exposition, without prometheus_client.

What :class:`~._prometheus.PrometheusMetrics` counts lives here: counters, a gauge and
histograms by label values, collected into :class:`Family` objects whose samples are
exactly those prometheus_client's own ``Counter``, ``Gauge`` and ``Histogram`` collect
(names, labels, values, order, the ``_created`` series), and rendered as its
``generate_latest`` renders them (format 0.0.4). A textfile, the rig's way of
publishing, is written here with no third-party import at all: importing
prometheus_client (its HTTP, WSGI, e-mail and urllib modules) was ~25 ms of CPU at
every service start. Only a metrics port, which needs its HTTP server and content
negotiation, loads it (``_prometheus``).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence

__all__ = [
    "Counter",
    "Family",
    "Gauge",
    "Histogram",
    "Sample",
    "render",
    "write_textfile",
]

Sample = tuple[str, dict[str, str], float]
"""One sample: its full name (``_total``, ``_bucket``... included), labels and value."""

# As prometheus_client decides whether counters and histograms export ``_created``.
_CREATED = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in (
    "true",
    "1",
    "t",
)


class Family:
    """One metric family as collected: its name (a counter's without ``_total``), help,
    type, and samples in exposition order."""

    __slots__ = ("documentation", "name", "samples", "type")

    def __init__(self, name: str, documentation: str, type_: str) -> None:
        self.name = name
        self.documentation = documentation
        self.type = type_
        self.samples: list[Sample] = []

    def add(self, suffix: str, labels: dict[str, str], value: float) -> None:
        self.samples.append((self.name + suffix, labels, value))


class Counter:
    """A counter by label values (``<name>_total`` and ``<name>_created`` per series)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self._name, self._documentation = name, documentation
        self._labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        self._series: dict[tuple[str, ...], list[float]] = {}  # labels -> [value, created]

    def inc(self, labelvalues: Sequence[object], amount: float = 1) -> None:
        key = tuple(str(v) for v in labelvalues)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = [0.0, time.time()]
            series[0] += amount

    def collect(self) -> Family:
        family = Family(self._name, self._documentation, "counter")
        with self._lock:
            series = [(key, tuple(s)) for key, s in self._series.items()]
        for key, (value, created) in series:
            family.add("_total", dict(zip(self._labelnames, key, strict=True)), value)
            if _CREATED:
                family.add("_created", dict(zip(self._labelnames, key, strict=True)), created)
        return family


class Gauge:
    """A gauge without labels."""

    def __init__(self, name: str, documentation: str) -> None:
        self._name, self._documentation = name, documentation
        self._lock = threading.Lock()
        self._value = 0.0

    def set(self, value: float) -> None:
        with self._lock:
            self._value = float(value)

    def collect(self) -> Family:
        family = Family(self._name, self._documentation, "gauge")
        with self._lock:
            family.add("", {}, self._value)
        return family


class Histogram:
    """A histogram by label values, over ``buckets`` (``+Inf`` added as the last)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
    ) -> None:
        self._name, self._documentation = name, documentation
        self._labelnames = tuple(labelnames)
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds):
            raise ValueError("buckets not in sorted order")
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._bounds = tuple(bounds)
        self._les = tuple(go_float(b) for b in bounds)
        self._lock = threading.Lock()
        # labels -> [sum, created, count in each bucket (not cumulative)...]
        self._series: dict[tuple[str, ...], list[float]] = {}

    def observe(self, labelvalues: Sequence[object], amount: float) -> None:
        key = tuple(str(v) for v in labelvalues)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = [0.0, time.time(), *(0.0 for _ in self._bounds)]
            series[0] += amount
            for i, bound in enumerate(self._bounds):
                if amount <= bound:
                    series[2 + i] += 1
                    break

    def collect(self) -> Family:
        family = Family(self._name, self._documentation, "histogram")
        with self._lock:
            series = [(key, tuple(s)) for key, s in self._series.items()]
        for key, (total, created, *counts) in series:
            labels = list(zip(self._labelnames, key, strict=True))
            cumulative = 0.0
            for le, count in zip(self._les, counts, strict=True):
                cumulative += count
                family.add("_bucket", dict([*labels, ("le", le)]), cumulative)
            family.add("_count", dict(labels), cumulative)
            if self._bounds[0] >= 0:
                family.add("_sum", dict(labels), total)
            if _CREATED:
                family.add("_created", dict(labels), created)
        return family


def go_float(value: float) -> str:
    """A sample value as prometheus_client (and Go) writes it: ``1.0``, ``+Inf``, ``1e+09``."""
    value = float(value)
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    # Go switches to exponents sooner than Python.
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _label_value(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _sample_line(sample: Sample) -> str:
    name, labels, value = sample
    if labels:
        pairs = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(labels.items()))
        return f"{name}{{{pairs}}} {go_float(value)}\n"
    return f"{name} {go_float(value)}\n"


def render(families: Iterable[Family]) -> bytes:
    """The text exposition (format 0.0.4) of ``families``, as ``generate_latest`` writes it.

    The metric names are the service's own (plain ASCII, never escaped); a counter is
    named with ``_total``; each family's ``_created`` series follows it as a gauge."""
    out: list[str] = []
    for family in families:
        name = family.name + "_total" if family.type == "counter" else family.name
        documentation = _help(family.documentation)
        out.append(f"# HELP {name} {documentation}\n# TYPE {name} {family.type}\n")
        created: list[str] = []
        for sample in family.samples:
            if sample[0] == family.name + "_created":
                created.append(_sample_line(sample))
            else:
                out.append(_sample_line(sample))
        if created:
            name = family.name + "_created"
            out.append(f"# HELP {name} {documentation}\n# TYPE {name} gauge\n")
            out.extend(created)
    return "".join(out).encode()


def write_textfile(path: str, collect: Callable[[], Iterable[Family]]) -> None:
    """Write the exposition to ``path`` at once (a rename), as ``write_to_textfile`` does:
    through ``<path>.<pid>.<thread id>`` beside it, removed if anything fails."""
    staging = f"{path}.{os.getpid()}.{threading.current_thread().ident}"
    try:
        with open(staging, "wb") as f:
            f.write(render(collect()))
        os.rename(staging, path)
    except Exception:
        if os.path.exists(staging):
            os.remove(staging)
        raise
