"""An upgrade of the coordinator program: the previous release's coordinator journal, with
a claim prepared and a sandbox connecting, opened by this build's.

v0.1.0's ``networkplugin-coordinator`` (built from its tag, ``harness.upgrade``) runs
over v0.1.0's networkplugin-links on the release's fake kernel: it applies one
attachment (pod-0), then is SIGKILLed inside the apply of a second (pod-1), at each
``Coordinator/ConnectNetwork`` point of its own in turn: the claim is prepared, the
connect about to be requested, in flight, answered or finished but not yet applied. This build's coordinator program starts
on the same state directory (the services keep running, as a rolling update of one
container leaves the others): before it is ready it must finish the interrupted apply
or undo it, report the other as applied, and then remove both; every call of the old
journal is closed, no claim held, and the kernel is as before the pods were attached.
"""

from __future__ import annotations

import signal
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
    journal_copy,
    previous_release,
)
from labs import CoordinatorProcess, Node
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


CONNECT_POINTS = (
    "set_unit:connecting.before-commit",
    "set_unit:connecting.after-commit",
    "secondary:ConnectNetwork:g1/record_call.before-commit",
    "secondary:ConnectNetwork:g1/record_call.after-commit",
    "secondary:ConnectNetwork:g1/finish_call:succeeded.before-commit",
    "secondary:ConnectNetwork:g1/finish_call:succeeded.after-commit",
    "set_unit:ready.before-commit",
    "set_unit:ready.after-commit",
)
"""Every point v0.1.0's coordinator passes in an apply's connect of the macvlan topology
(after its prepare), as it names them after ``Coordinator/ConnectNetwork/att-<n>``
(``/`` before a unit's, ``:`` before a call's). The release is frozen: so is this list,
which the reference run checks."""


def point_of(attachment: str, suffix: str) -> str:
    sep = "/" if suffix.startswith("set_unit") else ":"
    return f"Coordinator/ConnectNetwork/{attachment}{sep}{suffix}"


def left_behind(state: Path) -> dict[str, dict[str, str]]:
    """The units, applications and calls of the coordinator journal in ``state``, read
    from a copy (its ``-wal`` with it), as ``{table: {key: state}}``."""
    with journal_copy(state) as conn:
        return {
            table: dict(conn.execute(f"SELECT {key}, state FROM {table}").fetchall())
            for table, key in (
                ("units", "unit"),
                ("applications", "attachment"),
                ("calls", "operation_id"),
            )
        }


@pytest.mark.parametrize("suffix", CONNECT_POINTS)
def test_this_build_finishes_or_reports_every_unit_of_a_previous_coordinator_journal(
    release: Release, suffix: str, tmp_path: Path, rig_stats: RigStats
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
                traced = trace.read_text().splitlines()
                prefix = f"Coordinator/ConnectNetwork/att-{DONE}"
                reference = [p for p in traced if p.startswith((f"{prefix}/", f"{prefix}:"))]
                assert reference == [point_of(f"att-{DONE}", p) for p in CONNECT_POINTS]
                point = point_of(f"att-{CONNECTING}", suffix)
                old.kill()
                old.launch(armed=point)
                with old.coordinator_client() as client, pytest.raises(CoordinatorCallError):
                    client.apply(f"att-{CONNECTING}", f"claim-{CONNECTING}", name, pods[CONNECTING])
                assert old.wait_exit() == -signal.SIGKILL, f"not killed at {point}"
            finally:
                old.kill()

            left = left_behind(root / "state")
            # What an upgrade meets: one attachment applied, the other's claim prepared and
            # its sandbox connecting (the apply unfinished).
            assert left["applications"] == {
                f"att-{DONE}": "applied",
                f"att-{CONNECTING}": "applying",
            }
            assert {u: left["units"].get(u) for u in (f"claim-{DONE}", f"att-{DONE}")} == {
                f"claim-{DONE}": "prepared",
                f"att-{DONE}": "ready",
            }, left
            assert left["units"][f"claim-{CONNECTING}"] == "prepared", left
            assert left["units"].get(f"att-{CONNECTING}") in (None, "connecting", "ready"), left
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
    assert problems == [], f"crash point {point}"
