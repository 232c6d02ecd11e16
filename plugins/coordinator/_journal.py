"""The coordinator's own journal: what it authorized and requested, and who owns what.

It shares operation identities with the plugin journals (the coordinator mints
every operation id), so after a crash on either side the two can be compared.

It runs on the plugin store's durable core (``plugins.sdk.store``), with its own
format: a journal id and format version with ordered migrations, the single-writer
lock, group commit under WAL and ``synchronous=FULL``, a checksum on every row, the
lease of this boot, and never recreated silently. A coordinator that forgot what it
requested would hand the same resources out twice.

A call is *open* while the coordinator still owes it something (an outcome, a retry, a
cleanup or an operator) and *closed* once nothing more will happen to it; docs/coordinator.md
has the transitions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from plugins.sdk import NetworkPluginError
from plugins.sdk.store import (
    NO_FAULTS,
    JournalFormat,
    Migration,
    Reader,
    StorageFaults,
    Store,
    Txn,
    WriterLock,
)

T = TypeVar("T")

_V1: Final = """
CREATE TABLE calls (
    operation_id TEXT PRIMARY KEY,
    unit TEXT NOT NULL,          -- preparation or attachment id
    step TEXT NOT NULL,
    plugin TEXT NOT NULL,
    hook TEXT NOT NULL,
    generation INTEGER NOT NULL,
    request_json TEXT NOT NULL,
    state TEXT NOT NULL,         -- OPEN_CALL_STATES or CLOSED_CALL_STATES
    response_json TEXT,
    error TEXT,
    seq INTEGER NOT NULL UNIQUE,
    checksum TEXT NOT NULL
);
CREATE INDEX calls_by_unit ON calls (unit, step, seq);
CREATE TABLE units (
    unit TEXT PRIMARY KEY,
    kind TEXT NOT NULL,          -- preparation or attachment
    topology TEXT NOT NULL,
    state TEXT NOT NULL,         -- preparing, prepared, connecting, ready, failed, removing, removed, unprepared
    detail_json TEXT NOT NULL,
    checksum TEXT NOT NULL
);
CREATE TABLE claims (
    resource TEXT NOT NULL,      -- physical resource or domain key, e.g. pci:0000:03:10.0
    holder TEXT NOT NULL,        -- the preparation that holds it
    mode TEXT NOT NULL,          -- exclusive or shared
    grp TEXT NOT NULL,           -- compatibility group for shared claims ('' for exclusive)
    checksum TEXT NOT NULL,
    PRIMARY KEY (resource, holder)
);
INSERT INTO meta (key, value) VALUES ('commits', '0')
"""

_V2: Final = """
CREATE TABLE applications (
    attachment TEXT PRIMARY KEY, -- what the coordinator program was asked to apply
    claim TEXT NOT NULL,
    topology TEXT NOT NULL,      -- the topology's metadata.name
    request_json TEXT NOT NULL,  -- the sandbox and the allocated devices, fixed at the first apply
    state TEXT NOT NULL,         -- APPLICATION_STATES
    error TEXT NOT NULL,
    checksum TEXT NOT NULL
)
"""

CALL_COLUMNS: Final = (
    "operation_id",
    "unit",
    "step",
    "plugin",
    "hook",
    "generation",
    "request_json",
    "state",
    "response_json",
    "error",
    "seq",
)

COORDINATOR_JOURNAL: Final = JournalFormat(
    "dra-networkplugins/coordinator-journal",
    (Migration(1, _V1), Migration(2, _V2)),
    {
        "calls": CALL_COLUMNS,
        "units": ("unit", "kind", "topology", "state", "detail_json"),
        "claims": ("resource", "holder", "mode", "grp"),
        "applications": ("attachment", "claim", "topology", "request_json", "state", "error"),
    },
)
"""The coordinator journal's format (the plugin journal's is ``PLUGIN_JOURNAL``)."""

OPEN_CALL_STATES = ("requested", "failed", "pending", "quarantined")
"""``requested``: journaled before the RPC, outcome unknown. ``failed``: the plugin refused a
create (effects it attempted wait for a retry or a cleanup). ``pending`` / ``quarantined``:
a cleanup receipt that is not CLEANED (retry later / an operator must reconcile)."""

CLOSED_CALL_STATES = ("succeeded", "cleaned", "abandoned")
"""``succeeded``: a create's response. ``cleaned``: a cleanup's CLEANED receipt.
``abandoned``: a call that never succeeded, closed by the CLEANED receipt of its step's
cleanup, or because the plugin refused the cleanup and has no record of the step's
creating calls (``abandon_unrun``); the evidence is stored as its response."""


APPLICATION_STATES = ("applying", "applied", "failed", "removing", "removed")
"""What the coordinator program was asked to do with an attachment (docs/coordinator.md):
``applying`` / ``removing`` until the request finished (a restart resumes it), ``failed``
when an apply stopped at a step (a retry or a removal decides), ``applied``, ``removed``."""


class JournalError(NetworkPluginError):
    pass


@dataclass(frozen=True)
class Call:
    operation_id: str
    unit: str
    step: str
    plugin: str
    hook: str
    generation: int
    request: dict[str, Any]
    state: str
    response: dict[str, Any] | None
    error: str | None


@dataclass(frozen=True)
class Application:
    """One attachment the coordinator program was asked to apply, as its journal has it."""

    attachment: str
    claim: str
    topology: str
    request: dict[str, Any]
    state: str
    error: str


@dataclass(frozen=True)
class Claim:
    resource: str
    holder: str
    mode: str
    group: str


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def _call(row: Mapping[str, Any]) -> Call:
    return Call(
        row["operation_id"],
        row["unit"],
        row["step"],
        row["plugin"],
        row["hook"],
        row["generation"],
        json.loads(row["request_json"]),
        row["state"],
        json.loads(row["response_json"]) if row["response_json"] else None,
        row["error"],
    )


def _abandon_open_calls(t: Txn, unit: str, step: str, evidence: dict[str, Any]) -> list[str]:
    """Close every open call of ``unit``'s ``step`` as ``abandoned``, each keeping its
    error and storing its previous state (``was``) and ``evidence`` as its response."""
    closed = []
    for row in t.select("calls", {"unit": unit, "step": step}, order_by="seq"):
        if row["state"] not in OPEN_CALL_STATES:
            continue
        response = {"was": row["state"], **evidence}
        t.put(
            "calls",
            {**row, "state": "abandoned", "response_json": _dumps(response)},
            key=["operation_id"],
        )
        closed.append(row["operation_id"])
    return closed


def _one_call(t: Reader, operation_id: str) -> dict[str, Any] | None:
    rows = t.select("calls", {"operation_id": operation_id})
    return rows[0] if rows else None


class CoordinatorJournal:
    """The coordinator's durable journal; opening it never creates one silently over a lost one.

    ``runtime_dir`` keeps the lease of this boot (see ``plugins.sdk.store``): a journal
    that lost acknowledged commits, was replaced, or whose files are gone is refused
    (``JournalUnavailable``) instead of being served or recreated.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        runtime_dir: Path | None = None,
        faults: StorageFaults = NO_FAULTS,
        writer_wait_s: float = 0.0,
        writer_lock: WriterLock | None = None,
    ) -> None:
        """``writer_wait_s``: how long to wait for another process holding the writer
        lock (a previous coordinator still stopping); ``writer_lock``: the lock, taken
        already by the caller (``plugins.sdk.service.await_writer``)."""
        self.state_dir = state_dir
        self._store = Store.open(
            state_dir,
            runtime_dir=runtime_dir,
            faults=faults,
            journal_format=COORDINATOR_JOURNAL,
            writer_wait_s=writer_wait_s,
            lock=writer_lock,
        )

    @property
    def store(self) -> Store:
        return self._store

    @property
    def commits(self) -> int:
        """Transactions committed by this process (each one fsync)."""
        return self._store.commits

    def close(self) -> None:
        self._store.close()

    def abandon(self) -> None:
        """Simulate a crash of the coordinator: stop without committing anything pending."""
        self._store.abandon()

    def write(self, fn: Callable[[Txn], T]) -> T:
        """One atomic, durable change (``fn`` runs on the writer thread; keep it short)."""
        return self._store.write(fn)

    def read(self, fn: Callable[[Reader], T]) -> T:
        return self._store.read(fn)

    # -- calls ------------------------------------------------------------------------------

    def record_call(self, call: Call) -> None:
        """Record the intent to call a plugin, before the RPC leaves this process.

        A re-send keeps the existing record (same operation id, same seq). A re-send of an
        open call is ``requested`` again: until its response arrives nobody knows its
        outcome. A re-send of a closed call stays closed: the plugin replays it.
        """

        def record(t: Txn) -> None:
            existing = _one_call(t, call.operation_id)
            if existing is not None:
                if existing["state"] in OPEN_CALL_STATES and existing["state"] != "requested":
                    t.put("calls", {**existing, "state": "requested"}, key=["operation_id"])
                return
            row = {
                "operation_id": call.operation_id,
                "unit": call.unit,
                "step": call.step,
                "plugin": call.plugin,
                "hook": call.hook,
                "generation": call.generation,
                "request_json": json.dumps(call.request, sort_keys=True),
                "state": call.state,
                "response_json": None,
                "error": None,
                "seq": t.count("calls") + 1,  # calls are never deleted: count + 1 is new
            }
            t.put("calls", row, key=["operation_id"])

        self.write(record)

    def finish_call(
        self, operation_id: str, state: str, response: Any = None, error: str | None = None
    ) -> None:
        def finish(t: Txn) -> None:
            existing = _one_call(t, operation_id)
            if existing is None:
                raise JournalError(f"call {operation_id} was never recorded")
            t.put(
                "calls",
                {**existing, "state": state, "response_json": _dumps(response), "error": error},
                key=["operation_id"],
            )

        self.write(finish)

    def finish_cleanup(self, operation_id: str, receipt: Any) -> list[str]:
        """Record a CLEANED cleanup receipt and close every open call of its unit and step.

        One transaction: a restart never sees the receipt without the calls it closes.
        Each closed call becomes ``abandoned`` with the evidence (its previous state, the
        cleanup's operation id and receipt) as its response; its error text is kept.
        Returns the operation ids it closed.
        """

        def finish(t: Txn) -> list[str]:
            cleanup = _one_call(t, operation_id)
            if cleanup is None:
                raise JournalError(f"cleanup {operation_id} was never recorded")
            t.put(
                "calls",
                {**cleanup, "state": "cleaned", "response_json": _dumps(receipt), "error": None},
                key=["operation_id"],
            )
            evidence = {"cleanup": operation_id, "receipt": receipt}
            return _abandon_open_calls(t, cleanup["unit"], cleanup["step"], evidence)

        return self.write(finish)

    def abandon_unrun(self, unit: str, step: str, evidence: dict[str, Any]) -> list[str]:
        """Close every open call of ``unit``'s ``step`` as ``abandoned``: the step never ran.

        For a step whose cleanup the plugin refused while it has no record of any call
        of the step that would have created something (``evidence`` names them, the
        cleanup and its refusal). One transaction; each closed call keeps its error and
        stores its previous state and the evidence as its response. Returns the closed ids.
        """

        return self.write(lambda t: _abandon_open_calls(t, unit, step, {"neverRan": evidence}))

    def calls(self, unit: str | None = None) -> list[Call]:
        where = None if unit is None else {"unit": unit}
        return [_call(row) for row in self.read(lambda r: r.select("calls", where, order_by="seq"))]

    def open_call_count(self) -> int:
        """How many calls are open (``OPEN_CALL_STATES``); checksums are not read."""
        return self.read(lambda r: sum(r.count("calls", {"state": s}) for s in OPEN_CALL_STATES))

    def call(self, operation_id: str) -> Call | None:
        row = self.read(lambda r: _one_call(r, operation_id))
        return None if row is None else _call(row)

    # -- units ------------------------------------------------------------------------------

    def set_unit(
        self, unit: str, kind: str, topology: str, state: str, detail: dict[str, Any] | None = None
    ) -> None:
        def put(t: Txn) -> None:
            rows = t.select("units", {"unit": unit})
            # A unit's kind and topology are set when it is first recorded.
            first = rows[0] if rows else {"unit": unit, "kind": kind, "topology": topology}
            t.put(
                "units",
                {**first, "state": state, "detail_json": json.dumps(detail or {}, sort_keys=True)},
                key=["unit"],
            )

        self.write(put)

    def unit(self, unit: str) -> tuple[str, dict[str, Any]] | None:
        rows = self.read(lambda r: r.select("units", {"unit": unit}))
        return None if not rows else (rows[0]["state"], json.loads(rows[0]["detail_json"]))

    def units(self, kind: str, state: str | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
        """Every unit of one kind (in ``state`` only, if given): unit -> (state, detail),
        in unit order."""
        where = {"kind": kind} if state is None else {"kind": kind, "state": state}
        rows = self.read(lambda r: r.select("units", where, order_by="unit"))
        return {r["unit"]: (r["state"], json.loads(r["detail_json"])) for r in rows}

    # -- claims -----------------------------------------------------------------------------

    def claims(self, resource: str | None = None) -> list[Claim]:
        where = None if resource is None else {"resource": resource}
        rows = self.read(lambda r: r.select("claims", where))
        return sorted(
            (Claim(r["resource"], r["holder"], r["mode"], r["grp"]) for r in rows),
            key=lambda c: (c.resource, c.holder),
        )

    # -- applications (the coordinator program's requests) ----------------------------------

    def put_application(self, application: Application) -> None:
        if application.state not in APPLICATION_STATES:
            raise JournalError(
                f"application state {application.state!r} is not one of {APPLICATION_STATES}"
            )
        row = {
            "attachment": application.attachment,
            "claim": application.claim,
            "topology": application.topology,
            "request_json": json.dumps(application.request, sort_keys=True),
            "state": application.state,
            "error": application.error,
        }
        self.write(lambda t: t.put("applications", row, key=["attachment"]))

    def application_counts(self) -> dict[str, int]:
        """How many applications are in each of ``APPLICATION_STATES``."""
        return self.read(
            lambda r: {s: r.count("applications", {"state": s}) for s in APPLICATION_STATES}
        )

    def applications(
        self, attachment: str | None = None, *, claim: str | None = None
    ) -> list[Application]:
        """Every application recorded (removed ones too), or those of ``attachment`` or
        ``claim``: filtered in SQL, so an apply does not decode the whole history."""
        where: dict[str, str] = {}
        if attachment is not None:
            where["attachment"] = attachment
        if claim is not None:
            where["claim"] = claim
        rows = self.read(lambda r: r.select("applications", where or None, order_by="attachment"))
        return [
            Application(
                r["attachment"],
                r["claim"],
                r["topology"],
                json.loads(r["request_json"]),
                r["state"],
                r["error"],
            )
            for r in rows
        ]
