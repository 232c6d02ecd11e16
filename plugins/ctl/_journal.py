"""Reading a service's journal without changing a byte of it, service running or not.

The CLI never opens a service's journal for writing, and never reads it in place with
a connection that could change it. It reads a private, consistent copy and opens that
copy exactly as the service would (``Store.open``: identity, header, integrity check,
lease, every record's checksum), so its verdict on a journal is the service's own:

* **Service running** (it holds ``writer.lock``): the journal is in WAL mode and its
  ``-shm`` exists, so a read-only connection (``file:...?mode=ro``) can read it
  alongside the writer; SQLite's backup API copies one consistent snapshot from it.
  ``-wal``/``-shm`` a read-only open had to create (the service stopped in between,
  and its clean close deleted them) are removed again, as ``Store`` does.
* **Service down** (the lock is free): a read-only connection would have to create
  the ``-shm`` file, so the files are copied instead (``journal.db``, its ``-wal``,
  ``journal.id``) while the CLI holds a shared ``flock`` on ``writer.lock`` (opened
  read-only: the holder's pid in it is not overwritten). A service starting in those
  few milliseconds fails as it would beside any second writer, naming the lock.

The lease (``runtimeDir``) is copied before the journal: it may lag the journal, never
lead it, so a copy taken in this order never reports a false rollback.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from plugins.sdk import NetworkPluginError
from plugins.sdk.store import (
    DB_NAME,
    ID_NAME,
    LOCK_NAME,
    JournalFault,
    JournalFormatUnsupported,
    JournalUnavailable,
    Store,
    lease_path,
)

from ._errors import CtlError, Exit
from ._node import Service

_SIDECARS = ("-wal", "-shm")


@dataclass(frozen=True)
class Snapshot:
    """A private copy of one service's journal, opened and verified; valid inside ``snapshot``."""

    service: Service
    live: bool  # the service held its writer lock when the copy was taken
    store: Store


def journal_error(service: Service, reason: str) -> CtlError:
    subject = f"{service.name}: journal {service.config.state_dir}: "
    return CtlError(Exit.JOURNAL, subject + reason, subject=subject)


def service_holds_lock(state_dir: Path) -> bool:
    """Whether a process holds the writer lock of ``state_dir`` (checked without taking it)."""
    with _shared_lock(state_dir) as free:
        return not free


@contextlib.contextmanager
def snapshot(service: Service) -> Iterator[Snapshot]:
    """A verified private copy of ``service``'s journal; nothing of the original changes."""
    state_dir = service.config.state_dir.absolute()
    if not state_dir.is_dir():
        raise journal_error(service, "the state directory does not exist")
    if not (state_dir / ID_NAME).exists() and not (state_dir / DB_NAME).exists():
        raise journal_error(
            service, f"no journal here ({ID_NAME} and {DB_NAME} are missing; never started?)"
        )
    scratch = Path(tempfile.mkdtemp(prefix="networkplugin-ctl-"))
    try:
        copy_dir, copy_run = scratch / "state", scratch / "run"
        copy_dir.mkdir(mode=0o700)
        copy_run.mkdir(mode=0o700)
        lease = _read_lease(lease_path(service.config.runtime_dir.absolute(), state_dir))
        if lease is not None:
            lease_path(copy_run, copy_dir).write_bytes(lease)
        live = _copy_journal(service, state_dir, copy_dir)
        try:
            store = Store.open(copy_dir, runtime_dir=copy_run)
        except (JournalUnavailable, JournalFormatUnsupported) as exc:
            raise journal_error(service, exc.reason) from None  # the copy's path is no help
        except (JournalFault, NetworkPluginError, OSError, sqlite3.Error) as exc:
            raise journal_error(service, f"cannot read the copy: {exc}") from None
        try:
            yield Snapshot(service, live, store)
        finally:
            store.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _read_lease(path: Path, attempts: int = 8) -> bytes | None:
    """The lease's bytes, read until two reads agree (the service rewrites it in place
    with one ``pwrite`` per commit; a read torn by one could show a count never written)."""
    try:
        last = path.read_bytes()
        for _ in range(attempts):
            now = path.read_bytes()
            if now == last:
                return now
            last = now
    except FileNotFoundError:
        return None
    return last


def _copy_journal(service: Service, state_dir: Path, dest: Path) -> bool:
    """Copy the journal into ``dest``; whether the service was running (held the lock)."""
    with _shared_lock(state_dir) as free:
        if free:
            for name in (ID_NAME, DB_NAME, DB_NAME + "-wal"):  # SQLite rebuilds -shm
                if (state_dir / name).exists():
                    shutil.copyfile(state_dir / name, dest / name)
            return False
    # Running: the writer keeps -wal and -shm, so a read-only connection reads beside it.
    if (state_dir / ID_NAME).exists():
        shutil.copyfile(state_dir / ID_NAME, dest / ID_NAME)
    _backup(service, state_dir / DB_NAME, dest / DB_NAME)
    return True


def _backup(service: Service, db: Path, dest: Path) -> None:
    existed = {s for s in _SIDECARS if os.path.lexists(str(db) + s)}
    try:
        source = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise journal_error(service, f"cannot open {DB_NAME} read-only: {exc}") from None
    try:
        target = sqlite3.connect(dest)
        try:
            source.backup(target)
        finally:
            target.close()
    except sqlite3.Error as exc:
        raise journal_error(service, f"{DB_NAME} cannot be read: {exc}") from None
    finally:
        source.close()
        for suffix in _SIDECARS:
            path = Path(str(db) + suffix)
            if suffix in existed or not path.exists():
                continue
            if suffix == "-wal" and path.stat().st_size != 0:
                continue
            with contextlib.suppress(OSError):
                path.unlink()


@contextlib.contextmanager
def _shared_lock(state_dir: Path) -> Iterator[bool]:
    """Try a shared ``flock`` on ``writer.lock`` (opened read-only); yield whether it was free.

    A missing lock file means no process ever opened the journal: free, and not created.
    """
    try:
        fd = os.open(state_dir / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
