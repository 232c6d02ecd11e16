"""The journal lease: what this boot acknowledged, kept outside the state directory.

A journal can lose committed transactions without SQLite noticing: its ``-wal``
file deleted after a crash, ``journal.db`` replaced by an older copy, every file
of it deleted (then a fresh journal would report every earlier attachment
absent). SQLite checks none of that, and the state directory cannot vouch for
itself. The lease can: a small file in a runtime directory (a tmpfs such as
``/run``) that records the journal id and the number of transactions committed
so far in this boot. Kernel objects live exactly as long as a boot, and so does a
tmpfs, so the lease covers precisely the window in which a lost transaction can
leave something behind in the kernel.

* Each commit increments a counter inside the same transaction (no extra fsync),
  and after the COMMIT returns the new value is written to the lease with one
  ``pwrite`` (no fsync either: the lease may lag the journal after a power loss,
  never lead it, and a lagging lease only weakens detection, it never raises a
  false alarm).
* At open, a lease from this boot must name the same journal, and the journal
  must hold at least as many commits as the lease says were acknowledged. A
  journal that is missing is not recreated while a lease of this boot exists.

What it cannot see: a rollback across a reboot (the kernel objects it would hide
are gone too, and cleanup verifies by probe), a rollback of both the journal and
the lease, and damage while the service runs (record checksums cover altered
records). Deleting the lease is how an operator accepts a restored journal.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ._errors import JournalFault, JournalUnavailable

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
_FORMAT = "dranp-journal-lease/v1"
_LINE = re.compile(
    rf"{re.escape(_FORMAT)} journal=(?P<journal>[0-9a-f-]{{36}}) boot=(?P<boot>\S+) "
    r"commits=(?P<commits>\d{20}) stateDir=(?P<state>.+)\n"
)


def boot_id() -> str:
    """This boot's id: leases of earlier boots are stale (their kernel objects are gone)."""
    try:
        return _read_boot_id()
    except OSError:
        return "unknown-boot"


@functools.cache  # a failed read raises, so it is not remembered
def _read_boot_id() -> str:
    """Read once per process, which never outlives its boot (each read was a third of
    ``Lease.open``'s CPU)."""
    return BOOT_ID_PATH.read_text(encoding="ascii").strip()


@dataclass(frozen=True)
class LeaseRecord:
    journal_id: str
    boot_id: str
    commits: int


def lease_path(runtime_dir: Path, state_dir: Path) -> Path:
    """One lease per state directory, so services may share a runtime directory."""
    key = hashlib.sha256(str(state_dir.absolute()).encode()).hexdigest()[:16]
    return runtime_dir / f"journal-{key}.lease"


class Lease:
    """An open lease file; ``record`` overwrites it in place with one ``pwrite``."""

    def __init__(self, path: Path, fd: int, state_dir: Path, boot: str) -> None:
        self.path = path
        self._fd: int | None = fd
        self._state_dir = state_dir
        self._boot = boot
        self._length = -1

    @classmethod
    def open(cls, runtime_dir: Path, state_dir: Path) -> tuple[Lease, LeaseRecord | None]:
        """Open (creating 0600 in a 0700 directory) and read the lease of this boot, if any."""
        state_dir = state_dir.absolute()
        try:
            runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = lease_path(runtime_dir, state_dir)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:  # the runtime dir's problem, not the journal's: nothing is lost
            raise JournalFault(
                state_dir, f"cannot open the journal lease in {runtime_dir}: {exc.strerror}"
            ) from exc
        boot = boot_id()
        try:
            text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        except OSError as exc:
            os.close(fd)
            raise JournalFault(state_dir, f"cannot read {path}: {exc.strerror}") from exc
        lease = cls(path, fd, state_dir, boot)
        if not text:
            return lease, None
        match = _LINE.fullmatch(text)
        if match is None:
            lease.close()
            raise JournalUnavailable(
                state_dir,
                f"the journal lease {path} is unreadable, so lost commits cannot be ruled "
                "out; delete it only if the journal is known to be complete",
            )
        if match["boot"] != boot:
            return lease, None  # an earlier boot: its kernel objects are gone
        return lease, LeaseRecord(match["journal"], match["boot"], int(match["commits"]))

    def record(self, journal_id: str, commits: int) -> None:
        """Overwrite the lease (fixed width, so one pwrite replaces it whole)."""
        if self._fd is None:
            return
        line = (
            f"{_FORMAT} journal={journal_id} boot={self._boot} commits={commits:020d} "
            f"stateDir={self._state_dir}\n"
        ).encode()
        written = os.pwrite(self._fd, line, 0)
        if written != len(line):
            raise OSError(f"short write to {self.path}")
        if self._length != len(line):  # the width is fixed: cut an older, longer text once
            os.ftruncate(self._fd, len(line))
            self._length = len(line)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
