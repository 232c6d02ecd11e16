"""The conformance checks, each written once against a ``Driver`` (``conformance.driver``).

Each check opens its own sessions (a fresh host and the plugin on it) and raises
``ConformanceError`` naming what the plugin got wrong, or ``NotApplicable`` saying why it
does not apply. ``SUITE`` lists them in order; ``conformance.checks`` runs them in
process over a ``Target``, ``conformance.wire_checks`` over the wire from a target file.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from plugins.sdk import CleanupStatus, ConnectResponse

from .driver import (
    Boundary,
    ConformanceError,
    Driver,
    NotApplicable,
    PluginUnderTest,
    Refused,
    expect,
)

GENERIC_BAD_CONFIGS: list[tuple[str, str, str]] = [
    ("[]", "$", "not-object"),
    ("{", "$", "syntax"),
    ('{"a": 1, "a": 2}', "$.a", "duplicate-key"),
    ("{" + '"x": 0,' * 10000 + '"y": 1}', "$", "max-bytes"),
    ('{"unexpectedKey": 1}', "$.unexpectedKey", "unknown-key"),
]


# -- helpers --------------------------------------------------------------------------------


def refused(call: Callable[[], Any], code: str, what: str, served: str | None = None) -> Refused:
    """``call`` must be refused with ``code``; the refusal, for a closer look. ``served``:
    what to say if it was served (default: ``what`` and that it was)."""
    try:
        call()
    except Refused as exc:
        expect(exc.code == code, f"{what}: got {exc.code} ({exc.message}), not {code}")
        return exc
    raise ConformanceError(served or f"{what}: it was served, not refused with {code}")


def cleaned(receipt: Any, what: str) -> None:
    expect(
        receipt.status is CleanupStatus.CLEANED,
        f"{what} was {receipt.status.name}, not CLEANED: {receipt.detail}",
    )


def teardown(put: PluginUnderTest) -> None:
    cleaned(put.remove(), "RemoveNetwork")
    if not put.operation_only:
        cleaned(put.unprepare(), "NodeUnprepare")


def unchanged(put: PluginUnderTest, baseline: dict[str, Any], what: str) -> None:
    changes = put.changes_since(baseline)
    expect(changes == [], f"{what}: the host is not as it was: {changes}")


def unrecorded(put: PluginUnderTest, rows: int | None, ops: tuple[str, ...], what: str) -> None:
    """Nothing was recorded since ``rows`` journal rows (where the driver sees the
    journal), and no operation of ``ops`` is known to InspectOperation."""
    if rows is not None:
        expect(put.journal_rows() == rows, f"{what} wrote a journal row")
    for op in ops:
        expect(not put.inspect(op).found, f"{what} was recorded ({op})")


@contextmanager
def connected(driver: Driver) -> Iterator[PluginUnderTest]:
    """A session whose attachment is connected (after its NodePrepare, where it has one)."""
    with driver.session("node") as put:
        put.prepare()
        put.connect()
        yield put


def lifecycle(put: PluginUnderTest) -> list[tuple[str, Callable[[], Any]]]:
    """The hooks of one lifecycle, in order, sharing the session's prepared state."""
    steps: list[tuple[str, Callable[[], Any]]] = []
    if not put.operation_only:
        steps.append(("NodePrepare", put.prepare))
    steps.append(("ConnectNetwork", put.connect))
    steps.append(("RemoveNetwork", put.remove))
    if not put.operation_only:
        steps.append(("NodeUnprepare", put.unprepare))
    return steps


# -- checks ---------------------------------------------------------------------------------


def check_getinfo_identity(driver: Driver) -> None:
    with driver.session("node") as put:
        info = put.get_info()
        expect(
            info.plugin_name == put.name, f"GetInfo names {info.plugin_name!r}, not {put.name!r}"
        )
        expect(info.contract_version == "v1alpha1", f"contract {info.contract_version!r}")
        expect(info.ready, "GetInfo says not ready after the start")
        kind = "Operation" if put.operation_only else "Allocation"
        expect(
            kind in {str(getattr(k, "value", k)) for k in info.step_kinds},
            f"GetInfo's step kinds: {info.step_kinds}",
        )
        expect(bool(info.contract_digest), "GetInfo gives no contract digest")
        pinned = put.pinned_digest()
        if pinned is not None:
            expect(
                info.contract_digest == pinned,
                f"GetInfo's contract digest {info.contract_digest!r} is not the pinned one",
            )
        try:
            named = json.loads(info.descriptor_json).get("name")
        except (ValueError, AttributeError):
            named = None
        expect(named == put.name, f"GetInfo's descriptor names {named!r}")


def check_authentication(driver: Driver) -> None:
    """A valid connect and removal under a wrong token are refused before anything is
    recorded or changed (the prepare, with the right token, makes the connect valid)."""
    with driver.session("node") as put:
        put.prepare()
        baseline, rows = put.snapshot(), put.journal_rows()
        for token in put.wrong_tokens():
            refused(partial(put.connect, token=token), "UNAUTHENTICATED", "a wrong token")
            refused(partial(put.remove, token=token), "UNAUTHENTICATED", "a wrong token")
        unrecorded(put, rows, ("connect-1", "remove-1"), "an unauthenticated call")
        unchanged(put, baseline, "unauthenticated calls")


def check_wrong_step_kind(driver: Driver) -> None:
    if not driver.operation_only:
        raise NotApplicable("an Allocation root has every hook")
    with driver.session("node") as put:
        baseline = put.snapshot()
        rows = put.journal_rows()
        refused(partial(put.prepare_without_claim, "p"), "FAILED_PRECONDITION", "NodePrepare")
        refused(put.unprepare, "FAILED_PRECONDITION", "NodeUnprepare")
        unrecorded(put, rows, ("p",), "a wrong-step-kind call")
        unchanged(put, baseline, "wrong-step-kind calls")


def check_config_rejections(driver: Driver) -> None:
    """Every generic rejection class and every invalid example the plugin's descriptor
    declares, refused with INVALID_ARGUMENT (and, where the driver sees them, the path and
    rule) under one operation id that stays unrecorded."""
    with driver.session("node") as put:
        put.prepare()
        baseline, rows = put.snapshot(), put.journal_rows()
        for raw, path, rule in [*GENERIC_BAD_CONFIGS, *put.invalid_configs()]:
            exc = refused(
                partial(put.connect, "connect-bad", config_json=raw),
                "INVALID_ARGUMENT",
                f"config {raw[:60]}",
            )
            if exc.config is not None:
                # A schema may report a missing required field before the unknown key.
                ok = exc.config == (path, rule) or (
                    rule == "unknown-key" and exc.config[1] == "required"
                )
                expect(ok, f"config {raw[:60]}: got {exc.config}, want {(path, rule)}")
        unrecorded(put, rows, ("connect-bad",), "a rejected config")
        unchanged(put, baseline, "rejected configs")


def check_replay(driver: Driver) -> None:
    with driver.session("node") as put:
        put.prepare()
        first = put.connect()
        after = put.snapshot()
        expect(
            put.connect() == first, "a retry of the same operation returned a different response"
        )
        unchanged(put, after, "a replayed connect")
        teardown(put)


def check_reused_id(driver: Driver) -> None:
    with connected(driver) as put:
        after, rows = put.snapshot(), put.journal_rows()
        refused(
            lambda: put.connect(interface_names={"interface": "other9"}),
            "ALREADY_EXISTS",
            "an operation id reused with different semantics",
        )
        unrecorded(put, rows, (), "the rejected reuse")
        unchanged(put, after, "the rejected reuse")
        teardown(put)


def check_fencing(driver: Driver) -> None:
    with driver.session("node") as put:
        put.prepare()
        after_prepare = put.snapshot()
        cleaned(put.remove(), "removal of a never-connected attachment")
        put.kill_and_restart()  # the fence must be durable, not a memory of the process
        refused(
            put.connect,
            "ABORTED",
            "a connect delayed past its removal",
            "a connect delayed past its removal was executed",
        )
        unchanged(put, after_prepare, "the fenced connect")
        if not put.operation_only:
            put.unprepare()


def check_kill_and_restart(driver: Driver) -> None:
    """A crash between calls after each hook of a lifecycle but the last: the
    acknowledged answer is replayed after the restart, the lifecycle finishes, and the
    host ends as it began. Then a clean stop and start keep what was recorded."""
    hooks = 2 if driver.operation_only else 4
    for killed_after in range(hooks - 1):
        with driver.session(f"kill-{killed_after}") as put:
            baseline = put.snapshot()
            steps = lifecycle(put)
            answers = []
            for i, (hook, call) in enumerate(steps):
                answers.append(call())
                if i == killed_after:
                    put.kill_and_restart()
                    expect(
                        call() == answers[i], f"after a crash, {hook}'s retry answered otherwise"
                    )
            for (hook, _), answer in zip(steps, answers, strict=True):
                if hook in ("RemoveNetwork", "NodeUnprepare"):
                    cleaned(answer, hook)
            unchanged(put, baseline, f"a lifecycle with a crash after {steps[killed_after][0]}")
            if killed_after == 0:
                put.stop()
                put.start()
                expect(
                    put.inspect("remove-1").found,
                    "after a clean stop and start, the removal is not recorded",
                )


def check_crash_at_every_boundary(
    driver: Driver, pick: Callable[[list[Any]], list[Any]] | None = None
) -> int:
    """Crash at every boundary of a full lifecycle the driver can reach, restart, clean
    up: the host ends as it began. Returns the number of crash runs.

    In process the boundaries are the runner's crash points a reference lifecycle
    reached (``pick``: a seeded sample of them, for a tier where a run costs seconds);
    over the wire, each kernel call the plugin makes (a SIGKILL while its answer is
    held), found by the runs themselves."""
    plan = driver.crash_plan(pick)
    runs = 0
    for arm in plan:
        with driver.session(f"crash-{runs}", crash=arm) as put:
            baseline = put.snapshot()
            where: Boundary | None = None
            for hook, call in lifecycle(put):
                where = put.crashing(hook, call)
                if where is not None:
                    break
            plan.reached(arm, where)
            if where is None:
                continue  # the run found no boundary left; it cleaned up as it went
            runs += 1
            put.recover()
            try:
                teardown(put)
            except (ConformanceError, Refused) as exc:
                raise ConformanceError(f"crash at {where}: {exc}") from exc
            unchanged(put, baseline, f"crash at {where}")
    plan.done()
    return runs


def check_cleanup_without_response(driver: Driver) -> None:
    """A crash after the connect changed the host, before its answer: the caller never
    learns what happened, yet the cleanup of the attachment restores the host."""
    with driver.session("node", crash=driver.response_lost("ConnectNetwork")) as put:
        baseline = put.snapshot()
        put.prepare()
        where = put.crashing("ConnectNetwork", put.connect)
        expect(where is not None, "the connect's last change before its answer was not reached")
        put.recover()
        teardown(put)
        unchanged(put, baseline, "cleanup without the original response")


def check_repeated_cleanup(driver: Driver) -> None:
    with driver.session("node") as put:
        baseline = put.snapshot()
        put.prepare()
        put.connect()
        first = put.remove()
        expect(put.remove() == first, "a repeated cleanup was not replayed")
        cleaned(put.remove("remove-2"), "a second cleanup of a clean scope")
        if not put.operation_only:
            put.unprepare()
            cleaned(put.unprepare("unprepare-2"), "a repeated unprepare")
        unchanged(put, baseline, "repeated cleanup")


def check_foreign_object(driver: Driver) -> None:
    with driver.session("node") as put:
        put.prepare()
        put.plant_foreign(put.interface)
        with_foreign = put.snapshot()
        refused(
            put.connect,
            "FAILED_PRECONDITION",
            f"a foreign link named {put.interface} in the sandbox",
            f"a foreign link named {put.interface} was adopted",
        )
        cleaned(put.remove(), "cleanup after refusing a foreign object")
        unchanged(put, with_foreign, "the foreign object or our own state")
        if not put.operation_only:
            put.unprepare()


def check_damaged_journal(driver: Driver) -> None:
    """A journal overwritten with garbage: the plugin starts, says it is not ready, answers
    a cleanup with DATA_LOSS (permanent; UNAVAILABLE would be a lie), changes nothing and
    keeps the damaged file for an operator."""
    with connected(driver) as put:
        put.stop()
        put.damage_journal()
        attached = put.snapshot()
        put.start(ready=False)
        expect(not put.get_info().ready, "a service with a corrupt journal reports ready")
        try:
            answer = put.remove()
        except Refused as exc:
            expect(exc.code != "UNAVAILABLE", f"a corrupt journal was reported as transient: {exc}")
            expect(exc.code == "DATA_LOSS", f"a corrupt journal was reported as {exc}")
        else:
            raise ConformanceError(f"a cleanup was answered from a corrupt journal: {answer}")
        unchanged(put, attached, "a corrupt journal")
        expect(put.journal_still_damaged(), "the corrupt journal was recreated")


def check_lost_journal(driver: Driver) -> None:
    """Journal files and lease both gone: what the node still holds is never called CLEANED.

    The journal's silence proves nothing here; only the node can. Whatever the plugin
    left in the kernel for the attachment must make the cleanup QUARANTINED (or PENDING)
    and stay untouched."""
    with connected(driver) as put:
        put.stop()
        put.lose_journal()
        attached = put.snapshot()
        # Ready with a fresh journal, or not ready because it knows one was lost (the
        # SDK's service remembers the commits a journal acknowledged in this boot).
        put.start(ready=False)
        try:
            receipt = put.remove()
        except Refused:
            pass  # refused: not called CLEANED either
        else:
            expect(
                receipt.status is not CleanupStatus.CLEANED,
                "a lost journal's attachment was reported CLEANED while its objects exist: "
                f"{receipt.detail}",
            )
        unchanged(put, attached, "a cleanup answered from a lost journal")


def check_concurrent_duplicates(driver: Driver) -> None:
    with driver.session("node") as put:
        put.prepare()
        results: list[ConnectResponse] = []
        errors: list[BaseException] = []
        go = threading.Barrier(4)

        def call() -> None:
            go.wait(10)
            try:
                results.append(put.connect())
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=call) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        expect(not errors, f"concurrent duplicates failed: {errors}")
        expect(
            len(results) == 4 and all(r == results[0] for r in results),
            "duplicates got different responses",
        )
        teardown(put)


def check_inspect_read_only(driver: Driver) -> None:
    with connected(driver) as put:
        state, commits = put.snapshot(), put.journal_commits()
        seen = put.inspect("connect-1")
        expect(seen.found, "InspectOperation does not find a recorded operation")
        put.inspect("", put.attachment_scope)
        expect(not put.inspect("no-such-operation").found, "an unknown operation was found")
        expect(put.inspect("connect-1") == seen, "reading an operation changed it")
        expect(put.journal_commits() == commits, "InspectOperation wrote to the journal")
        unchanged(put, state, "InspectOperation")
        teardown(put)


def check_external_change(driver: Driver) -> None:
    """A field we set, changed by someone else, is quarantined on cleanup, never overwritten.

    The cleanup may still put back what the administrator did not touch (an MTU the
    plugin changed), but only to what it was before the plugin came: every field it
    changes after the administrator's change ends as it began, and none of the
    administrator's fields changes at all."""
    if not driver.has_tamper:
        raise NotApplicable("the target declares no field an administrator could change under it")
    with driver.session("node") as put:
        began = put.snapshot()
        put.prepare()
        put.connect()
        put.remove()
        before = put.snapshot()
        put.tamper()
        tampered = put.snapshot()
        if not put.operation_only:
            receipt = put.unprepare()
            expect(
                receipt.status is CleanupStatus.QUARANTINED,
                f"cleanup over an externally changed field was {receipt.status}, not QUARANTINED",
            )
        start, admin, end = leaves(began), leaves(tampered), leaves(put.snapshot())
        changed_by_admin = {p for p, v in admin.items() if leaves(before).get(p) != v}
        expect(bool(changed_by_admin), "the tamper changed nothing the host shows")
        for path in sorted(set(admin) | set(end), key=str):
            if end.get(path) == admin.get(path):
                continue
            where = "/".join(map(str, path))
            expect(
                path not in changed_by_admin,
                f"the externally changed state was overwritten: {where}: "
                f"{admin.get(path)!r} -> {end.get(path)!r}",
            )
            expect(
                end.get(path) == start.get(path),
                f"the externally changed state: the cleanup set {where} to {end.get(path)!r}, "
                f"neither what the administrator left ({admin.get(path)!r}) nor what it was "
                f"({start.get(path)!r})",
            )


LIST_KEYS = ("id", "pci", "path", "vf_index")
"""What names an element of a snapshot's list (a link, a PF, a namespace, a VF)."""


def leaves(value: Any, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], Any]:
    """A snapshot as {path: value} of its scalars, list elements named by their key."""
    out: dict[tuple[Any, ...], Any] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            out |= leaves(item, (*path, key))
    elif isinstance(value, list) and value and all(isinstance(i, dict) for i in value):
        for position, item in enumerate(value):
            key = next((f"{k}={item[k]}" for k in LIST_KEYS if k in item), position)
            out |= leaves(item, (*path, key))
    else:
        out[path] = value
    return out


SuiteCheck = Callable[[Driver], Any]

SUITE: dict[str, SuiteCheck] = {
    "getinfo-identity": check_getinfo_identity,
    "authentication": check_authentication,
    "wrong-step-kind": check_wrong_step_kind,
    "config-rejections": check_config_rejections,
    "replay": check_replay,
    "reused-id": check_reused_id,
    "fencing": check_fencing,
    "crash-at-every-boundary": check_crash_at_every_boundary,
    "cleanup-without-response": check_cleanup_without_response,
    "repeated-cleanup": check_repeated_cleanup,
    "foreign-object": check_foreign_object,
    "damaged-journal": check_damaged_journal,
    "lost-journal": check_lost_journal,
    "concurrent-duplicates": check_concurrent_duplicates,
    "inspect-read-only": check_inspect_read_only,
    "external-change": check_external_change,
    "kill-and-restart": check_kill_and_restart,
}
