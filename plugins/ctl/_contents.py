"""What one journal holds, read once from a verified snapshot, as plain values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from plugins.sdk.store import EffectRecord, JournalUnavailable, OperationRecord, Reader

from ._journal import Snapshot, journal_error
from ._node import Service


@dataclass(frozen=True)
class Contents:
    """Every operation and effect of one service's journal, in journal order."""

    service: Service
    live: bool
    operations: tuple[OperationRecord, ...]
    effects: Mapping[tuple[str, str], tuple[EffectRecord, ...]]

    @property
    def last_seq(self) -> int:
        return max((op.seq for op in self.operations), default=0)

    def effects_of(self, op: OperationRecord) -> tuple[EffectRecord, ...]:
        return self.effects.get((op.partition, op.operation_id), ())

    def plugin(self, op: OperationRecord) -> str:
        """The logical plugin of a record (its partition when no registration has it)."""
        reg = self.service.registration(op.partition)
        return reg.name if reg is not None else op.partition


def read_contents(snap: Snapshot) -> Contents:
    """Everything in the snapshot; a record failing its checksum fails the whole read.

    A damaged record's scope is unknown (its scope column may be what changed), so no
    view of this journal could say what it does not hold: one line, exit 3.
    """
    damaged = snap.store.damaged
    if damaged:
        more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
        raise journal_error(snap.service, f"{damaged[0].describe()} fails its checksum{more}")

    def read(r: Reader) -> Contents:
        partitions = sorted({str(row["partition"]) for row in r.select("operations")})
        operations = sorted(
            (op for p in partitions for op in r.operations(p)), key=lambda op: op.seq
        )
        effects = {
            (op.partition, op.operation_id): tuple(r.effects(op.partition, op.operation_id))
            for op in operations
        }
        return Contents(snap.service, snap.live, tuple(operations), MappingProxyType(effects))

    try:
        return snap.store.read(read)
    except JournalUnavailable as exc:
        raise journal_error(snap.service, exc.reason) from None
