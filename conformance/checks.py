"""The reusable conformance checks. Each takes a ``Target`` and a scratch directory and
raises ``ConformanceError`` (an AssertionError) naming what the plugin got wrong.

Run all of them with ``conformance.run_all(target, workdir)``, or one by name from
``CHECKS``; ``tests/conformance`` parametrizes them over every registration.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from fakekernel.model import diff
from plugins.sdk import (
    Aborted,
    AlreadyExists,
    CleanupStatus,
    ConfigError,
    ConnectResponse,
    DataLoss,
    FailedPrecondition,
    NetworkPluginError,
    PreparedState,
    Unavailable,
    WrongStepKind,
)
from plugins.sdk.host import Host as GrpcHost
from plugins.sdk.host import PluginCallError, PluginClient
from plugins.sdk.runner import CrashPoints, SimulatedCrash

from .node import TargetNode
from .target import LabFactory, Target, envelope, plant_foreign


class ConformanceError(AssertionError):
    pass


class NotApplicable(Exception):
    """The check does not apply to this kind of plugin (e.g. wrong step kind on a root)."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


def _connect(
    node: TargetNode, prepared: PreparedState | None, op: str = "connect-1"
) -> ConnectResponse:
    return node.endpoint.connect_network(node.connect_request(prepared, op))


def _teardown(node: TargetNode) -> None:
    receipt = node.endpoint.remove_network(node.remove())
    expect(
        receipt.status is CleanupStatus.CLEANED,
        f"RemoveNetwork was {receipt.status}: {receipt.detail}",
    )
    if not node.target.operation_only:
        receipt = node.endpoint.node_unprepare(node.unprepare())
        expect(
            receipt.status is CleanupStatus.CLEANED,
            f"NodeUnprepare was {receipt.status}: {receipt.detail}",
        )


def _lifecycle(node: TargetNode) -> None:
    _connect(node, node.prepare())
    _teardown(node)


def _restored(node: TargetNode, baseline: dict[str, Any], what: str) -> None:
    changes = diff(baseline, node.host.kernel.snapshot())
    expect(changes == [], f"{what}: the host is not as it was: {changes}")


# -- checks ---------------------------------------------------------------------------------


def check_getinfo_identity(target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
    node = TargetNode(target, work / "node", make_lab=make_lab)
    host = GrpcHost(work / "sock", "conformance-token")
    try:
        host.start(node.runner.endpoints())
        with PluginClient(host.socket_paths[target.socket], "conformance-token") as client:
            info = client.get_info()
        reg = node.endpoint.registration
        expect(
            info.plugin_name == target.name,
            f"GetInfo names {info.plugin_name!r}, not {target.name!r}",
        )
        expect(
            info.contract_digest == reg.contract_digest,
            "GetInfo's contract digest is not the pinned one",
        )
        expect(info.ready, "GetInfo says not ready after recovery")
        expect(
            json.loads(info.descriptor_json)["name"] == target.name,
            "GetInfo descriptor names another plugin",
        )
    finally:
        host.stop(5)
        node.close()


def check_authentication(target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
    node = TargetNode(target, work / "node", make_lab=make_lab)
    host = GrpcHost(work / "sock", "conformance-token")
    try:
        host.start(node.runner.endpoints())
        baseline = node.host.kernel.snapshot()
        with PluginClient(host.socket_paths[target.socket], "not-the-token") as client:
            try:
                client.connect_network(target.connect(node.host, None, "connect-1"))
            except PluginCallError as exc:
                expect(
                    exc.code == "UNAUTHENTICATED",
                    f"a wrong token got {exc.code}, not UNAUTHENTICATED",
                )
            else:
                raise ConformanceError("a call with a wrong token was served")
        expect(node.journal_rows() == 0, "an unauthenticated call wrote a journal row")
        _restored(node, baseline, "unauthenticated call")
    finally:
        host.stop(5)
        node.close()


def check_wrong_step_kind(target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
    if not target.operation_only:
        raise NotApplicable("an Allocation root has every hook")
    node = TargetNode(target, work / "node", make_lab=make_lab)
    try:
        from plugins.sdk import CleanupRequest, Hook, PrepareRequest

        # The suite's own ids: the target has no claim whose ids it could name.
        request = PrepareRequest(envelope(Hook.NODE_PREPARE, "p", "prep-1", "step-1"), None, "{}")
        unprepare = CleanupRequest(envelope(Hook.NODE_UNPREPARE, "u", "prep-1", "step-1"))
        for call in (
            lambda: node.endpoint.node_prepare(request),
            lambda: node.endpoint.node_unprepare(unprepare),
        ):
            try:
                call()
            except WrongStepKind:
                continue
            raise ConformanceError(
                "a root hook on an Operation plugin did not fail with WrongStepKind"
            )
        expect(node.journal_rows() == 0, "a wrong-step-kind call wrote a journal row")
    finally:
        node.close()


GENERIC_BAD_CONFIGS: list[tuple[str, str, str]] = [
    ("[]", "$", "not-object"),
    ("{", "$", "syntax"),
    ('{"a": 1, "a": 2}', "$.a", "duplicate-key"),
    ("{" + '"x": 0,' * 10000 + '"y": 1}', "$", "max-bytes"),
    ('{"unexpectedKey": 1}', "$.unexpectedKey", "unknown-key"),
]


def check_config_rejections(target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
    """Every generic rejection class, and every invalid example the bundle declares."""
    node = TargetNode(target, work / "node", make_lab=make_lab)
    try:
        baseline = node.host.kernel.snapshot()
        bundle = node.endpoint.registration.bundle
        examples = bundle.invalid_examples if bundle is not None else []
        cases = [
            *GENERIC_BAD_CONFIGS,
            *((json.dumps(c["config"]), c["path"], c["rule"]) for c in examples),
        ]
        for raw, path, rule in cases:
            request = _with_config(target.connect(node.host, None, "connect-bad"), raw)
            try:
                node.endpoint.connect_network(request)
            except ConfigError as exc:
                got = (exc.path, exc.rule)
                # A schema may report a missing required field before the unknown key.
                ok = got == (path, rule) or (rule == "unknown-key" and exc.rule == "required")
                expect(ok, f"config {raw[:60]}: got {got}, want {(path, rule)}")
            else:
                raise ConformanceError(f"config {raw[:60]} was accepted")
        expect(node.journal_rows() == 0, "a rejected config wrote a journal row")
        _restored(node, baseline, "rejected configs")
    finally:
        node.close()


def _with_config(request: Any, raw: str) -> Any:
    import dataclasses

    return dataclasses.replace(request, config_json=raw)


def check_replay(target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
    node = TargetNode(target, work / "node", make_lab=make_lab)
    try:
        prepared = node.prepare()
        first = _connect(node, prepared)
        after = node.host.kernel.snapshot()
        again = _connect(node, prepared)
        expect(again == first, "a retry of the same operation returned a different response")
        _restored(node, after, "a replayed connect changed the host")
        _teardown(node)
    finally:
        node.close()


def check_reused_id(target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
    node = TargetNode(target, work / "node", make_lab=make_lab)
    try:
        prepared = node.prepare()
        _connect(node, prepared)
        rows = node.journal_rows()
        import dataclasses

        request = node.connect_request(prepared, "connect-1")
        changed = dataclasses.replace(request, interface_names={"interface": "other9"})
        try:
            node.endpoint.connect_network(changed)
        except AlreadyExists:
            pass
        else:
            raise ConformanceError("an operation id reused with different semantics was accepted")
        expect(node.journal_rows() == rows, "the rejected reuse wrote a journal row")
        _teardown(node)
    finally:
        node.close()


def check_fencing(target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
    node = TargetNode(target, work / "node", make_lab=make_lab)
    try:
        prepared = node.prepare()
        after_prepare = node.host.kernel.snapshot()
        receipt = node.endpoint.remove_network(node.remove())
        expect(
            receipt.status is CleanupStatus.CLEANED,
            "removal of a never-connected attachment was not CLEANED",
        )
        node.crash()  # the fence must be durable, not a memory of this process
        try:
            _connect(node, prepared)
        except Aborted:
            pass
        else:
            raise ConformanceError("a connect delayed past its removal was executed")
        _restored(node, after_prepare, "fenced connect")
        if not target.operation_only:
            node.endpoint.node_unprepare(node.unprepare())
    finally:
        node.close()


def _reference_points(target: Target, work: Path, make_lab: LabFactory | None) -> list[str]:
    node = TargetNode(target, work / "reference", make_lab=make_lab)
    try:
        _lifecycle(node)
        return list(node.crash_points.reached)
    finally:
        node.close()


def _lifecycle_steps(node: TargetNode) -> list[Callable[[], Any]]:
    """prepare, connect, remove, unprepare (as applicable), sharing one prepared state."""
    target = node.target
    steps: list[Callable[[], Any]] = [
        node.prepare,
        lambda: _connect(node, node.prepared),
        lambda: node.endpoint.remove_network(node.remove()),
    ]
    if not target.operation_only:
        steps.append(lambda: node.endpoint.node_unprepare(node.unprepare()))
    return steps


def check_crash_at_every_boundary(
    target: Target,
    work: Path,
    make_lab: LabFactory | None = None,
    pick: Callable[[list[str]], list[str]] | None = None,
) -> int:
    """Crash at every point of a full lifecycle, restart, finish: the host ends as it began.

    ``pick`` chooses the points to crash at from those the reference reached (None:
    every one); a tier where a run costs seconds passes a seeded sample and prints it."""
    points = _reference_points(target, work, make_lab)
    expect(len(points) > 10, f"only {len(points)} crash points were reached")
    if pick is not None:
        points = pick(points)
        expect(bool(points), "the sample of crash points is empty")
    for i, point in enumerate(points):
        node = TargetNode(
            target, work / f"crash-{i}", crash=CrashPoints(armed=point), make_lab=make_lab
        )
        baseline = node.host.kernel.snapshot()
        try:
            crashed = False
            for step in _lifecycle_steps(node):
                try:
                    step()
                except SimulatedCrash:
                    crashed = True
                    break
            expect(crashed, f"{point} was listed but not reached")
            node.crash()
            _teardown(node)
            _restored(node, baseline, f"crash at {point}")
        finally:
            node.close()
    return len(points)


def check_cleanup_without_response(
    target: Target, work: Path, make_lab: LabFactory | None = None
) -> None:
    point = "ConnectNetwork/connect-1/-/response.before-commit"
    node = TargetNode(target, work / "node", crash=CrashPoints(armed=point), make_lab=make_lab)
    try:
        baseline = node.host.kernel.snapshot()
        prepared = node.prepare()
        try:
            _connect(node, prepared)
        except SimulatedCrash:
            pass
        else:
            raise ConformanceError(f"{point} was not reached")
        node.crash()
        _teardown(node)
        _restored(node, baseline, "cleanup without the original response")
    finally:
        node.close()


def check_repeated_cleanup(target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
    node = TargetNode(target, work / "node", make_lab=make_lab)
    try:
        baseline = node.host.kernel.snapshot()
        _connect(node, node.prepare())
        first = node.endpoint.remove_network(node.remove())
        expect(
            node.endpoint.remove_network(node.remove()) == first,
            "a repeated cleanup was not replayed",
        )
        other = node.endpoint.remove_network(node.remove(op="remove-2"))
        expect(
            other.status is CleanupStatus.CLEANED,
            "a second cleanup of a clean scope was not CLEANED",
        )
        if not target.operation_only:
            node.endpoint.node_unprepare(node.unprepare())
            again = node.endpoint.node_unprepare(node.unprepare(op="unprepare-2"))
            expect(again.status is CleanupStatus.CLEANED, "a repeated unprepare was not CLEANED")
        _restored(node, baseline, "repeated cleanup")
    finally:
        node.close()


def check_foreign_object(target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
    node = TargetNode(target, work / "node", make_lab=make_lab)
    try:
        prepared = node.prepare()
        plant_foreign(node.host, target.interface)
        with_foreign = node.host.kernel.snapshot()
        try:
            _connect(node, prepared)
        except FailedPrecondition:
            pass
        else:
            raise ConformanceError(f"a foreign link named {target.interface} was adopted")
        receipt = node.endpoint.remove_network(node.remove())
        expect(
            receipt.status is CleanupStatus.CLEANED,
            f"cleanup after refusing a foreign object: {receipt}",
        )
        _restored(node, with_foreign, "the foreign object or our own state")
        if not target.operation_only:
            node.endpoint.node_unprepare(node.unprepare())
    finally:
        node.close()


def check_damaged_journal(target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
    node = TargetNode(target, work / "node", make_lab=make_lab)
    try:
        _connect(node, node.prepare())
        node.stop()
        db = node.state_dir / "journal.db"
        for sidecar in ("journal.db-wal", "journal.db-shm"):
            (db.parent / sidecar).unlink(missing_ok=True)
        with db.open("r+b") as f:
            f.write(b"definitely not sqlite")
        attached = node.host.kernel.snapshot()
        node.start()
        expect(not node.endpoint.info().ready, "a service with a corrupt journal reports ready")
        try:
            node.endpoint.remove_network(node.remove())
        except DataLoss:
            pass  # permanent: "retry later" (UNAVAILABLE) would be a lie
        except Unavailable as exc:
            raise ConformanceError(
                f"a corrupt journal was reported as transient (UNAVAILABLE): {exc}"
            ) from exc
        else:
            raise ConformanceError("a cleanup was answered from a corrupt journal")
        _restored(node, attached, "a corrupt journal")
        expect(
            (node.state_dir / "journal.db").read_bytes().startswith(b"definitely not sqlite"),
            "the corrupt journal was recreated",
        )
    finally:
        node.close()


def check_lost_journal(target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
    """Journal files and lease both gone: what the node still holds is never called CLEANED.

    The journal's silence proves nothing here; only the node can. Whatever the plugin
    left in the kernel for the attachment must make the cleanup QUARANTINED (or PENDING)
    and stay untouched.
    """
    node = TargetNode(target, work / "node", make_lab=make_lab)
    try:
        _connect(node, node.prepare())
        node.stop()
        for name in ("journal.db", "journal.db-wal", "journal.db-shm", "journal.id"):
            (node.state_dir / name).unlink(missing_ok=True)
        attached = node.host.kernel.snapshot()
        node.start()  # a fresh journal: nothing told it a journal existed before
        receipt = node.endpoint.remove_network(node.remove())
        expect(
            receipt.status is not CleanupStatus.CLEANED,
            "a lost journal's attachment was reported CLEANED while its objects exist: "
            f"{receipt.detail}",
        )
        _restored(node, attached, "a cleanup answered from a lost journal")
    finally:
        node.close()


def check_concurrent_duplicates(
    target: Target, work: Path, make_lab: LabFactory | None = None
) -> None:
    node = TargetNode(target, work / "node", make_lab=make_lab)
    try:
        prepared = node.prepare()
        request = node.connect_request(prepared, "connect-1")
        results: list[Any] = []
        errors: list[BaseException] = []
        go = threading.Barrier(4)

        def call() -> None:
            go.wait(10)
            try:
                results.append(node.endpoint.connect_network(request))
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
        _teardown(node)
    finally:
        node.close()


def check_inspect_read_only(target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
    node = TargetNode(target, work / "node", make_lab=make_lab)
    try:
        _connect(node, node.prepare())
        assert node.store is not None
        commits, state = node.store.commits, node.host.kernel.snapshot()
        seen = node.endpoint.inspect("connect-1", "")
        expect(seen.found, "InspectOperation does not find a recorded operation")
        node.endpoint.inspect("", node.connect_request(node.prepared).envelope.scope)
        node.endpoint.inspect("no-such-operation", "")
        expect(node.store.commits == commits, "InspectOperation wrote to the journal")
        _restored(node, state, "InspectOperation")
        _teardown(node)
    finally:
        node.close()


def check_external_change(target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
    """A field we set, changed by someone else, is quarantined on cleanup, never overwritten."""
    if target.tamper is None:
        raise NotApplicable("the target declares no field an administrator could change under it")
    node = TargetNode(target, work / "node", make_lab=make_lab)
    try:
        _connect(node, node.prepare())
        node.endpoint.remove_network(node.remove())
        target.tamper(node.host)
        tampered = node.host.kernel.snapshot()
        receipt = (
            node.endpoint.node_unprepare(node.unprepare()) if not target.operation_only else None
        )
        if receipt is not None:
            expect(
                receipt.status is CleanupStatus.QUARANTINED,
                f"cleanup over an externally changed field was {receipt.status}, not QUARANTINED",
            )
        _restored(node, tampered, "the externally changed state")
    finally:
        node.close()


class Check(Protocol):
    """A check: a target, a scratch directory, and the factory of the labs it builds its
    hosts on (None: the fake kernel model)."""

    def __call__(self, target: Target, work: Path, make_lab: LabFactory | None = None) -> Any: ...


CHECKS: dict[str, Check] = {
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
}


def run_all(target: Target, work: Path, make_lab: LabFactory | None = None) -> dict[str, str]:
    """Every check (each host a new lab from ``make_lab``; None: the fake kernel model);
    returns check -> "passed" / "not applicable: ..." (failures raise)."""
    verdicts = {}
    for name, check in CHECKS.items():
        try:
            check(target, work / name, make_lab)
            verdicts[name] = "passed"
        except NotApplicable as exc:
            verdicts[name] = f"not applicable: {exc}"
    return verdicts


__all__ = [
    "CHECKS",
    "Check",
    "ConformanceError",
    "NetworkPluginError",
    "NotApplicable",
    "run_all",
]
