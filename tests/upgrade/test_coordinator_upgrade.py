"""An upgrade of the coordinator program: the previous release's coordinator journal, with
a claim prepared and a sandbox connecting, opened by this build's.

v0.1.0's ``networkplugin-coordinator`` (built from its tag, ``harness.upgrade``) runs
over v0.1.0's networkplugin-links on the release's fake kernel: it applies one
attachment (pod-0), then is SIGKILLed inside the apply of a second (pod-1), at a
``Coordinator/ConnectNetwork`` point of its own the rig's seed picks: the claim is
prepared, the connect requested or in flight. This build's coordinator program starts
on the same state directory (the services keep running, as a rolling update of one
container leaves the others): before it is ready it must finish the interrupted apply
or undo it, report the other as applied, and then remove both; every call of the old
journal is closed, no claim held, and the kernel is as before the pods were attached.
"""

from __future__ import annotations

import random
import shutil
import signal
import sqlite3
import tempfile
from pathlib import Path

import pytest

from harness.invariants import violations, without_namespace
from harness.pytest_plugin import RigStats
from harness.scenarios import TOPOLOGY_DIR
from harness.upgrade import (
    LINKS,
    Release,
    ReleaseCoordinatorProcess,
    ReleaseKernelLab,
    ReleaseUnavailable,
    previous_release,
)
from labs import CoordinatorProcess, Node, start_state_seed
from plugins.coordinator import CoordinatorCallError, CoordinatorJournal

pytestmark = pytest.mark.timeout(300)

TOPOLOGY = "macvlan"
DONE, CONNECTING = 0, 1


@pytest.fixture(scope="module")
def release() -> Release:
    try:
        return previous_release()
    except ReleaseUnavailable as exc:
        pytest.skip(f"coordinator upgrade test: {exc}")


def connect_points(trace: Path, attachment: str) -> list[str]:
    """The old coordinator's points of ``attachment``'s connect, as it names them."""
    return [
        p
        for p in trace.read_text().splitlines()
        if p.startswith("Coordinator/ConnectNetwork/") and f"{attachment}:" in p
    ]


def left_behind(state: Path) -> dict[str, dict[str, str]]:
    """The units, applications and calls of the coordinator journal in ``state``, read
    from a copy (its ``-wal`` with it), as ``{table: {key: state}}``."""
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("journal.db", "journal.db-wal"):
            if (state / name).exists():
                shutil.copyfile(state / name, Path(tmp) / name)
        conn = sqlite3.connect(Path(tmp) / "journal.db")
        try:
            return {
                table: dict(conn.execute(f"SELECT {key}, state FROM {table}").fetchall())
                for table, key in (
                    ("units", "unit"),
                    ("applications", "attachment"),
                    ("calls", "operation_id"),
                )
            }
        finally:
            conn.close()


def test_this_build_finishes_or_reports_every_unit_of_a_previous_coordinator_journal(
    release: Release, tmp_path: Path, rig_stats: RigStats
) -> None:
    lab = ReleaseKernelLab(release)
    try:
        with Node(
            lab, tmp_path / "node", services=LINKS, processes=True, coordinator=False
        ) as node:
            pods = {n: node.sandbox(f"pod-{n}") for n in (DONE, CONNECTING)}
            baseline = node.snapshot()
            inventory, policies = TOPOLOGY_DIR / "inventory.yaml", TOPOLOGY_DIR / "policies.yaml"
            root = tmp_path / "networkplugin-coordinator"
            old = ReleaseCoordinatorProcess(
                release,
                root,
                node.processes,
                topologies=[release.src / "topologies" / f"{TOPOLOGY}.yaml"],
                inventory=inventory,
                policies=policies,
            )
            trace = tmp_path / "trace"
            old.launch(trace=trace)
            try:
                with old.coordinator_client() as client:
                    name = "sdk-macvlan"
                    applied = client.apply(f"att-{DONE}", f"claim-{DONE}", name, pods[DONE])
                    assert applied.state == "applied", applied
                points = connect_points(trace, f"att-{DONE}")
                assert points, f"the old coordinator traced no connect point: {trace.read_text()}"
                seed = start_state_seed()
                point = (
                    random.Random(seed)
                    .choice(points)
                    .replace(f"att-{DONE}", f"att-{CONNECTING}")
                    .replace(f"claim-{DONE}", f"claim-{CONNECTING}")
                )
                rig_stats.fact("upgrade_coordinator_crash_point", point)
                old.kill()
                old.launch(armed=point)
                with old.coordinator_client() as client, pytest.raises(CoordinatorCallError):
                    client.apply(f"att-{CONNECTING}", f"claim-{CONNECTING}", name, pods[CONNECTING])
                assert old.wait_exit() == -signal.SIGKILL, f"not killed at {point} (seed {seed})"
            finally:
                old.kill()

            left = left_behind(root / "state")
            # What an upgrade meets: one attachment applied, the other's claim prepared and
            # its sandbox connecting (the apply unfinished).
            assert left["applications"] == {
                f"att-{DONE}": "applied",
                f"att-{CONNECTING}": "applying",
            }
            assert left["units"] == {
                f"claim-{DONE}": "prepared",
                f"att-{DONE}": "ready",
                f"claim-{CONNECTING}": "prepared",
                f"att-{CONNECTING}": "connecting",
            }, left
            new = CoordinatorProcess(
                root,
                node.processes,
                topologies=[TOPOLOGY_DIR / f"{TOPOLOGY}.yaml"],
                inventory=inventory,
                policies=policies,
            )
            new.token = old.token  # the same secret file, as the pod mounts it
            (root / "token").write_text(old.token)
            new.start()  # finishes or undoes the interrupted apply before it is ready
            try:
                with new.coordinator_client() as client:
                    status = client.status()
                    states = {a.attachment: a.state for a in status.applications}
                    assert states.get(f"att-{DONE}") == "applied", status
                    assert states.get(f"att-{CONNECTING}") in ("applied", "removed"), status
                    removed = {n: client.remove(f"att-{n}").state for n in (DONE, CONNECTING)}
                assert removed == dict.fromkeys((DONE, CONNECTING), "removed"), removed
                assert new.stop() == 0
            finally:
                new.kill()
            journal = CoordinatorJournal(new.state_dir)  # the program is stopped
            clients = node.clients()
            try:
                expected = without_namespace(baseline, f"pod-{CONNECTING}")
                problems = violations(expected, node.kernel, journal, clients, f"pod-{CONNECTING}")
            finally:
                journal.close()
                for c in clients.values():
                    c.close()
    finally:
        lab.close()
    rig_stats.add("upgrade_records", len(left["calls"]))
    rig_stats.add("invariant_violations", len(problems))
    assert problems == [], f"crash point {point} (seed {seed})"
