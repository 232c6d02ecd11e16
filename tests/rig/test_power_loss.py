"""Pulling the plug (issue 11 item 6): services and journals in a guest, QEMU killed.

The vm test boots a guest whose services and journals live on a virtio disk opened with
``cache=none``, SIGKILLs QEMU at seeded random moments of a workload of connects and
removes, boots again on the same disk, and checks that every acknowledged operation
survived, that cleanup leaves nothing behind, and that every journal opened (or says
why not). ``DRANP_POWER_LOSS_PULLS`` sets the number of pulls (default 3: the vm tier's
sample; 30 is the full run, tens of minutes); ``RIG_SEED`` the seed.
``DRANP_POWER_LOSS_NOFSYNC=1`` runs the manual check that the rig can fail at the
guest level (a guest whose flushes do nothing must lose acknowledged operations).

The check itself runs everywhere: the guest's driver in this process on the kernel
model, with an acknowledged record deleted from a journal before recovery, must be
reported lost (a check that cannot fail proves nothing).
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from harness.labs import parse_lab_url
from harness.power_loss import (
    CACHE_ENV,
    NOFSYNC_ENV,
    RECOVER_DEADLINE_S,
    STEP_DEADLINE_S,
    Driver,
    lost_acks,
    pulls_setting,
    run,
)
from harness.pytest_plugin import RigStats, require_lab
from labs import FakeModelLab
from labs.vm import asked_kernel

KERNEL = asked_kernel()
PULLS = pulls_setting()
# A backstop: run() has a deadline for every step of every boot.
TIMEOUT_S = (PULLS + 1) * (RECOVER_DEADLINE_S + 3 * STEP_DEADLINE_S)
DISKS = Path.home() / ".cache" / "dranp-vm-lab"  # the host's disk, never a tmpfs


@pytest.mark.vm
@pytest.mark.timeout(TIMEOUT_S)
def test_pulling_the_plug_loses_no_acknowledged_operation(
    request: pytest.FixtureRequest, rig_stats: RigStats
) -> None:
    require_lab(request.config, "vm", parse_lab_url(f"vm://?kernel={KERNEL}").missing())
    disk = DISKS / f"power-loss-{os.getpid()}.img"
    try:
        outcome = run(
            PULLS,
            disk,
            kernel=KERNEL,
            cache=os.environ.get(CACHE_ENV, "none"),
            log=lambda line: print(line, flush=True),
        )
    finally:
        disk.unlink(missing_ok=True)
    rig_stats.add("power_loss_runs", len(outcome.pulls))
    rig_stats.add("acknowledged_lost", len(outcome.lost))
    rig_stats.add("power_loss_leaks", len(outcome.leaks))
    rig_stats.add("journals_refused", len(outcome.refused))
    rig_stats.add("power_loss_acks_checked", outcome.acked_operations)
    rig_stats.add("power_loss_emulator_aborts", len(outcome.emulator_aborts))
    rig_stats.fact("power_loss_seed", outcome.seed)
    rig_stats.fact("power_loss_seconds", outcome.wall_s)
    print(
        json.dumps(
            {
                "pulls": len(outcome.pulls),
                "acked_operations": outcome.acked_operations,
                "checks": outcome.acks_checked,
                "lost": len(outcome.lost),
                "leaks": len(outcome.leaks),
                "refused": outcome.refused,
                "wall_s": outcome.wall_s,
                "boots": outcome.boots,
            },
            indent=1,
        )
    )
    assert len(outcome.pulls) == PULLS
    assert outcome.acked_operations > 0, "no acknowledged operation was ever checked"
    assert not outcome.lost, "acknowledged operations lost:\n" + "\n".join(outcome.lost)
    assert not outcome.leaks, "left after cleanup:\n" + "\n".join(outcome.leaks)
    for journal, reason in outcome.refused.items():
        assert reason, f"{journal} refused to open without a reason"


@pytest.mark.vm
@pytest.mark.timeout(2 * (RECOVER_DEADLINE_S + 3 * STEP_DEADLINE_S))
@pytest.mark.skipif(
    os.environ.get(NOFSYNC_ENV) != "1", reason=f"the manual check runs with {NOFSYNC_ENV}=1"
)
def test_a_guest_whose_flushes_do_nothing_loses_acknowledged_operations(
    request: pytest.FixtureRequest,
) -> None:
    """The rig can fail: the same run, one pull, with the guest's fsync/fdatasync made
    no-ops and its page cache never written back, so the kill takes what the journals
    acknowledged with it; the check must report those operations lost."""
    require_lab(request.config, "vm", parse_lab_url(f"vm://?kernel={KERNEL}").missing())
    disk = DISKS / f"power-loss-nofsync-{os.getpid()}.img"
    try:
        outcome = run(1, disk, kernel=KERNEL, nofsync=True, log=lambda s: print(s, flush=True))
    finally:
        disk.unlink(missing_ok=True)
    print("\n".join(outcome.lost))
    assert outcome.pulls[0].acks > 0, "the pull came before any acknowledgement"
    assert outcome.lost, "a guest that never flushed lost nothing: the check cannot fail"


def _events() -> tuple[list[dict[str, Any]], Any]:
    events: list[dict[str, Any]] = []

    def emit(event: dict[str, Any]) -> None:
        events.append(json.loads(json.dumps(event)))  # what crosses the serial port

    return events, emit


def test_a_deleted_acknowledged_record_is_reported_lost(tmp_path: Path) -> None:
    """The driver on the kernel model: a workload, a crash, then an acknowledged record
    deleted from the plugin's journal and another from the coordinator's (what a write
    the disk never kept would do): recovery's report no longer holds them, and the
    check names both; untouched, it finds nothing."""
    events, emit = _events()
    driver = Driver(tmp_path, FakeModelLab, emit)
    driver.recover()
    driver.workload(seed=1, cycles=2, tag="t")
    acks = [e for e in events if e["ev"] == "ack"]
    assert {a["hook"] for a in acks} == {
        "NodePrepare",
        "ConnectNetwork",
        "RemoveNetwork",
        "NodeUnprepare",
    }
    assert driver.node is not None
    driver.node.services.crash()  # no clean shutdown
    driver.close()

    intact = Driver(tmp_path, FakeModelLab, emit)
    assert lost_acks(acks, intact.recover()) == []
    intact.close()

    connect = next(a["op"] for a in acks if a["hook"] == "ConnectNetwork")
    remove = next(a["op"] for a in acks if a["hook"] == "RemoveNetwork")
    _delete(tmp_path / "gen-0" / "networkplugin-links", "operations", connect)
    _delete(tmp_path / "gen-0" / "coordinator", "calls", remove)
    damaged = Driver(tmp_path, FakeModelLab, emit)
    lost = lost_acks(acks, damaged.recover())
    damaged.close()
    assert len(lost) == 2, lost
    assert f"ConnectNetwork {connect}" in lost[0]
    assert "not in the macvlan plugin's journal" in lost[0]
    assert f"RemoveNetwork {remove}" in lost[1]
    assert "not in the coordinator's journal" in lost[1]


def _delete(state_dir: Path, table: str, operation_id: str) -> None:
    with sqlite3.connect(state_dir / "journal.db") as db:
        gone = db.execute(f"DELETE FROM {table} WHERE operation_id = ?", (operation_id,))
        assert gone.rowcount == 1


def test_the_check_holds_each_acknowledgement_to_its_state() -> None:
    """A create acknowledged as succeeded may be found later in its lifecycle (cleaned),
    not earlier (running); a cleanup acknowledged CLEANED must be cleaned in both
    journals; failures promise nothing."""

    def ack(op: str, hook: str, result: str) -> dict[str, Any]:
        return {"op": op, "hook": hook, "plugin": "macvlan", "result": result}

    acks = [
        ack("p", "NodePrepare", "succeeded"),
        ack("c", "ConnectNetwork", "succeeded"),
        ack("r", "RemoveNetwork", "CLEANED"),
        ack("x", "ConnectNetwork", "error"),
        ack("u", "NodeUnprepare", "CLEANED"),
    ]
    for a in acks:
        a.update(phase="connect", cycle=0)
    recovered = {
        "operations": {
            "p": {"state": "Cleaned", "cleanup": "CLEANED"},
            "c": {"state": "Running", "cleanup": None},
            "r": {"state": "Cleaned", "cleanup": "CLEANED"},
            "u": {"state": "CleanupPending", "cleanup": "PENDING"},
        },
        "calls": {"p": "succeeded", "c": "succeeded", "r": "pending", "u": "cleaned"},
    }
    lost = lost_acks(acks, recovered)
    assert lost == [
        "ConnectNetwork c (acked succeeded in connect of cycle 0): the plugin's journal says "
        "Running",
        "RemoveNetwork r (acked CLEANED in connect of cycle 0): the coordinator's journal says "
        "pending",
        "NodeUnprepare u (acked CLEANED in connect of cycle 0): the plugin's journal says "
        "CleanupPending/PENDING",
    ]
