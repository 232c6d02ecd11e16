"""Telemetry of the SDK's services: the metrics interface, Prometheus behind it, and logs.

* :class:`Metrics` is what the runner reports to; :data:`NO_METRICS` does nothing and
  is the default, so a service without metrics never loads prometheus_client.
* :class:`PrometheusMetrics` and :class:`MetricsPublisher` (a localhost port or a
  textfile) are imported on first use (start-up time matters: docs/observability.md).
* :func:`log_event` writes a line that is text and fields at once; :class:`JsonFormatter`
  renders it as one JSON object; :class:`BackgroundHandler` (what ``configure_logging``
  installs) formats and writes lines on a thread of its own, so a hook never does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._logs import (
    LOG_FORMATS,
    BackgroundHandler,
    JsonFormatter,
    LogFormat,
    configure_logging,
    log_event,
)
from ._metrics import NO_METRICS, JournalGauges, Metrics, MetricsConfig, NoMetrics

if TYPE_CHECKING:
    from ._prometheus import MetricsPublisher, PrometheusMetrics

__all__ = [
    "LOG_FORMATS",
    "NO_METRICS",
    "BackgroundHandler",
    "JournalGauges",
    "JsonFormatter",
    "LogFormat",
    "Metrics",
    "MetricsConfig",
    "MetricsPublisher",
    "NoMetrics",
    "PrometheusMetrics",
    "configure_logging",
    "log_event",
]

_LAZY = ("MetricsPublisher", "PrometheusMetrics")


def __getattr__(name: str) -> Any:
    # prometheus_client is loaded only by a service that turned metrics on.
    if name in _LAZY:
        from . import _prometheus

        return getattr(_prometheus, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
