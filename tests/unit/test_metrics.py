"""Metrics: what the runner reports, scraped as Prometheus would, and the no-metrics path.

Over the wire: a real service process with metrics on (a localhost port, then a
textfile) is driven through all four hooks by the coordinator's client, then scraped.
In process: the runner over the toy kernel with its own registry, for the outcomes a
service process cannot be steered into cheaply (a quarantine, a refusal).
"""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from plugins.sdk import CleanupStatus, FailedPrecondition, Hook, NetworkPluginError
from plugins.sdk.runner import Runner
from plugins.sdk.telemetry import PrometheusMetrics

from ..runner import node as n
from ..runner.test_journal_loss_service import ToyDeployment
from ..runner.toy import CREATE, SETTING, ToyKernel, toy_effects, toy_registry

HOOKS = ("NodePrepare", "ConnectNetwork", "RemoveNetwork", "NodeUnprepare")
# Every id the requests carry: none may become a label value.
IDS = ("op-", "prep-1", "att-1", "pod-a", "root-1", "step-1")
DEADLINE_S = 60.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition, by (name, labels)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def assert_bounded_labels(samples: Samples) -> None:
    values = {v for _, labels in samples for _, v in labels}
    leaked = sorted(v for v in values if any(i in v for i in IDS))
    assert not leaked, f"ids became label values: {leaked}"


def wait_for(what: str, probe: Callable[[], Samples | None]) -> Samples:
    """Poll ``probe`` until it returns samples, or fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        got = probe()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {DEADLINE_S}s")
        time.sleep(0.05)  # a poll interval, not a synchronization: the probe decides


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def with_metrics(lab: ToyDeployment, metrics: dict[str, object]) -> None:
    config = yaml.safe_load(lab.service.config.read_text())
    config["metrics"] = metrics
    lab.service.config.write_text(yaml.safe_dump(config))


def drive_all_hooks(lab: ToyDeployment) -> None:
    with lab.client() as client:
        client.node_prepare(n.prepare())
        client.connect_network(n.connect())
        assert client.remove_network(n.remove()).status is CleanupStatus.CLEANED
        assert client.node_unprepare(n.unprepare()).status is CleanupStatus.CLEANED


def assert_all_hooks_measured(samples: Samples) -> None:
    for hook in HOOKS:
        labels = {"plugin": "toy", "hook": hook, "outcome": "OK"}
        assert value(samples, "networkplugin_hook_duration_seconds_count", **labels) == 1, hook
        assert value(samples, "networkplugin_hook_duration_seconds_sum", **labels) > 0, hook
    for kind in (CREATE, SETTING):
        assert value(samples, "networkplugin_effects_total", kind=kind, outcome="applied") >= 1
        assert value(samples, "networkplugin_effects_total", kind=kind, outcome="undone") >= 1
    assert value(samples, "networkplugin_journal_fsyncs_total") > 0
    assert value(samples, "networkplugin_journal_commit_duration_seconds_count", boundary="intent")
    assert_bounded_labels(samples)


def test_a_scrape_after_all_four_hooks_over_the_wire_has_their_histograms(
    lab: ToyDeployment,
) -> None:
    port = free_port()
    with_metrics(lab, {"port": port})
    lab.service.start()
    drive_all_hooks(lab)
    url = f"http://127.0.0.1:{port}/metrics"

    def scrape() -> Samples:
        with urllib.request.urlopen(url, timeout=DEADLINE_S) as response:
            return parse(response.read().decode())

    samples = scrape()
    assert_all_hooks_measured(samples)
    assert ("networkplugin_recovery_duration_seconds", frozenset()) in samples


def test_the_textfile_gets_its_last_write_at_shutdown(lab: ToyDeployment) -> None:
    textfile = lab.root / "textfile" / "toy.prom"
    textfile.parent.mkdir()
    # An hour between writes: only the write at start and the one at shutdown happen.
    with_metrics(lab, {"textfile": str(textfile), "textfileIntervalSeconds": 3600})
    lab.service.start()
    before = parse(textfile.read_text())
    assert value(before, "networkplugin_hook_duration_seconds_count", **_ok("NodePrepare")) == 0
    drive_all_hooks(lab)
    assert lab.service.stop() == 0
    assert_all_hooks_measured(parse(textfile.read_text()))
    assert [p.name for p in textfile.parent.iterdir()] == ["toy.prom"]  # no temporary left


def test_the_textfile_is_rewritten_every_interval(lab: ToyDeployment) -> None:
    textfile = lab.root / "toy.prom"
    with_metrics(lab, {"textfile": str(textfile), "textfileIntervalSeconds": 0.1})
    lab.service.start()
    drive_all_hooks(lab)

    def written() -> Samples | None:
        samples = parse(textfile.read_text())
        done = value(samples, "networkplugin_hook_duration_seconds_count", **_ok("NodeUnprepare"))
        return samples if done else None

    assert_all_hooks_measured(wait_for("textfile with NodeUnprepare", written))


def _ok(hook: str) -> dict[str, str]:
    return {"plugin": "toy", "hook": hook, "outcome": "OK"}


# -- refusals: one line, exit 2, nothing created ---------------------------------------


def _refused(lab: ToyDeployment) -> str:
    result = subprocess.run(
        [sys.executable, "-m", *lab.service.command, "--config", str(lab.service.config)],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert result.returncode == 2, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert not lab.state.exists(), "the journal was created before the refusal"
    return lines[0]


def test_a_port_in_use_is_refused(lab: ToyDeployment) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with_metrics(lab, {"port": port})
        line = _refused(lab)
    assert f"metrics http://127.0.0.1:{port}/metrics: " in line, line
    assert "EADDRINUSE" in line, line


def test_a_textfile_in_a_missing_directory_is_refused(lab: ToyDeployment) -> None:
    textfile = lab.root / "missing" / "toy.prom"
    with_metrics(lab, {"textfile": str(textfile)})
    line = _refused(lab)
    assert f"metrics {textfile}: " in line, line
    assert "ENOENT" in line, line


def test_both_a_port_and_a_textfile_are_refused(lab: ToyDeployment) -> None:
    with_metrics(lab, {"port": 9464, "textfile": "toy.prom"})
    line = _refused(lab)
    assert "$.metrics.textfile: key 'textfile' is not allowed" in line, line


# -- in process: outcomes and the journal's gauges --------------------------------------


@pytest.fixture
def metered(tmp_path: Path) -> Iterator[tuple[Runner, ToyKernel, PrometheusMetrics]]:
    metrics = PrometheusMetrics()
    kernel = ToyKernel(tmp_path / "toy.json")
    runner = Runner.open(
        tmp_path / "state",
        toy_registry(),
        toy_effects(kernel),
        artifact_digest="sha256:toy-artifact",
        boot_id="boot-1",
        metrics=metrics,
    )
    runner.recover()
    try:
        yield runner, kernel, metrics
    finally:
        runner.close()


def test_a_quarantine_and_a_refusal_are_counted_by_outcome(
    metered: tuple[Runner, ToyKernel, PrometheusMetrics],
) -> None:
    runner, kernel, metrics = metered
    endpoint = runner.endpoint("toy.sock")
    namespace = endpoint.registration.endpoint.state_namespace
    before = parse(metrics.render().decode())
    assert value(before, "networkplugin_quarantined_scopes", namespace=namespace) == 0
    assert value(before, "networkplugin_recovery_duration_seconds") > 0

    endpoint.connect_network(n.connect())
    kernel.set_setting("data0.mtu", 9000)  # an administrator changed what we set
    assert endpoint.remove_network(n.remove()).status is CleanupStatus.QUARANTINED
    with pytest.raises(FailedPrecondition, match="still attached"):  # the runner refuses
        endpoint.connect_network(n.connect(op="op-c2", scope="att-2", name="data1"))

    samples = parse(metrics.render().decode())
    assert value(samples, "networkplugin_effects_total", kind=SETTING, outcome="quarantined") == 1
    assert value(samples, "networkplugin_effects_total", kind=CREATE, outcome="undone") >= 1
    assert value(samples, "networkplugin_quarantined_scopes", namespace=namespace) == 1
    refused = {"plugin": "toy", "hook": "ConnectNetwork", "outcome": "FAILED_PRECONDITION"}
    assert value(samples, "networkplugin_hook_duration_seconds_count", **refused) == 1
    store = runner.store
    assert store is not None
    assert value(samples, "networkplugin_journal_fsyncs_total") == store.commits
    assert_bounded_labels(samples)


def test_no_metrics_loads_no_prometheus_and_no_health_module() -> None:
    """Start-up time: a service without metrics, or a client, imports neither.

    (grpcio itself imports the empty ``grpc_health`` package; its ``v1`` is ours to load.)
    """
    probe = (
        "import sys, plugins.sdk.service, plugins.sdk.host, plugins.sdk.runner; "
        "print(sorted(m for m in sys.modules if m.startswith(('prometheus', 'grpc_health.v1'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]", result


def test_a_hook_is_counted_under_its_rpc_whatever_its_envelope_claims(
    metered: tuple[Runner, ToyKernel, PrometheusMetrics],
) -> None:
    runner, _, metrics = metered
    lying = dataclasses.replace(
        n.prepare(), envelope=n.envelope(Hook.CONNECT_NETWORK, "op-lie", "prep-1")
    )
    with pytest.raises(NetworkPluginError) as info:
        runner.endpoint("toy.sock").node_prepare(lying)
    samples = parse(metrics.render().decode())
    refused = {"plugin": "toy", "hook": "NodePrepare", "outcome": info.value.code.name}
    assert value(samples, "networkplugin_hook_duration_seconds_count", **refused) == 1
    assert not [
        labels
        for name, labels in samples
        if name.startswith("networkplugin_hook") and ("hook", "ConnectNetwork") in labels
    ]
