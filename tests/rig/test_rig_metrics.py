"""The rig's metrics scrape (harness.scraped_metrics): every start of a service process
publishes a textfile of its own, and the scrape adds every hook's histogram up across
them, so a SIGKILLed process's counts are not overwritten by its successor's."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.scenarios import Lifecycle
from harness.scraped_metrics import HOOKS, HookMetrics, scrape_textfiles
from labs import METRICS_DIR_ENV, FakeServerLab, Node
from plugins.sdk.telemetry import PrometheusMetrics

DEADLINE_S = 60.0


def textfile(path: Path, hooks: dict[str, int]) -> None:
    metrics = PrometheusMetrics()
    for hook, n in hooks.items():
        for _ in range(n):
            metrics.hook_finished("macvlan", hook, "OK", 0.002)
    path.write_bytes(metrics.render())


def test_the_scrape_adds_every_textfile_up_by_hook(tmp_path: Path) -> None:
    textfile(tmp_path / "links-1.prom", {"NodePrepare": 2, "ConnectNetwork": 1})
    textfile(tmp_path / "links-2.prom", {"ConnectNetwork": 3, "RemoveNetwork": 1})
    summary = scrape_textfiles(tmp_path).summary()
    assert summary["textfiles"] == 2
    assert summary["hook_observations"] == {
        "NodePrepare": 2,
        "ConnectNetwork": 4,
        "RemoveNetwork": 1,
        "NodeUnprepare": 0,  # named though never observed: a reader sees the zero
    }
    assert summary["hook_seconds"]["ConnectNetwork"] == pytest.approx(0.008)


def test_a_file_that_is_not_the_text_format_is_named(tmp_path: Path) -> None:
    (tmp_path / "broken.prom").write_text('networkplugin_hook_duration_seconds_count{hook="x" 1\n')
    with pytest.raises(ValueError, match=r"broken\.prom: not Prometheus text format"):
        scrape_textfiles(tmp_path)


def scraped_when(directory: Path) -> HookMetrics:
    """The scrape once every hook has been observed at least once, within the deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        scraped = scrape_textfiles(directory)
        if all(scraped.observations[hook] for hook in HOOKS):
            return scraped
        if time.monotonic() > deadline:
            raise AssertionError(f"not every hook in {directory} within {DEADLINE_S}s: {scraped}")
        time.sleep(0.1)  # a poll interval: the condition decides


@pytest.mark.timeout(300)
def test_a_killed_service_keeps_its_counts_beside_its_successors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    monkeypatch.setenv(METRICS_DIR_ENV, str(metrics))
    with Node(FakeServerLab(), tmp_path / "node", processes=True) as node:
        Lifecycle("macvlan", node).run(0)
        first = scraped_when(metrics)  # the periodic write, before the kill
        node.processes.crash(service="networkplugin-links")  # SIGKILL, a start of its own
        node.reconnect()
        Lifecycle("macvlan", node, claim="claim-2", attachment="att-2").run(0)
        for process in node.processes.processes.values():
            assert process.stop() == 0  # a clean stop writes the final counts
        after = scrape_textfiles(metrics)
    links = sorted(metrics.glob("networkplugin-links-*.prom"))
    assert len(links) == 2, links
    for hook in HOOKS:
        assert after.observations[hook] >= first.observations[hook] + 1, (hook, first, after)
