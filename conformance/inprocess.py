"""The in-process driver: a Python plugin's registration (a ``Target``) run by the SDK's
runner in this process, on a host of ``make_lab`` (default: the fake kernel model).

Crashes are the runner's crash points (``plugins.sdk.runner.CrashPoints``), armed one
per run at a point a reference lifecycle reached; the journal is the runner's own files
in the node's state directory.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fakekernel.model import diff
from plugins.sdk import (
    CleanupRequest,
    CleanupResponse,
    ConfigError,
    ConnectResponse,
    EndpointInfo,
    Hook,
    InspectResponse,
    NetworkPluginError,
    PreparedState,
    PrepareRequest,
)
from plugins.sdk.host import Host as GrpcHost
from plugins.sdk.host import PluginCallError, PluginClient
from plugins.sdk.runner import CrashPoint, CrashPoints, Phase, PhaseKind, SimulatedCrash

from .driver import Boundary, CrashArm, NotApplicable, Refused, TargetIdentity, expect
from .node import TargetNode
from .suite import lifecycle
from .target import LabFactory, Target, envelope, plant_foreign

TOKEN = "conformance-token"
JOURNAL_FILES = ("journal.db", "journal.db-wal", "journal.db-shm")
LEASE = "journal.id"
GARBAGE = b"definitely not sqlite"
MIN_CRASH_POINTS = 10
"""A lifecycle of fewer points than this is not journaling its steps."""


def _refusal(exc: NetworkPluginError | PluginCallError) -> Refused:
    if isinstance(exc, PluginCallError):
        return Refused(exc.code, exc.message)
    config = (exc.path, exc.rule) if isinstance(exc, ConfigError) else None
    return Refused(exc.code.value, exc.message, config)


class InProcessPlugin(TargetIdentity):
    """One session: a ``TargetNode`` (a fresh host, the target's service in this process)."""

    target: Target

    def __init__(self, target: Target, node: TargetNode, crash: CrashArm | None) -> None:
        self.target = target
        self.node = node
        self.armed = crash
        self.prepared: PreparedState | None = None
        self._host: GrpcHost | None = None
        self._served: object = None  # the runner the socket host serves
        self._sockets = Path(tempfile.mkdtemp(prefix="conf-", dir="/tmp"))  # short: a socket path

    @property
    def attachment_scope(self) -> str:
        return self.node.connect_request(self.prepared).envelope.scope

    # -- calls -----------------------------------------------------------------------------

    def _call(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except NetworkPluginError as exc:
            raise _refusal(exc) from exc

    def _client(self, token: str) -> PluginClient:
        """A client of the service's socket (served by a host of the current runner: a
        restart makes a new one)."""
        if self._host is None or self._served is not self.node.runner:
            self._stop_host()
            self._host = GrpcHost(self._sockets, TOKEN)
            self._host.start(self.node.runner.endpoints())
            self._served = self.node.runner
        return PluginClient(self._host.socket_paths[self.target.socket], token)

    def _over_socket(self, token: str, call: Callable[[PluginClient], Any]) -> Any:
        with self._client(token) as client:
            try:
                return call(client)
            except PluginCallError as exc:
                raise _refusal(exc) from exc

    def _stop_host(self) -> None:
        if self._host is not None:
            self._host.stop(5)
            self._host = None

    def get_info(self) -> EndpointInfo:
        info: EndpointInfo = self._over_socket(TOKEN, lambda c: c.get_info())
        return info

    def pinned_digest(self) -> str | None:
        return self.node.endpoint.registration.contract_digest

    def invalid_configs(self) -> list[tuple[str, str, str]]:
        bundle = self.node.endpoint.registration.bundle
        examples = bundle.invalid_examples if bundle is not None else []
        return [(json.dumps(c["config"]), c["path"], c["rule"]) for c in examples]

    def prepare(self, op: str = "prepare-1") -> PreparedState | None:
        self.prepared = self._call(lambda: self.node.prepare(op))
        return self.prepared

    def prepare_without_claim(self, op: str) -> Any:
        # The suite's own ids: an Operation target has no claim whose ids it could name.
        request = PrepareRequest(envelope(Hook.NODE_PREPARE, op, "prep-1", "step-1"), None, "{}")
        return self._call(lambda: self.node.endpoint.node_prepare(request))

    def connect(
        self,
        op: str = "connect-1",
        *,
        config_json: str | None = None,
        interface_names: dict[str, str] | None = None,
        token: str | None = None,
    ) -> ConnectResponse:
        request = self.node.connect_request(self.prepared, op)
        if config_json is not None:
            request = dataclasses.replace(
                self.target.connect(self.node.host, self.prepared, op), config_json=config_json
            )
        if interface_names is not None:
            request = dataclasses.replace(request, interface_names=interface_names)
        if token is not None:
            sent = request
            response: ConnectResponse = self._over_socket(token, lambda c: c.connect_network(sent))
            return response
        final = request
        return self._call(lambda: self.node.endpoint.connect_network(final))  # type: ignore[no-any-return]

    def remove(self, op: str = "remove-1", *, token: str | None = None) -> CleanupResponse:
        request = self.node.remove(op)
        if token is not None:
            response: CleanupResponse = self._over_socket(
                token, lambda c: c.remove_network(request)
            )
            return response
        return self._call(lambda: self.node.endpoint.remove_network(request))  # type: ignore[no-any-return]

    def unprepare(self, op: str = "unprepare-1") -> CleanupResponse:
        if self.operation_only:  # the suite's own ids, as in prepare_without_claim
            request = CleanupRequest(envelope(Hook.NODE_UNPREPARE, op, "prep-1", "step-1"))
        else:
            request = self.node.unprepare(op)
        return self._call(lambda: self.node.endpoint.node_unprepare(request))  # type: ignore[no-any-return]

    def inspect(self, operation_id: str, scope: str = "") -> InspectResponse:
        return self._call(lambda: self.node.endpoint.inspect(operation_id, scope))  # type: ignore[no-any-return]

    def wrong_tokens(self) -> list[str]:
        return ["not-the-token", TOKEN + "x"]

    # -- the journal as the runner keeps it -------------------------------------------------

    def journal_rows(self) -> int | None:
        return self.node.journal_rows()

    def journal_commits(self) -> int | None:
        store = self.node.store
        return None if store is None else store.commits

    def damage_journal(self) -> None:
        db = self.node.state_dir / JOURNAL_FILES[0]
        for companion in JOURNAL_FILES[1:]:
            (db.parent / companion).unlink(missing_ok=True)
        with db.open("r+b") as f:
            f.write(GARBAGE)

    def journal_still_damaged(self) -> bool:
        return (self.node.state_dir / JOURNAL_FILES[0]).read_bytes().startswith(GARBAGE)

    def lose_journal(self) -> None:
        for name in (*JOURNAL_FILES, LEASE):
            (self.node.state_dir / name).unlink(missing_ok=True)

    # -- the service ---------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop_host()
        self.node.stop()

    def start(self, *, ready: bool = True) -> None:
        self.node.start()
        if ready:
            expect(self.node.endpoint.info().ready, f"{self.name} is not ready after a start")

    def kill_and_restart(self) -> None:
        self._stop_host()
        self.node.crash()

    def crashing(self, hook: str, call: Callable[[], Any]) -> Boundary | None:
        try:
            call()
        except SimulatedCrash:
            return Boundary(hook, "" if self.armed is None else str(self.armed))
        return None

    def recover(self) -> None:
        self._stop_host()
        self.node.crash()  # abandon what the crashed service held; recovery runs

    # -- the host --------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return self.node.host.kernel.snapshot()

    def changes_since(self, baseline: dict[str, Any]) -> list[Any]:
        return list(diff(baseline, self.snapshot()))

    def plant_foreign(self, name: str) -> None:
        plant_foreign(self.node.host, name)

    def tamper(self) -> None:
        if self.target.tamper is None:
            raise NotApplicable("the target declares no field an administrator could change")
        self.target.tamper(self.node.host)

    def close(self) -> None:
        try:
            self._stop_host()
        finally:
            shutil.rmtree(self._sockets, ignore_errors=True)
            self.node.close()


class ReferencePoints:
    """The crash points a reference lifecycle reached, each crashed at once (in order)."""

    def __init__(self, points: list[Any]) -> None:
        self.points = points

    def __iter__(self) -> Iterator[CrashArm]:
        return iter(self.points)

    def reached(self, arm: CrashArm, where: Boundary | None) -> None:
        expect(where is not None, f"{arm} was listed but not reached")

    def done(self) -> None:
        pass


class InProcessDriver(TargetIdentity):
    """Sessions of ``target``, each a node under ``work`` on a new lab of ``make_lab``."""

    target: Target

    def __init__(self, target: Target, work: Path, make_lab: LabFactory | None = None) -> None:
        self.target = target
        self.work = work
        self.make_lab = make_lab

    @contextmanager
    def session(self, label: str, crash: CrashArm | None = None) -> Iterator[InProcessPlugin]:
        node = TargetNode(
            self.target,
            self.work / label,
            crash=None if crash is None else CrashPoints(armed=crash),
            make_lab=self.make_lab,
        )
        put = InProcessPlugin(self.target, node, crash)
        try:
            yield put
        finally:
            put.close()

    def crash_plan(self, pick: Callable[[list[Any]], list[Any]] | None = None) -> ReferencePoints:
        with self.session("reference") as put:
            for _, call in lifecycle(put):
                call()
            points = list(put.node.crash_points.reached)
        expect(len(points) > MIN_CRASH_POINTS, f"only {len(points)} crash points were reached")
        if pick is not None:
            points = pick(points)
            expect(bool(points), "the sample of crash points is empty")
        return ReferencePoints(points)

    def response_lost(self, hook: str) -> CrashArm:
        if hook != "ConnectNetwork":
            raise NotApplicable(f"no response crash point is named for {hook}")
        # The runner's point between the connect's last effect and its journaled answer.
        before = Phase.commit(PhaseKind.BEFORE_COMMIT, "response")
        return CrashPoint("ConnectNetwork", "connect-1", "-", before)
