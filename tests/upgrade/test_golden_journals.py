"""Golden journals: every released journal, with records in flight, opened and cleaned by
this build (docs/file-formats.md, "Versions").

``tests/data/journals/<release>/`` holds a service's journal as that release left it
when SIGKILLed mid-connect (tests/upgrade/make_golden_journals.py wrote it, driving the
release built from its tag) and ``records.json``, its operations as written. This tree's
real service starts on a copy (the files in the repository are never opened), on a
fresh fake kernel: it must recover, report every record (InspectOperation), and clean
every one but the quarantined attachment's, which it keeps reporting; no record is lost.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.pytest_plugin import RigStats
from harness.upgrade import QUARANTINED_SCOPES, JournalRecord, journal_records
from labs import PROJECT_SERVICES, FakeServerLab, ServiceProcess
from plugins.sdk import CleanupRequest, CleanupStatus, Hook, OperationEnvelope
from plugins.sdk.host import PluginCallError

DATA = Path(__file__).resolve().parent.parent / "data" / "journals"
RELEASES = sorted(p.name for p in DATA.iterdir() if (p / "records.json").exists())
CLEANUP_OF = {
    Hook.CONNECT_NETWORK.value: Hook.REMOVE_NETWORK,
    Hook.NODE_PREPARE.value: Hook.NODE_UNPREPARE,
}


def golden(release: str) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads((DATA / release / "records.json").read_text())
    return manifest


@pytest.fixture
def lab() -> Iterator[FakeServerLab]:
    lab = FakeServerLab()
    try:
        yield lab
    finally:
        lab.close()


def cleanup_request(record: JournalRecord) -> CleanupRequest:
    """The coordinator's cleanup of ``record``'s scope (its id is the coordinator's
    ``<scope>:<step>:<hook>:g<generation>``)."""
    hook = CLEANUP_OF[record.hook]
    return CleanupRequest(
        OperationEnvelope(
            operation_id=f"{record.scope}:{record.step}:{hook.value}:g{record.generation}",
            hook=hook,
            scope=record.scope,
            step=record.step,
            generation=record.generation,
            coordinator_epoch=record.epoch,
        )
    )


def test_there_is_a_golden_journal_of_the_first_release() -> None:
    assert "v0.1.0" in RELEASES


@pytest.mark.parametrize("release", RELEASES)
def test_this_build_opens_and_cleans_a_golden_journal(
    release: str, tmp_path: Path, lab: FakeServerLab, rig_stats: RigStats
) -> None:
    manifest = golden(release)
    spec = next(s for s in PROJECT_SERVICES if s.name == manifest["service"])
    written = [JournalRecord(**r) for r in manifest["records"]]
    root = tmp_path / spec.name
    shutil.copytree(DATA / release / spec.name, root / "state")
    (root / "state").chmod(0o700)  # as the service made it (git keeps no directory modes)
    assert journal_records(root / "state") == written  # the data is what its manifest says
    sockets = Path(tempfile.mkdtemp(prefix="golden-", dir="/tmp"))  # short socket paths
    service = ServiceProcess(spec.name, spec.command, root, sockets, lab.kernel_url, spec.sockets)
    socket = next(s for s in spec.sockets if s.startswith("macvlan"))
    try:
        service.start()  # recovers the interrupted connect before it is ready
        with service.client(socket) as client:
            inspected = {r.operation_id: client.inspect(r.operation_id, r.scope) for r in written}
            open_scopes = {
                r.scope: r for r in written if r.hook in CLEANUP_OF and r.cleanup_status is None
            }
            # Attachments first, then the claims they were connected with.
            order = sorted(open_scopes.values(), key=lambda r: r.hook != Hook.CONNECT_NETWORK)
            receipts: dict[str, CleanupStatus | str] = {}
            for record in order:
                request = cleanup_request(record)
                call = (
                    client.remove_network
                    if request.envelope.hook is Hook.REMOVE_NETWORK
                    else client.node_unprepare
                )
                try:
                    receipts[record.scope] = call(request).status
                except PluginCallError as exc:
                    receipts[record.scope] = exc.code
        assert service.stop() == 0
    finally:
        service.kill()
        shutil.rmtree(sockets, ignore_errors=True)
    after = {r.operation_id: r for r in journal_records(root / "state")}

    lost = [op for op, answer in inspected.items() if not answer.found or op not in after]
    lost += [
        r.operation_id
        for r in after.values()
        if r.cleanup_status != "CLEANED" and r.scope not in QUARANTINED_SCOPES
    ]
    rig_stats.add("golden_journal_records", len(written))
    rig_stats.add("upgrade_lost", len(lost))
    assert lost == []
    assert receipts, "the golden journal had nothing left to clean"
    attachment, claim = QUARANTINED_SCOPES
    # The quarantined attachment is reported, and its claim held until an operator
    # clears it (the plugin refuses to unprepare under an unclean attachment).
    assert receipts == {
        **dict.fromkeys(receipts, CleanupStatus.CLEANED),
        claim: "FAILED_PRECONDITION",
    }
    connect = next(r for r in written if r.scope == attachment and r.hook == "ConnectNetwork")
    assert inspected[connect.operation_id].cleanup is CleanupStatus.QUARANTINED
    quarantined = [
        r
        for r in after.values()
        if r.scope in QUARANTINED_SCOPES and r.hook != Hook.NODE_PREPARE.value
    ]
    assert {r.state for r in quarantined} == {"Quarantined"}  # still reported, never dropped
