"""The conformance checks over the wire: the same checks as ``conformance.checks`` where
a plugin seen only through its socket and the kernel can be held to them.

Each check takes a ``WireTarget``, builds its own ``WireSession`` (a fresh lab, the
plugin started by its command) and raises ``ConformanceError`` naming what the plugin
got wrong. ``run_wire`` runs them and returns one ``Verdict`` per check; ``python -m
conformance --target FILE`` prints them.

Which checks run where, and why, is ``MODES`` (docs/conformance.md has the table).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from plugins.sdk import CleanupStatus, ConnectResponse, Hook, PreparedState, PrepareRequest
from plugins.sdk.host import PluginCallError, PluginClient

from .checks import GENERIC_BAD_CONFIGS, ConformanceError, NotApplicable, expect
from .target import envelope
from .wire_driver import WireDriverError, WireLabs, WireSession
from .wire_target import WireTarget

BOTH = "in-process and wire"
WIRE_ONLY = "wire only"
IN_PROCESS_ONLY = "in-process only"

MODES: dict[str, tuple[str, str]] = {
    "getinfo-identity": (BOTH, ""),
    "authentication": (BOTH, ""),
    "wrong-step-kind": (BOTH, ""),
    "config-rejections": (BOTH, ""),
    "replay": (BOTH, ""),
    "reused-id": (BOTH, ""),
    "fencing": (BOTH, "over the wire the restart is a SIGKILL of the plugin's process"),
    "repeated-cleanup": (BOTH, ""),
    "foreign-object": (BOTH, ""),
    "concurrent-duplicates": (BOTH, ""),
    "inspect-read-only": (BOTH, "over the wire: no kernel change and an unchanged answer"),
    "kill-and-restart": (
        WIRE_ONLY,
        "a real SIGKILL between calls; in process the crash check covers every boundary",
    ),
    "crash-at-every-boundary": (
        IN_PROCESS_ONLY,
        "its crash points are placed by the SDK's runner inside the service process",
    ),
    "cleanup-without-response": (
        IN_PROCESS_ONLY,
        "needs a crash between the kernel change and the journaled response, "
        "a point only the SDK's runner exposes",
    ),
    "damaged-journal": (
        IN_PROCESS_ONLY,
        "where the journal is and what it looks like is the plugin's own business",
    ),
    "lost-journal": (
        IN_PROCESS_ONLY,
        "where the journal is and what it looks like is the plugin's own business",
    ),
    "external-change": (
        IN_PROCESS_ONLY,
        "the tamper is Python code naming a field the plugin set; a target file has none",
    ),
}


@dataclass(frozen=True)
class Verdict:
    check: str
    outcome: str  # "passed", "failed", "not applicable"
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.outcome == "failed"

    def line(self) -> str:
        mark = {"passed": "PASS", "failed": "FAIL", "not applicable": "SKIP"}[self.outcome]
        return f"{mark}  {self.check}" + (f": {self.detail}" if self.detail else "")


# -- helpers ----------------------------------------------------------------------------------


def _refused(call: Callable[[], Any], code: str, what: str) -> PluginCallError:
    """``call`` must fail with ``code``; the error, for a closer look."""
    try:
        call()
    except PluginCallError as exc:
        expect(exc.code == code, f"{what}: got {exc.code} ({exc.message}), not {code}")
        return exc
    raise ConformanceError(f"{what}: it was served, not refused with {code}")


def _prepare(s: WireSession, client: PluginClient, op: str = "prepare-1") -> PreparedState | None:
    if s.target.operation_only:
        return None
    return client.node_prepare(s.target.prepare(op)).prepared_state


def _connect(
    s: WireSession, client: PluginClient, prepared: PreparedState | None, op: str = "connect-1"
) -> ConnectResponse:
    return client.connect_network(s.target.connect(s.sandbox, prepared, op))


def _cleaned(receipt: Any, what: str) -> None:
    expect(
        receipt.status is CleanupStatus.CLEANED,
        f"{what} was {receipt.status.name}, not CLEANED: {receipt.detail}",
    )


def _teardown(s: WireSession, client: PluginClient) -> None:
    _cleaned(client.remove_network(s.target.remove()), "RemoveNetwork")
    if not s.target.operation_only:
        _cleaned(client.node_unprepare(s.target.unprepare()), "NodeUnprepare")


def _unchanged(s: WireSession, baseline: dict[str, Any], what: str) -> None:
    changes = s.changes_since(baseline)
    expect(changes == [], f"{what}: the host is not as it was: {changes}")


# -- checks -----------------------------------------------------------------------------------


def check_getinfo_identity(target: WireTarget, labs: WireLabs) -> None:
    with WireSession(target, labs) as s:
        info = s.client().get_info()
        expect(info.plugin_name == target.name, f"GetInfo names {info.plugin_name!r}")
        expect(info.contract_version == "v1alpha1", f"contract {info.contract_version!r}")
        expect(info.ready, "GetInfo says not ready after the start")
        expect(target.step_kind in info.step_kinds, f"GetInfo's step kinds: {info.step_kinds}")
        if target.contract_digest is not None:
            expect(
                info.contract_digest == target.contract_digest,
                f"GetInfo's contract digest {info.contract_digest!r} is not the pinned one",
            )
        expect(bool(info.contract_digest), "GetInfo gives no contract digest")
        try:
            named = json.loads(info.descriptor_json).get("name")
        except (ValueError, AttributeError):
            named = None
        expect(named == target.name, f"GetInfo's descriptor names {named!r}")


def check_authentication(target: WireTarget, labs: WireLabs) -> None:
    """A valid connect and removal under a wrong token are refused before anything is
    recorded or changed (the prepare, with the right token, makes the connect valid)."""
    with WireSession(target, labs) as s:
        client = s.client()
        prepared = _prepare(s, client)
        baseline = s.snapshot()
        request = s.target.connect(s.sandbox, prepared, "connect-1")
        removal = s.target.remove()
        for token in ("not-the-token", s.token + "x"):
            wrong = s.client(token)
            _refused(partial(wrong.connect_network, request), "UNAUTHENTICATED", "a wrong token")
            _refused(partial(wrong.remove_network, removal), "UNAUTHENTICATED", "a wrong token")
        for op in ("connect-1", "remove-1"):
            expect(not client.inspect(op, "").found, f"an unauthenticated {op} was recorded")
        _unchanged(s, baseline, "unauthenticated calls")


def check_wrong_step_kind(target: WireTarget, labs: WireLabs) -> None:
    if not target.operation_only:
        raise NotApplicable("an Allocation root has every hook")
    with WireSession(target, labs) as s:
        client = s.client()
        baseline = s.snapshot()
        request = PrepareRequest(envelope(Hook.NODE_PREPARE, "p", "prep-1", "step-1"), None, "{}")
        _refused(lambda: client.node_prepare(request), "FAILED_PRECONDITION", "NodePrepare")
        _refused(
            lambda: client.node_unprepare(target.unprepare()),
            "FAILED_PRECONDITION",
            "NodeUnprepare",
        )
        expect(not client.inspect("p", "").found, "a wrong-step-kind call was recorded")
        _unchanged(s, baseline, "wrong-step-kind calls")


def check_config_rejections(target: WireTarget, labs: WireLabs) -> None:
    """The generic rejection classes and the descriptor's invalid examples, each refused
    with INVALID_ARGUMENT under one operation id that must stay unrecorded."""
    with WireSession(target, labs) as s:
        client = s.client()
        prepared = _prepare(s, client)
        baseline = s.snapshot()
        info = client.get_info()
        try:
            examples = json.loads(info.descriptor_json).get("examples", {}).get("invalid", [])
        except (ValueError, AttributeError):
            examples = []
        cases = [raw for raw, _, _ in GENERIC_BAD_CONFIGS]
        cases += [json.dumps(example["config"]) for example in examples]
        for raw in cases:
            request = target.connect(s.sandbox, prepared, "connect-bad", config_json=raw)
            _refused(
                partial(client.connect_network, request), "INVALID_ARGUMENT", f"config {raw[:60]}"
            )
        expect(not client.inspect("connect-bad", "").found, "a rejected config was recorded")
        _unchanged(s, baseline, "rejected configs")


def check_replay(target: WireTarget, labs: WireLabs) -> None:
    with WireSession(target, labs) as s:
        client = s.client()
        prepared = _prepare(s, client)
        first = _connect(s, client, prepared)
        after = s.snapshot()
        expect(_connect(s, client, prepared) == first, "a retry returned a different response")
        _unchanged(s, after, "a replayed connect")
        _teardown(s, client)


def check_reused_id(target: WireTarget, labs: WireLabs) -> None:
    with WireSession(target, labs) as s:
        client = s.client()
        prepared = _prepare(s, client)
        _connect(s, client, prepared)
        after = s.snapshot()
        changed = target.connect(
            s.sandbox,
            prepared,
            "connect-1",
            interface_names=dict.fromkeys(target.interface_names, "other9"),
        )
        _refused(lambda: client.connect_network(changed), "ALREADY_EXISTS", "a reused operation id")
        _unchanged(s, after, "the rejected reuse")
        _teardown(s, client)


def check_fencing(target: WireTarget, labs: WireLabs) -> None:
    with WireSession(target, labs) as s:
        client = s.client()
        prepared = _prepare(s, client)
        after_prepare = s.snapshot()
        _cleaned(client.remove_network(target.remove()), "removal of a never-connected attachment")
        s.restart_after_kill()  # the fence must be durable, not a memory of the process
        _refused(
            lambda: _connect(s, client, prepared), "ABORTED", "a connect delayed past its removal"
        )
        _unchanged(s, after_prepare, "the fenced connect")
        if not target.operation_only:
            client.node_unprepare(target.unprepare())


def check_repeated_cleanup(target: WireTarget, labs: WireLabs) -> None:
    with WireSession(target, labs) as s:
        client = s.client()
        baseline = s.snapshot()
        _connect(s, client, _prepare(s, client))
        first = client.remove_network(target.remove())
        expect(
            client.remove_network(target.remove()) == first, "a repeated cleanup was not replayed"
        )
        _cleaned(
            client.remove_network(target.remove("remove-2")), "a second cleanup of a clean scope"
        )
        if not target.operation_only:
            client.node_unprepare(target.unprepare())
            _cleaned(client.node_unprepare(target.unprepare("unprepare-2")), "a repeated unprepare")
        _unchanged(s, baseline, "repeated cleanup")


def check_foreign_object(target: WireTarget, labs: WireLabs) -> None:
    with WireSession(target, labs) as s:
        client = s.client()
        prepared = _prepare(s, client)
        s.plant_foreign(target.interface)
        with_foreign = s.snapshot()
        _refused(
            lambda: _connect(s, client, prepared),
            "FAILED_PRECONDITION",
            f"a foreign link named {target.interface} in the sandbox",
        )
        _cleaned(client.remove_network(target.remove()), "cleanup after refusing a foreign object")
        _unchanged(s, with_foreign, "the foreign object or our own state")
        if not target.operation_only:
            client.node_unprepare(target.unprepare())


def check_concurrent_duplicates(target: WireTarget, labs: WireLabs) -> None:
    with WireSession(target, labs) as s:
        client = s.client()
        request = target.connect(s.sandbox, _prepare(s, client), "connect-1")
        results: list[ConnectResponse] = []
        errors: list[BaseException] = []
        go = threading.Barrier(4)

        def call() -> None:
            go.wait(10)
            try:
                results.append(client.connect_network(request))
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
        _teardown(s, client)


def check_inspect_read_only(target: WireTarget, labs: WireLabs) -> None:
    with WireSession(target, labs) as s:
        client = s.client()
        _connect(s, client, _prepare(s, client))
        state = s.snapshot()
        seen = client.inspect("connect-1", "")
        expect(seen.found, "InspectOperation does not find a recorded operation")
        client.inspect("", "att-1")
        expect(not client.inspect("no-such-operation", "").found, "an unknown operation was found")
        expect(client.inspect("connect-1", "") == seen, "reading an operation changed it")
        _unchanged(s, state, "InspectOperation")
        _teardown(s, client)


def _lifecycle(
    s: WireSession, client: PluginClient, answers: list[Any]
) -> list[tuple[str, Callable[[], Any]]]:
    """The hooks of one lifecycle, in order; the connect takes the prepare's answer."""
    target = s.target

    def prepared() -> PreparedState | None:
        return None if target.operation_only else answers[0].prepared_state

    steps: list[tuple[str, Callable[[], Any]]] = []
    if not target.operation_only:
        steps.append(("NodePrepare", lambda: client.node_prepare(target.prepare("prepare-1"))))
    steps.append(("ConnectNetwork", lambda: _connect(s, client, prepared())))
    steps.append(("RemoveNetwork", lambda: client.remove_network(target.remove())))
    if not target.operation_only:
        steps.append(("NodeUnprepare", lambda: client.node_unprepare(target.unprepare())))
    return steps


def check_kill_and_restart(target: WireTarget, labs: WireLabs) -> None:
    """A SIGKILL after each hook of a lifecycle but the last: the acknowledged answer is
    replayed after the restart, the lifecycle finishes, and the host ends as it began.
    Then a clean stop and start keep what was recorded."""
    kills = len(_lifecycle_names(target)) - 1
    for killed_after in range(kills):
        with WireSession(target, labs) as s:
            client = s.client()
            baseline = s.snapshot()
            answers: list[Any] = []
            steps = _lifecycle(s, client, answers)
            for i, (hook, call) in enumerate(steps):
                answers.append(call())
                if i == killed_after:
                    s.restart_after_kill()
                    expect(
                        call() == answers[i], f"after a SIGKILL, {hook}'s retry answered otherwise"
                    )
            for (hook, _), answer in zip(steps, answers, strict=True):
                if hook in ("RemoveNetwork", "NodeUnprepare"):
                    _cleaned(answer, hook)
            _unchanged(s, baseline, f"a lifecycle with a SIGKILL after {steps[killed_after][0]}")
            if killed_after == 0:
                s.stop()
                s.start()
                expect(
                    client.inspect("remove-1", "").found,
                    "after a clean stop and start, the removal is not recorded",
                )


def _lifecycle_names(target: WireTarget) -> list[str]:
    hooks = ["ConnectNetwork", "RemoveNetwork"]
    return hooks if target.operation_only else ["NodePrepare", *hooks, "NodeUnprepare"]


WireCheck = Callable[[WireTarget, WireLabs], None]

WIRE_CHECKS: dict[str, WireCheck] = {
    "getinfo-identity": check_getinfo_identity,
    "authentication": check_authentication,
    "wrong-step-kind": check_wrong_step_kind,
    "config-rejections": check_config_rejections,
    "replay": check_replay,
    "reused-id": check_reused_id,
    "fencing": check_fencing,
    "repeated-cleanup": check_repeated_cleanup,
    "foreign-object": check_foreign_object,
    "concurrent-duplicates": check_concurrent_duplicates,
    "inspect-read-only": check_inspect_read_only,
    "kill-and-restart": check_kill_and_restart,
}


def run_check(target: WireTarget, name: str, labs: WireLabs) -> Verdict:
    """One check's verdict; a failure of the plugin is a verdict, never an exception."""
    try:
        WIRE_CHECKS[name](target, labs)
    except NotApplicable as exc:
        return Verdict(name, "not applicable", str(exc))
    except ConformanceError as exc:
        return Verdict(name, "failed", str(exc))
    except PluginCallError as exc:
        return Verdict(name, "failed", f"a call the check needed failed: {exc}")
    except WireDriverError as exc:
        return Verdict(name, "failed", str(exc))
    return Verdict(name, "passed")


def run_wire(target: WireTarget, checks: Iterable[str] | None = None) -> list[Verdict]:
    """The named checks (None: every wire check), in ``WIRE_CHECKS`` order."""
    names = list(WIRE_CHECKS) if checks is None else list(checks)
    unknown = [n for n in names if n not in WIRE_CHECKS]
    if unknown:
        raise KeyError(f"no wire check {', '.join(unknown)} (known: {', '.join(WIRE_CHECKS)})")
    with WireLabs(target) as labs:
        return [run_check(target, name, labs) for name in names]
