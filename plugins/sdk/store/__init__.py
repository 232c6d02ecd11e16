"""The durable journal store of a NetworkPlugin service.

A service records every operation, its plan, each effect's before-image and
progress, and its replayable response here *before* acting on the kernel, so
after any crash it can tell what it attempted. The decisions that make that
true:

* **SQLite in WAL mode with ``synchronous=FULL``.** Every COMMIT appends to the
  write-ahead log and fsyncs it before returning, so a committed transaction
  survives a crash or power loss; ``Store.write`` returns only after that
  COMMIT. Readers see the last committed snapshot and never block the writer.
  The pragmas are read back on open, never assumed.
* **Group commit.** All writes go through one writer thread. It takes every
  queued write function, runs each in its own SAVEPOINT inside one
  ``BEGIN IMMEDIATE`` transaction and commits once, so N concurrent callers
  cost one fsync, not N, while an exception in one function undoes only that
  function's changes. Functions are closures over a ``Txn``; reading and writing
  in one function is an atomic compare-and-set (there is no other writer).
* **One writer per state directory.** ``flock`` on ``writer.lock`` is held for
  the store's lifetime; a second opener (same or another process) gets
  ``StoreLocked`` naming the holder's pid. Two writers could each believe they
  own a resource; the lock also makes "the old process is stopped" checkable
  (the kernel drops it when the holder dies). A program's new instance waits for
  it, bounded (``writer_wait_s``, ``WriterLock.await_holder``): the handover of a
  rolling update, docs/runner.md "The writer lock and handover".
* **A lost journal is never recreated.** ``journal.id`` holds a random id that
  is also in the database. It is written once, after the schema commit, and
  the database only becomes ``journal.db`` after it. From then on a missing,
  truncated, corrupt, foreign or newer-format database is
  ``JournalUnavailable`` and nothing is created or modified: an empty journal
  would report every earlier attachment absent, and absence from a journal is
  not proof of a clean host.
* **Versioned format.** A ``meta`` table holds the format marker, journal id
  and schema version (the *store format*). The plugin journal's first released
  version is 2; each later change appends a migration (one transaction each) and a
  journal of every earlier version under ``tests/unit/journals`` that must still
  open. A journal at any version no migration names (newer, or never released) is
  refused (``JournalFormatUnsupported``: one line with the file and both versions),
  not guessed at, and left byte for byte as it was. A fresh journal is a copy of an
  image those migrations built once per process (``_image``), stamped with its
  own id.
* **Effect format, apart.** The plugin journal's meta also lists the *effect
  formats* of the records it holds (``effect_formats``: how plans, before-images and
  outputs are encoded). A journal holding one this build cannot execute and undo is
  refused the same way. docs/file-formats.md, "Versions".
"""

from ._errors import (
    JournalFault,
    JournalFormatUnsupported,
    JournalUnavailable,
    StoreClosed,
    StoreError,
    StoreLocked,
)
from ._faults import NO_FAULTS, SITES, StorageFaults, storage_failure
from ._integrity import DamagedRecord
from ._journal import DB_NAME, ID_NAME
from ._lease import lease_path
from ._lock import LOCK_NAME, WriterLock
from ._records import NONTERMINAL_STATES, EffectRecord, OperationRecord, ScopeRecord
from ._schema import EFFECT_FORMAT, PLUGIN_JOURNAL, SCHEMA_VERSION, JournalFormat, Migration
from ._sqlite import Reader, Store, Txn

__all__ = [
    "DB_NAME",
    "EFFECT_FORMAT",
    "ID_NAME",
    "LOCK_NAME",
    "NONTERMINAL_STATES",
    "NO_FAULTS",
    "PLUGIN_JOURNAL",
    "SCHEMA_VERSION",
    "SITES",
    "DamagedRecord",
    "EffectRecord",
    "JournalFault",
    "JournalFormat",
    "JournalFormatUnsupported",
    "JournalUnavailable",
    "Migration",
    "OperationRecord",
    "Reader",
    "ScopeRecord",
    "StorageFaults",
    "Store",
    "StoreClosed",
    "StoreError",
    "StoreLocked",
    "Txn",
    "WriterLock",
    "lease_path",
    "storage_failure",
]
