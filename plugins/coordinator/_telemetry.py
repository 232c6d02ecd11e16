"""What the coordinator program reports: one log line per request, and its metrics.

Like the services' (``plugins.sdk.telemetry``): the program reports to a
:class:`CoordinatorMetrics` it was given; :data:`NO_METRICS` does nothing and is the
default, so a coordinator without metrics never loads prometheus_client
(``_prometheus.CoordinatorPrometheus`` is the real one, docs/observability.md lists its
metrics). Labels are bounded by the deployment (request kinds, plugin names, hooks,
outcomes, application states), never by the traffic: the ids go to the log lines only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from plugins.sdk import CleanupResponse, NetworkPluginError
from plugins.sdk.telemetry import log_event

from ._runtime import CallObserver

log = logging.getLogger("plugins.coordinator")


@dataclass(frozen=True)
class CoordinatorGauges:
    """Read from the journal at scrape time (nothing is counted on the request path)."""

    open_calls: Callable[[], int]
    applications: Callable[[], Mapping[str, int]]  # by state


class CoordinatorMetrics(Protocol):
    """The program's reports. Implementations must be thread-safe and must not raise."""

    def request_finished(self, request: str, outcome: str, seconds: float) -> None:
        """An apply or remove answered: ``outcome`` is its state (``applied``,
        ``removed``, ``removing``) or the gRPC status code name it failed with."""
        ...

    def call_finished(self, plugin: str, hook: str, outcome: str, seconds: float) -> None:
        """A call to a plugin returned: ``OK``, a receipt's status or a status code name."""
        ...

    def recovery_finished(self, seconds: float) -> None: ...

    def watch(self, gauges: CoordinatorGauges) -> None: ...


class NoMetrics:
    """Metrics off: every report is a no-op method call."""

    def request_finished(self, request: str, outcome: str, seconds: float) -> None:
        pass

    def call_finished(self, plugin: str, hook: str, outcome: str, seconds: float) -> None:
        pass

    def recovery_finished(self, seconds: float) -> None:
        pass

    def watch(self, gauges: CoordinatorGauges) -> None:
        pass


NO_METRICS: CoordinatorMetrics = NoMetrics()


class RequestLine:
    """One request's log line, filled in by the request: the ids it learns (a removal
    learns the claim and sandbox from the journal), its outcome and why, if not done."""

    def __init__(self, ids: Mapping[str, str]) -> None:
        self.ids = dict(ids)
        self.state = ""
        self.reason = ""


@contextmanager
def request_line(metrics: CoordinatorMetrics, request: str, **ids: str) -> Iterator[RequestLine]:
    """Time one ``apply`` or ``remove``, then log its one line and report it, however it
    ends: ``apply applied attachment=... claim=... sandbox=... topology=...``; the
    status code it failed with and the reason (WARNING); ``remove removing`` and the step
    it waits for (WARNING)."""
    line = RequestLine(ids)
    started = time.perf_counter()
    level = logging.INFO
    try:
        yield line
    except NetworkPluginError as exc:
        line.state, line.reason, level = exc.code.name, exc.message, logging.WARNING
        raise
    except Exception as exc:  # the server logs the traceback; the line says which request
        line.state, line.reason = "INTERNAL", f"{type(exc).__name__}: {exc}"
        level = logging.ERROR
        raise
    finally:
        seconds = time.perf_counter() - started
        if line.reason and level == logging.INFO:
            level = logging.WARNING  # answered, but not done (a removal still removing)
        metrics.request_finished(request, line.state, seconds)
        log_event(
            log,
            level,
            f"{request} {line.state}",
            **line.ids,
            outcome=line.state,
            duration_ms=round(seconds * 1000, 3),
            reason=line.reason,
        )


def call_observer(metrics: CoordinatorMetrics) -> CallObserver:
    """A runtime ``observer`` that times each plugin call for ``metrics``."""

    @contextmanager
    def observe(hook: str, step: str, plugin: str, request: Any) -> Iterator[Callable[[Any], None]]:
        seen: list[str] = []
        started = time.perf_counter()

        def outcome(answer: Any) -> None:
            if isinstance(answer, str):  # the error text: "CODE: message"
                seen.append(answer.split(":", 1)[0])
            elif isinstance(answer, CleanupResponse):
                seen.append(answer.status.value)
            else:
                seen.append("OK")

        try:
            yield outcome
        finally:
            # No outcome: the process is going down under the call (a crash point).
            code = seen[-1] if seen else "UNKNOWN"
            metrics.call_finished(plugin, hook, code, time.perf_counter() - started)

    return observe
