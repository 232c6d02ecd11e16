"""Acceptance (issue 14, item 1): after a SIGKILL mid-connect, ``reconcile --dry-run``
lists exactly the leaked objects, ``--apply`` removes them, a second dry-run is empty.

Real service processes on the fake kernel server; the links service is killed inside
ConnectNetwork after the macvlan child exists: once while it is still under its
temporary name (the service stays down: apply runs the SDK's runner in this process),
once when it already carries its marker (the service restarts and recovers by itself:
apply goes over its socket, and a digest taken before the restart is refused).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.invariants import leaks
from plugins.ctl import Exit

from .kit import (
    LINKS,
    MARKED,
    UNMARKED,
    crashed_connect,
    ctl,
    files_of,
    process_node,
    write_node_config,
)


def _leaked_links(node: Any) -> list[tuple[str, str]]:
    """The links the crash left in the pod, as the fake kernel sees them (name, kind)."""
    pod = next(ns for ns in node.kernel.namespaces() if ns.path.endswith("/pod-a"))
    return sorted(
        (link.name, link.kind) for link in node.kernel.list_links(pod) if link.name != "eth0"
    )


def _without_shm(state: Path) -> dict[str, bytes]:
    # A running service's -shm is its wal-index: a reader's read marks go there.
    return {k: v for k, v in files_of(state).items() if not k.endswith("-shm")}


def _dry_run_lists_the_leak(node: Any, config: Path, capsys: Any, journal: str) -> str:
    """The dry-run lists exactly the one leaked link; returns its digest."""
    leaked = _leaked_links(node)
    assert len(leaked) == 1, leaked  # the macvlan child, and nothing else
    state = node.processes.processes[LINKS].root / "state"
    before = _without_shm(state)
    dry = ctl(config, ["reconcile", "--dry-run", "-o", "json"], capsys)
    assert dry.code == Exit.FINDINGS, dry
    assert _without_shm(state) == before
    found = dry.json()["findings"]
    assert [(f["category"], f["object"].split(" ")[:2]) for f in found] == [
        ("leak", [leaked[0][1], leaked[0][0]])
    ], found
    assert (found[0]["service"], found[0]["scope"]) == (LINKS, "att-1")
    assert found[0]["action"] == "RemoveNetwork att-1"
    assert found[0]["state"] == journal
    table = ctl(config, ["reconcile", "--dry-run"], capsys)
    assert table.code == Exit.FINDINGS
    assert table.out.splitlines()[1].startswith("leak ")
    assert table.out.splitlines()[-1] == f"digest: {dry.json()['digest']}"
    return str(dry.json()["digest"])


def _apply_removes_it(node: Any, config: Path, capsys: Any, receipt: str, via: str) -> None:
    """Apply cleans the leak as a journaled RemoveNetwork; a second dry-run is empty."""
    dry = ctl(config, ["reconcile", "--dry-run", "-o", "json"], capsys).json()
    leaked_op = dry["findings"][0]["operation"]
    applied = ctl(config, ["reconcile", "--apply", "--digest", receipt, "-o", "json"], capsys)
    assert applied.code == Exit.OK, applied
    cleanups = applied.json()["cleanups"]
    assert [(c["target"], c["status"], c["via"]) for c in cleanups] == [
        (leaked_op, "CLEANED", via)
    ], cleanups
    assert applied.json()["remaining"] == []
    assert _leaked_links(node) == []
    assert leaks(node.kernel) == []
    again = ctl(config, ["reconcile", "--dry-run", "-o", "json"], capsys)
    assert again.code == Exit.OK, again
    assert again.json()["findings"] == []
    # Journaled like any operation: ops shows the cleanup and its target, Cleaned.
    rows = ctl(config, ["ops", "-o", "json"], capsys).json()["operations"]
    ops = {o["operation"]: o for o in rows}
    cleanup = ops[cleanups[0]["operation"]]
    assert (cleanup["hook"], cleanup["state"], cleanup["cleanup"]) == (
        "RemoveNetwork",
        "Cleaned",
        "CLEANED",
    )
    assert ops[leaked_op]["state"] == "Cleaned"


@pytest.mark.timeout(300)
def test_unmarked_leak_cleaned_by_the_runner_while_the_service_is_down(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with process_node(tmp_path / "node") as node:
        crashed_connect(node, UNMARKED)
        config = write_node_config(node, tmp_path / "node.yaml")
        receipt = _dry_run_lists_the_leak(node, config, capsys, "Running/Applying")
        _apply_removes_it(node, config, capsys, receipt, "runner")
        # The service starts (ready: recovered) on the journal the CLI's runner wrote,
        # and the node still agrees with it.
        node.processes.processes[LINKS].start()
        live = ctl(config, ["reconcile", "--dry-run", "-o", "json"], capsys)
        assert (live.code, live.json()["findings"]) == (Exit.OK, [])


@pytest.mark.timeout(300)
def test_marked_leak_after_a_restart_cleaned_over_the_socket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with process_node(tmp_path / "node") as node:
        crashed_connect(node, MARKED)
        links = node.processes.processes[LINKS]
        state = links.root / "state"
        config = write_node_config(node, tmp_path / "node.yaml")
        stale = _dry_run_lists_the_leak(node, config, capsys, "Running/Applying")

        before = files_of(state)
        missing = ctl(config, ["reconcile", "--apply"], capsys)
        assert missing.code == Exit.REFUSED
        assert missing.err.count("\n") == 1
        assert "--digest" in missing.err
        assert files_of(state) == before

        # The service comes back and recovers by itself: its connect is Failed now, not
        # Running, so the digest taken before no longer describes the node.
        links.start()
        before = _without_shm(state)
        refused = ctl(config, ["reconcile", "--apply", "--digest", stale], capsys)
        assert refused.code == Exit.REFUSED, refused
        assert refused.err.count("\n") == 1
        assert "changed since that dry-run" in refused.err
        assert _without_shm(state) == before
        assert len(_leaked_links(node)) == 1

        receipt = _dry_run_lists_the_leak(node, config, capsys, "Failed/Applying")
        _apply_removes_it(node, config, capsys, receipt, "socket")

        # Every service up: every socket answers as its plugin, ready; journals intact.
        doctor = ctl(config, ["doctor", "-o", "json"], capsys)
        assert doctor.code == Exit.OK, doctor
        checks = doctor.json()["checks"]
        assert {c["status"] for c in checks} == {"ok"}, checks
        assert sum(c["check"] == "socket" for c in checks) == 5
