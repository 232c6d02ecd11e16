"""The journal's files in a state directory: creation, identity and validation.

Layout: ``journal.db`` (+ SQLite's ``-wal``/``-shm``), ``journal.id`` and
``writer.lock``. Everything here runs with the writer lock held.

Fresh initialisation is crash safe without ever allowing a lost journal to be
replaced: the database is written and synced under a staging name
(``journal.db.init``), then ``journal.id`` is written, then the staging file is
renamed to ``journal.db``. A crash before ``journal.id`` exists leaves only
staging files, which the next open discards and redoes. A crash between
``journal.id`` and the rename leaves a staging file carrying that same journal
id; it can only come from that interrupted initialisation (the rename is atomic
and removes the staging name), so the next open validates it and finishes the
rename. Every other inconsistency is ``JournalUnavailable`` and no file is
created or modified.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from dataclasses import dataclass
from pathlib import Path

from ._errors import JournalFormatUnsupported, JournalUnavailable
from ._image import fresh_image
from ._lease import LeaseRecord
from ._schema import PLUGIN_JOURNAL, JournalFormat, connect, held_effect_formats, read_meta

DB_NAME = "journal.db"
ID_NAME = "journal.id"
STAGING_NAME = "journal.db.init"
_SIDECARS = ("-wal", "-shm", "-journal")
_MAGIC = b"SQLite format 3\x00"


def ensure_state_dir(state_dir: Path) -> None:
    """Create the state directory with mode 0700 if it is missing."""
    if state_dir.is_dir():
        return
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(state_dir, 0o700)
    except FileExistsError:
        if not state_dir.is_dir():
            raise
        return
    os.chmod(state_dir, 0o700)  # mkdir's mode is filtered by the umask
    fsync_dir(state_dir.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


@dataclass(frozen=True)
class Prepared:
    """The journal ``prepare`` found or created."""

    journal_id: str
    version: int
    created: bool
    """Initialised by this very call: ``fresh_image``'s checked image, nothing else."""
    effect_formats: tuple[int, ...] = ()
    """The effect formats of the records it holds (``JournalFormat.effect_formats``)."""


def prepare(
    state_dir: Path, known: LeaseRecord | None = None, fmt: JournalFormat = PLUGIN_JOURNAL
) -> Prepared:
    """Make sure ``state_dir`` holds a valid journal; return its id and versions.

    Initialises a fresh journal only when neither ``journal.id`` nor
    ``journal.db`` exists and no lease of this boot (``known``) says a journal
    was in use here; raises ``JournalUnavailable`` otherwise.
    """
    db = state_dir / DB_NAME
    # One listing for every name asked about (a lexists and an unlink attempt each cost
    # more): with the writer lock held nothing else adds or removes them meanwhile.
    present = set(os.listdir(state_dir))
    if ID_NAME not in present and DB_NAME not in present and known is not None:
        raise JournalUnavailable(
            state_dir,
            f"journal {known.journal_id} acknowledged {known.commits} commits in this boot "
            f"and its files ({ID_NAME}, {DB_NAME}) are gone; a fresh journal would report "
            "those operations absent",
        )
    if ID_NAME not in present:
        if DB_NAME in present:
            raise JournalUnavailable(
                state_dir,
                f"{DB_NAME} exists but {ID_NAME} is missing, so it cannot be proven to be "
                "this service's journal",
            )
        for suffix in _SIDECARS:
            if DB_NAME + suffix in present:
                raise JournalUnavailable(
                    state_dir, f"{DB_NAME}{suffix} exists without {DB_NAME} or {ID_NAME}"
                )
        # Not read back through ``validate``: the file is the image ``fresh_image`` made
        # and checked, written and synced a moment ago under the writer lock (the read-only
        # connection and its quick_check were a quarter of a fresh open's CPU). The
        # writer's connection reads it next, and every later open validates it in full.
        journal_id = _initialise(state_dir, fmt, present)
        held: tuple[int, ...] = (fmt.effect_format,) if fmt.effect_formats else ()
        return Prepared(journal_id, fmt.version, created=True, effect_formats=held)

    journal_id = _read_journal_id(state_dir)
    if known is not None and known.journal_id != journal_id:
        raise JournalUnavailable(
            state_dir,
            f"{ID_NAME} names journal {journal_id}, but journal {known.journal_id} was in use "
            "here in this boot: the journal was replaced",
        )
    if DB_NAME not in present:
        if STAGING_NAME not in present:
            raise JournalUnavailable(
                state_dir,
                f"{DB_NAME} is missing although {ID_NAME} says journal {journal_id} was "
                "created here",
            )
        _finish_initialisation(state_dir, journal_id, fmt)
    version, held = validate_versions(state_dir, db, journal_id, known, fmt)
    return Prepared(journal_id, version, created=False, effect_formats=held)


def _read_journal_id(state_dir: Path) -> str:
    try:
        text = (state_dir / ID_NAME).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise JournalUnavailable(state_dir, f"{ID_NAME} is unreadable: {exc}") from exc
    try:
        canonical = str(uuid.UUID(text))
    except ValueError:
        canonical = ""
    if canonical != text:
        raise JournalUnavailable(state_dir, f"{ID_NAME} does not hold a journal id: {text[:64]!r}")
    return text


def _check_header(path: Path) -> str | None:
    """A reason the file cannot be a database, judged from its header alone.

    Journals are created in rollback-journal mode and switched to WAL only after
    publication, so ``journal.db`` always holds at least its first page, even
    when recent commits live only in the ``-wal`` file.
    """
    try:
        with open(path, "rb") as f:
            header = f.read(100)
            size = os.fstat(f.fileno()).st_size
    except OSError as exc:
        return f"{path.name} is unreadable: {exc}"
    if len(header) < 100:
        return f"{path.name} is truncated ({size} bytes)"
    if header[:16] != _MAGIC:
        return f"{path.name} is not an SQLite database (bad header)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        return f"{path.name} has a corrupt header (page size {page_size})"
    if size < page_size:
        return f"{path.name} is truncated ({size} bytes, page size {page_size})"
    return None


def validate(
    state_dir: Path,
    db: Path,
    journal_id: str,
    known: LeaseRecord | None = None,
    fmt: JournalFormat = PLUGIN_JOURNAL,
) -> int:
    """Check ``db`` is our intact journal with ``journal_id``; return its schema version."""
    return validate_versions(state_dir, db, journal_id, known, fmt)[0]


def validate_versions(
    state_dir: Path,
    db: Path,
    journal_id: str,
    known: LeaseRecord | None = None,
    fmt: JournalFormat = PLUGIN_JOURNAL,
) -> tuple[int, tuple[int, ...]]:
    """Check ``db`` is our intact journal with ``journal_id`` in a format this build
    serves; return its store format and the effect formats of its records.

    Reads through a read-only connection. SQLite may create empty ``-wal``/``-shm``
    files even for that, and rewrites the ``-shm`` (its WAL index: the read marks, a
    rebuilt index after a crash) even though it changes nothing else; on failure the
    sidecars it created are removed again and the ``-shm`` gets its bytes back, so an
    unavailable or refused journal is left exactly as it was found.
    """
    reason = _check_header(db)
    if reason is not None:
        raise JournalUnavailable(state_dir, reason)
    existed = {suffix for suffix in _SIDECARS if _exists(_sidecar(db, suffix))}
    shm = _sidecar(db, "-shm")
    shm_before = _read_if_small(shm) if "-shm" in existed else None
    try:
        return _validate_contents(state_dir, db, journal_id, known, fmt)
    except BaseException:
        for suffix in _SIDECARS:
            path = _sidecar(db, suffix)
            if suffix in existed or not _exists(path):
                continue
            if suffix == "-wal" and path.stat().st_size != 0:
                continue
            with contextlib.suppress(OSError):
                path.unlink()
        if shm_before is not None:
            with contextlib.suppress(OSError):
                _restore(shm, shm_before)
        raise


_SHM_LIMIT = 64 << 20
"""The largest ``-shm`` kept to be put back (32 KiB per 4,096 WAL frames: a WAL of
gigabytes). A larger one is left as SQLite made it (it is an index SQLite rebuilds)."""


def _read_if_small(path: Path) -> bytes | None:
    try:
        if path.stat().st_size > _SHM_LIMIT:
            return None
        return path.read_bytes()
    except OSError:
        return None


def _restore(path: Path, data: bytes) -> None:
    """Put ``data`` back into ``path`` in place (same inode: SQLite maps the file).

    Safe while this process holds the writer lock: no writer can have appended to the
    WAL since ``data`` was read, so the index put back describes the same log (or is
    the stale one a crash left, which the next opener rebuilds, as it would have). A
    CLI reading in place beside the lock holder in that instant reads the same frames
    through either index."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        if os.pread(fd, len(data) + 1, 0) == data:
            return
        view = memoryview(data)
        offset = 0
        while offset < len(data):
            offset += os.pwrite(fd, view[offset:], offset)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _validate_contents(
    state_dir: Path, db: Path, journal_id: str, known: LeaseRecord | None, fmt: JournalFormat
) -> tuple[int, tuple[int, ...]]:
    name = db.name
    try:
        conn = connect(db, "ro")
        try:
            check = conn.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                problems = "; ".join(str(row[0]) for row in check[:3])
                raise JournalUnavailable(
                    state_dir, f"{name} failed its integrity check: {problems}"
                )
            meta = read_meta(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise JournalUnavailable(state_dir, f"{name} is unreadable or corrupt: {exc}") from exc
    if meta is None:
        raise JournalUnavailable(state_dir, f"{name} has no meta table; it is not a journal")
    if meta.get("format") != fmt.name:
        raise JournalUnavailable(
            state_dir, f"{name} is not a journal of this store (format {meta.get('format')!r})"
        )
    if meta.get("journal_id") != journal_id:
        raise JournalUnavailable(
            state_dir,
            f"{name} belongs to journal {meta.get('journal_id')!r}, but {ID_NAME} says "
            f"{journal_id}",
        )
    raw_version = meta.get("schema_version", "")
    if not raw_version.isdigit():
        raise JournalUnavailable(state_dir, f"{name} has a corrupt schema version {raw_version!r}")
    version = int(raw_version)
    # Before anything else is judged: a newer build may have changed what follows.
    if version not in fmt.readable:
        raise JournalFormatUnsupported(db, "store format", version, fmt.readable)
    held = held_effect_formats(meta, fmt)
    if held is None:
        raise JournalUnavailable(
            state_dir, f"{name} has a corrupt effect format list {meta.get('effect_formats')!r}"
        )
    unknown = tuple(f for f in held if f not in fmt.effect_formats)
    if unknown:
        raise JournalFormatUnsupported(db, "effect format", unknown, fmt.effect_formats)
    raw_commits = meta.get("commits", "")
    if not raw_commits.isdigit():
        raise JournalUnavailable(state_dir, f"{name} has a corrupt commit count {raw_commits!r}")
    if known is not None and int(raw_commits) < known.commits:
        raise JournalUnavailable(
            state_dir,
            f"{name} holds {raw_commits} commits but {known.commits} were acknowledged in this "
            f"boot (see the journal lease): the -wal file was lost or {name} was replaced by an "
            "older copy",
        )
    return version, held


def _discard_staging(state_dir: Path, present: set[str]) -> None:
    for name in (STAGING_NAME, *(STAGING_NAME + s for s in _SIDECARS)):
        if name in present:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(state_dir / name)


def _initialise(state_dir: Path, fmt: JournalFormat, present: set[str]) -> str:
    _discard_staging(state_dir, present)
    journal_id = str(uuid.uuid4())
    # The image is in rollback-journal mode: no -wal/-shm to carry across the rename.
    # The first regular open switches the journal to WAL.
    _write_synced(state_dir / STAGING_NAME, fresh_image(fmt, journal_id))
    _write_journal_id(state_dir, journal_id)
    publish_staging(state_dir)
    return journal_id


def _write_synced(path: Path, data: bytes, *, mode: int = 0o644, exclusive: bool = True) -> None:
    """``path`` holding ``data``, synced: created (``exclusive``) or else truncated; mode
    0644 less the umask by default, as SQLite creates a database."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(path, flags, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _finish_initialisation(state_dir: Path, journal_id: str, fmt: JournalFormat) -> None:
    staging = state_dir / STAGING_NAME
    if _exists(_sidecar(staging, "-journal")):
        raise JournalUnavailable(
            state_dir, f"{DB_NAME} is missing and {STAGING_NAME} has a hot rollback journal"
        )
    validate(state_dir, staging, journal_id, None, fmt)
    publish_staging(state_dir)


def publish_staging(state_dir: Path) -> None:
    """Rename the staged database to ``journal.db`` (the last step of initialisation)."""
    os.rename(state_dir / STAGING_NAME, state_dir / DB_NAME)
    fsync_dir(state_dir)


def _write_journal_id(state_dir: Path, journal_id: str) -> None:
    tmp = state_dir / f"{ID_NAME}.tmp"
    _write_synced(tmp, f"{journal_id}\n".encode("ascii"), mode=0o600, exclusive=False)
    os.rename(tmp, state_dir / ID_NAME)
    fsync_dir(state_dir)
