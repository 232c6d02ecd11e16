"""A real service SIGKILLed after acknowledging calls, its journal then damaged on disk.

Each case: the toy service acknowledges NodePrepare and ConnectNetwork (the toy kernel
holds their objects), dies by SIGKILL, its state directory is damaged the way a
restore script, an operator or a disk would, and it is started again. Then, over the
real socket:

* the acknowledged operation is never reported absent or CLEANED: InspectOperation
  and RemoveNetwork answer ``DATA_LOSS`` (never ``found = false``, never ``CLEANED``,
  never the "retry later" of ``UNAVAILABLE``);
* nothing in the kernel changes (no mutation without durable intent, none at all);
* the log says why in one line, and holds no traceback.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from labs import ServiceProcess
from plugins.sdk.host import PluginCallError, PluginClient

from ..journal_damage import flip_first, sqlite_backup
from . import node as n
from .toy import ToyKernel

NEEDLE = "flipme0"  # the connected interface's name: only the connect records carry it


class ToyDeployment:
    """The toy service deployed as a real process over a toy kernel file that outlives it
    (the runner's own fixture: no Linux kernel, so not a ``labs.Node``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.toy_file = root / "toy.json"
        ToyKernel(self.toy_file)  # the "kernel" outlives every service process
        sockets = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp"))  # short socket paths
        self.sockets = sockets
        self.service = ServiceProcess(
            "toy",
            ["tests.runner.toy_service"],
            root,
            sockets / "sock",
            f"toy://{self.toy_file}",
            ["toy.sock"],
        )
        self.state = root / "state"
        self.backup = root / "journal-before-connect.db"

    def client(self) -> PluginClient:
        return self.service.client("toy.sock", timeout=30)

    def kernel(self) -> object:
        return ToyKernel(self.toy_file).observable()

    def acknowledge_then_sigkill(self) -> None:
        self.service.start()
        with self.client() as client:
            client.node_prepare(n.prepare())
            sqlite_backup(self.state / "journal.db", self.backup)  # what a backup job would hold
            client.connect_network(n.connect(name=NEEDLE))
        self.service.kill()
        assert (self.state / "journal.db-wal").exists()  # a crash, not a clean close

    def close(self) -> None:
        self.service.kill()
        shutil.rmtree(self.sockets, ignore_errors=True)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[ToyDeployment]:
    lab = ToyDeployment(tmp_path)
    try:
        yield lab
    finally:
        lab.close()


def delete_wal(lab: ToyDeployment) -> None:
    (lab.state / "journal.db-wal").unlink()


def delete_wal_and_shm(lab: ToyDeployment) -> None:
    for suffix in ("-wal", "-shm"):
        (lab.state / f"journal.db{suffix}").unlink()


def older_copy(lab: ToyDeployment) -> None:
    delete_wal_and_shm(lab)
    shutil.copyfile(lab.backup, lab.state / "journal.db")


def every_file(lab: ToyDeployment) -> None:
    for name in ("journal.db", "journal.db-wal", "journal.db-shm", "journal.id"):
        (lab.state / name).unlink()


def flipped_in_wal(lab: ToyDeployment) -> None:
    # WAL frames carry SQLite's checksums: the log ends at the altered frame, and the
    # commits after it are lost, which the lease's count reports.
    flip_first(lab.state / "journal.db-wal", NEEDLE)


WHOLE_JOURNAL: dict[str, Callable[[ToyDeployment], None]] = {
    "wal": delete_wal,
    "wal+shm": delete_wal_and_shm,
    "older-copy": older_copy,
    "every-file": every_file,
    "flipped-wal-frame": flipped_in_wal,
}


def _one_line_reason(log: Path, phrase: str) -> None:
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if phrase in line]
    assert lines, f"no log line says {phrase!r}:\n{text}"


def _refused(call: Callable[[], object], what: str) -> None:
    with pytest.raises(PluginCallError) as info:
        call()
    assert info.value.code == "DATA_LOSS", f"{what}: {info.value}"


@pytest.mark.parametrize("damage", list(WHOLE_JOURNAL))
def test_a_journal_that_lost_acknowledged_commits_serves_nothing(
    lab: ToyDeployment, damage: str
) -> None:
    lab.acknowledge_then_sigkill()
    attached = lab.kernel()
    WHOLE_JOURNAL[damage](lab)
    lab.service.start(wait_ready=False)
    with lab.client() as client:
        assert not client.get_info().ready
        _refused(lambda: client.inspect("op-connect", "att-1"), "InspectOperation")
        _refused(lambda: client.remove_network(n.remove()), "RemoveNetwork")
        _refused(lambda: client.connect_network(n.connect(op="op-new", scope="att-2")), "new work")
    assert lab.kernel() == attached, "nothing in the kernel may change"
    assert not (lab.state / "journal.db").exists() or damage != "every-file", "recreated"
    _one_line_reason(lab.service.log, "journal in")


def test_a_flipped_record_makes_its_scope_unavailable_and_others_served(lab: ToyDeployment) -> None:
    lab.acknowledge_then_sigkill()
    lab.service.start()
    lab.service.stop()  # a clean stop checkpoints: the records now live in journal.db
    attached = lab.kernel()
    flip_first(lab.state / "journal.db", NEEDLE)
    lab.service.start()
    with lab.client() as client:
        _refused(lambda: client.inspect("op-connect", "att-1"), "InspectOperation")
        _refused(lambda: client.remove_network(n.remove()), "RemoveNetwork")
        # No unknown scope can be proven absent while a damaged record exists.
        _refused(lambda: client.remove_network(n.remove(op="op-r2", scope="att-9")), "unknown")
        assert client.inspect("op-prepare", "prep-1").found  # other scopes are served
    assert lab.kernel() == attached
    _one_line_reason(lab.service.log, "fails its checksum")
