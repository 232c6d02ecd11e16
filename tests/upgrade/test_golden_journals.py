"""Golden journals: every released journal, with records in flight, opened and cleaned by
this build (docs/file-formats.md, "Versions").

``tests/data/journals/<release>/<service>/`` holds a service's journal as that release
left it when SIGKILLed mid-connect (tests/upgrade/make_golden_journals.py wrote it,
driving the release built from its tag), with ``kernel.json``, the release's fake
kernel as it was then; ``records.json`` lists each service's operations
as written, its crash point and the scope its administrator made quarantine. This
tree's real service starts on a copy (the files in the repository are never opened) on
a fake kernel of the lab the release ran on, brought to the state the journal was left
on (``harness.upgrade.restore_kernel``), or fresh for a journal without one: it must
recover, report every record (InspectOperation), and clean every one but the
quarantined scope's, which it keeps reporting (with the claim a quarantined attachment
holds); no record is lost, and nothing of the cleaned scopes is left on the kernel.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakekernel.client import FakeKernelClient, FakeKernelProcess
from harness.pytest_plugin import RigStats
from harness.upgrade import LEAVING, JournalRecord, journal_copy, journal_records, restore_kernel
from labs import PROJECT_SERVICES, ServiceProcess
from plugins.sdk import CleanupRequest, CleanupStatus, Hook, OperationEnvelope
from plugins.sdk.host import PluginCallError
from plugins.sdk.runner import scope_evidence

from . import make_golden_journals

DATA = Path(__file__).resolve().parent.parent / "data" / "journals"
JOURNAL_FILES = ("journal.db", "journal.db-wal", "journal.db-shm", "journal.id")
RELEASES = sorted(p.name for p in DATA.iterdir() if (p / "records.json").exists())
CLEANUP_OF = {
    Hook.CONNECT_NETWORK.value: Hook.REMOVE_NETWORK,
    Hook.NODE_PREPARE.value: Hook.NODE_UNPREPARE,
}
PCI = re.compile(r'"pciAddress": ?"([0-9a-f:.]+)"')


def golden(release: str) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads((DATA / release / "records.json").read_text())
    return manifest


CASES = [(release, service) for release in RELEASES for service in golden(release)["services"]]


class Kernel:
    """A fake kernel of the lab the release ran on (its ``lab.yaml``), as it starts (not
    randomized: the release's services ran on it as written, so its VFs' settings are the
    before-images the journals recorded)."""

    def __init__(self, lab: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="golden-", dir="/tmp"))  # short paths
        self.process = FakeKernelProcess(self.dir / "kernel.sock", lab)
        self.process.start()
        self.client = FakeKernelClient(self.dir / "kernel.sock")

    @property
    def url(self) -> str:
        return f"kernel+unix://{self.dir / 'kernel.sock'}"

    def close(self) -> None:
        self.client.close()
        self.process.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def kernel(release: str) -> Iterator[Kernel]:
    kernel = Kernel(DATA / release / golden(release)["lab"])
    try:
        yield kernel
    finally:
        kernel.close()


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


def evidence_by_scope(state: Path) -> dict[str, tuple[set[str], set[str]]]:
    """What each scope left evidence on: the prefix of the markers its links carry
    (``scope_evidence``) and the PCI functions its records name (the devices it
    prepared, moved or enslaved)."""
    with journal_copy(state) as conn:
        rows = conn.execute(
            "SELECT partition, scope, request_json, plan_json FROM operations"
        ).fetchall()
        rows += conn.execute(
            "SELECT o.partition, o.scope, e.before_json, e.outputs_json FROM effects e "
            "JOIN operations o ON o.operation_id = e.operation_id"
        ).fetchall()
    found: dict[str, tuple[set[str], set[str]]] = {}
    for partition, scope, *texts in rows:
        prefixes, pcis = found.setdefault(scope, (set(), set()))
        prefixes.add(scope_evidence(partition, scope))
        pcis.update(PCI.findall(" ".join(t or "" for t in texts).replace("\\", "")))
    return found


def leaks(
    start: dict[str, Any], after: dict[str, Any], prefixes: set[str], held_pcis: set[str]
) -> list[str]:
    """What the cleanup left of the cleaned scopes: a link carrying one of their markers
    (their evidence ``prefixes``), a link still enslaved, and any difference from the lab as it started in
    the host namespace or the VF table of a VF at home (but those of ``held_pcis``, the
    VFs an unclean scope still holds)."""
    found = [
        f"{lk['name']} in {lk['ns']} carries {lk['alias']}"
        for lk in after["links"]
        if lk["alias"] and lk["alias"].startswith(tuple(prefixes))
    ]
    found += [f"{lk['name']} in {lk['ns']} is enslaved" for lk in after["links"] if lk["master"]]
    host = start["namespaces"][0]["path"]
    was = {lk["pci_address"] or lk["name"]: lk for lk in start["links"] if lk["ns"] == host}
    for lk in after["links"]:
        key = lk["pci_address"] or lk["name"]
        if lk["ns"] == host and key not in held_pcis and was.get(key) != lk:
            found.append(f"{key} in the host namespace: {was.get(key)} -> {lk}")
    home = {lk["pci_address"] for lk in after["links"] if lk["ns"] == host} - held_pcis
    tables = {(pf["pci"], vf["vf_index"]): vf for pf in start["pfs"] for vf in pf["vfs"]}
    vfs = {lk["pci_address"]: tuple(lk["vf_of"]) for lk in start["links"] if lk["vf_of"]}
    for pf in after["pfs"]:
        for vf in pf["vfs"]:
            key = (pf["pci"], vf["vf_index"])
            pci = next((p for p, of in vfs.items() if of == key), None)
            if pci in home and tables[key] != vf:
                found.append(f"VF {pci}'s table entry: {tables[key]} -> {vf}")
    return found


def test_there_is_a_golden_journal_of_every_service_of_the_first_release() -> None:
    assert set(golden("v0.1.0")["services"]) == set(LEAVING)


@pytest.mark.parametrize(("release", "service"), CASES, ids=[f"{r}-{s}" for r, s in CASES])
def test_this_build_opens_and_cleans_a_golden_journal(
    release: str, service: str, tmp_path: Path, kernel: Kernel, rig_stats: RigStats
) -> None:
    entry = golden(release)["services"][service]
    spec = next(s for s in PROJECT_SERVICES if s.name == service)
    written = [JournalRecord(**r) for r in entry["records"]]
    root = tmp_path / spec.name
    (root / "state").mkdir(parents=True, mode=0o700)  # as the service made it
    for name in JOURNAL_FILES:
        shutil.copyfile(DATA / release / service / name, root / "state" / name)
    assert journal_records(root / "state") == written  # the data is what its manifest says
    start = kernel.client.snapshot()
    if entry["kernel"] is not None:
        left = json.loads((DATA / release / service / entry["kernel"]).read_text())
        assert restore_kernel(kernel.client, left) == []
    restored = kernel.client.snapshot()
    evidence = evidence_by_scope(root / "state")
    unclean = {entry["quarantined_scope"], *entry["held_scopes"]}
    sockets = Path(tempfile.mkdtemp(prefix="golden-", dir="/tmp"))  # short socket paths
    process = ServiceProcess(spec.name, spec.command, root, sockets, kernel.url, spec.sockets)
    try:
        process.start()  # recovers the interrupted connect before it is ready
        with process.client(f"{entry['plugin']}.sock") as client:
            inspected = {r.operation_id: client.inspect(r.operation_id, r.scope) for r in written}
            open_steps = {
                (r.scope, r.step): r
                for r in written
                if r.hook in CLEANUP_OF and r.cleanup_status is None
            }
            # Attachments first, then the claims they were connected with.
            order = sorted(open_steps.values(), key=lambda r: r.hook != Hook.CONNECT_NETWORK)
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
        assert process.stop() == 0
    finally:
        process.kill()
        shutil.rmtree(sockets, ignore_errors=True)
    after = {r.operation_id: r for r in journal_records(root / "state")}
    kernel_after = kernel.client.snapshot()

    lost = [op for op, answer in inspected.items() if not answer.found or op not in after]
    lost += [
        r.operation_id
        for r in after.values()
        if r.cleanup_status != "CLEANED" and r.scope not in unclean
    ]
    rig_stats.add("golden_journal_records", len(written))
    rig_stats.add("upgrade_lost", len(lost))
    assert lost == []
    assert receipts, "the golden journal had nothing left to clean"
    # Every open scope cleaned; a claim a quarantined attachment holds is refused (the
    # plugin does not unprepare under an unclean attachment) until an operator clears it.
    assert receipts == {
        **dict.fromkeys(receipts, CleanupStatus.CLEANED),
        **dict.fromkeys(entry["held_scopes"], "FAILED_PRECONDITION"),
    }
    quarantined = [r for r in after.values() if r.scope == entry["quarantined_scope"]]
    assert quarantined, "the quarantined scope's records are gone"
    first = next(r for r in written if r.scope == entry["quarantined_scope"])
    assert inspected[first.operation_id].cleanup is CleanupStatus.QUARANTINED
    assert {r.state for r in quarantined} == {"Quarantined"}  # still reported, never dropped

    cleaned = {m for s, (ms, _) in evidence.items() if s not in unclean for m in ms}
    held = {p for s, (_, ps) in evidence.items() if s in unclean for p in ps}
    if entry["kernel"] is not None:
        # Not vacuous: the kernel the journal was left on carried the cleaned scopes'
        # links (the in-flight connect's among them) and differed from the lab's start.
        assert [lk for lk in restored["links"] if (lk["alias"] or "").startswith(tuple(cleaned))]
        assert leaks(start, restored, cleaned, held)
    assert leaks(start, kernel_after, cleaned, held) == []


def test_the_maker_never_writes_a_service_again(capsys: pytest.CaptureFixture[str]) -> None:
    """A service's golden journal is written once: named, it is refused (exit 2, one
    line); not named, it is kept; either way no byte of the release's files changes."""
    before = {p: p.read_bytes() for p in (DATA / "v0.1.0").rglob("*") if p.is_file()}
    assert make_golden_journals.main(["v0.1.0", "networkplugin-vf"]) == 2
    refused = capsys.readouterr().err.strip()
    assert refused.endswith(
        "networkplugin-vf exists: a release's golden journals are written "
        "once (remove the directory to write it again)"
    ), refused
    assert make_golden_journals.main(["v0.1.0"]) == 0
    kept = capsys.readouterr().out.splitlines()
    assert [line.rsplit("/", 1)[1] for line in kept] == [
        f"{s}: kept (written once)" for s in sorted(LEAVING)
    ]
    assert make_golden_journals.main(["--kernel", "v0.1.0", "networkplugin-links"]) == 2
    assert "no journal without a kernel snapshot" in capsys.readouterr().err
    assert make_golden_journals.main(["v0.1.0", "networkplugin-nope"]) == 2
    assert "no such service: networkplugin-nope" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in (DATA / "v0.1.0").rglob("*") if p.is_file()} == before
