"""Benchmark: what metrics and INFO logs add to a hook, against the same runner without.

The toy plugin's runner in process (an in-memory resource, the real journal on disk),
ConnectNetwork + RemoveNetwork pairs, in rounds that alternate four peers measured in
the same run: no metrics and WARNING logs (the default a service without ``metrics``
runs at, but for its INFO lines), Prometheus metrics on, metrics plus INFO JSON lines
(to /dev/null) through the service's own handler (``BackgroundHandler``: formatted and
written on its thread, as ``configure_logging`` sets it up), and the same lines
written by a plain ``StreamHandler`` on the hook's thread. Prints the median pair time
of each and its ratio to the first. Not a test: nothing here asserts a timing.

    uv run python scripts/bench_telemetry.py [--pairs 50] [--rounds 7]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_runner import memory_toy

from plugins.sdk.runner import Runner
from plugins.sdk.telemetry import (
    NO_METRICS,
    BackgroundHandler,
    JsonFormatter,
    Metrics,
    PrometheusMetrics,
)
from tests.runner import node as n
from tests.runner.toy import toy_effects, toy_registry


def pair_seconds(directory: Path, metrics: Metrics, pairs: int) -> float:
    """Median seconds of one connect + remove pair on a fresh journal."""
    runner = Runner.open(
        directory,
        toy_registry(),
        toy_effects(memory_toy()),
        artifact_digest="bench",
        boot_id="b",
        metrics=metrics,
    )
    runner.recover()
    endpoint = runner.endpoint("toy.sock")
    samples = []
    try:
        for i in range(pairs):
            start = time.perf_counter()
            endpoint.connect_network(n.connect(op=f"c{i}", scope=f"a{i}", name=f"d{i}"))
            endpoint.remove_network(n.remove(op=f"r{i}", scope=f"a{i}"))
            samples.append(time.perf_counter() - start)
    finally:
        runner.close()
    return statistics.median(samples)


def with_logs(level: int, background: bool = True) -> Callable[[], None]:
    """Route the runner's lines at ``level`` to /dev/null as JSON, through the service's
    handler (``background``) or written on the logging thread; returns the undo."""
    sink = open(os.devnull, "w")  # noqa: SIM115 - closed by the returned undo
    stream = logging.StreamHandler(sink)
    stream.setFormatter(JsonFormatter())
    handler: logging.Handler = BackgroundHandler(stream) if background else stream
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(level)

    def undo() -> None:
        root.removeHandler(handler)
        handler.close()  # the background one writes what it holds first
        root.setLevel(previous)
        sink.close()

    return undo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    peers: dict[str, tuple[Callable[[], Metrics], int, bool]] = {
        "off (no metrics, WARNING)": (lambda: NO_METRICS, logging.WARNING, True),
        "metrics on": (PrometheusMetrics, logging.WARNING, True),
        "metrics + INFO JSON lines": (PrometheusMetrics, logging.INFO, True),
        "  the same, written inline": (PrometheusMetrics, logging.INFO, False),
    }
    results: dict[str, list[float]] = {name: [] for name in peers}
    with tempfile.TemporaryDirectory(prefix="bench-telemetry-", dir=Path.cwd()) as tmp:
        for round_ in range(args.rounds):
            for peer, (name, (make, level, background)) in enumerate(
                peers.items()
            ):  # interleaved: drift hits all alike
                undo = with_logs(level, background)
                try:
                    seconds = pair_seconds(Path(tmp) / f"{round_}-{peer}", make(), args.pairs)
                finally:
                    undo()
                results[name].append(seconds)
    base = statistics.median(results["off (no metrics, WARNING)"])
    print(f"connect+remove pair, median of {args.rounds} rounds x {args.pairs} pairs")
    for name, samples in results.items():
        median = statistics.median(samples)
        print(f"  {name:28s} {median * 1000:8.2f} ms   x{median / base:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
