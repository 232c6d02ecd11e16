"""The over-the-wire driver: any program a target file describes, called over its socket.

A session is a ``WireSession`` (a fresh lab, the plugin started by its command). The
checks see what a node sees: gRPC answers, the kernel's snapshot, and the plugin's
declared state files (``stateFiles``: what journal damage and loss act on).

Crashes: on ``fake://`` the suite asks the fake kernel server to hold back its answer to
the plugin's n-th kernel call of a hook (``FakeKernelClient.stall_nth``), and SIGKILLs
the plugin once it is held (``wait_held``): the call has taken effect, the plugin never
learns it did. Each run crashes at the next call not yet crashed at, until a lifecycle
runs to its end: every kernel call of every hook (reads too: a plugin may journal
between any two), in the order the plugin makes them. A lost response is the last
kernel change of the connect (counting only the calls the seam declares mutating). On ``linux://`` the
kernel's calls cannot be held, and the crash checks say so (not applicable).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakekernel.client import FakeKernelClient
from plugins.kernel import LinkChanges, VFChanges
from plugins.sdk import (
    CleanupResponse,
    ConnectResponse,
    EndpointInfo,
    Hook,
    InspectResponse,
    PreparedState,
    PrepareRequest,
)
from plugins.sdk.host import PluginCallError, PluginClient

from .driver import Boundary, CrashArm, NotApplicable, Refused, TargetIdentity, expect
from .target import envelope
from .wire_driver import WireDriverError, WireLabs, WireSession
from .wire_target import WireTarget

GARBAGE = b"definitely not sqlite"

HOLD_S = 30.0
"""How long the server may hold a crashed-at answer: the SIGKILL must land within it (it
takes milliseconds; the kill is checked to have come while the answer was held), and
the answer is let go at once after it (``release_held``)."""
CALL_DEADLINE_S = 120.0
POLL_S = 0.01
MAX_CRASH_RUNS = 200


@dataclass
class KernelCallArm:
    """Crash at the ``ordinals[hook]``-th kernel call of each hook (1-based; 0: none in
    that hook; a hook not named: its first), counting every call or (``changes``) only
    the calls the seam declares mutating. ``hooks``: in these hooks only. ``passed``:
    the hooks this run served without a crash (they made fewer calls than their ordinal)."""

    ordinals: Mapping[str, int] = field(default_factory=dict)
    hooks: frozenset[str] | None = None
    changes: bool = False
    passed: list[str] = field(default_factory=list)

    @property
    def what(self) -> str:
        return "kernel change" if self.changes else "kernel call"

    def ordinal(self, hook: str) -> int:
        if self.hooks is not None and hook not in self.hooks:
            return 0
        return self.ordinals.get(hook, 1)


class KernelCallCrashes:
    """The crash runs over the wire: each run crashes at the next kernel call (or, with
    ``changes``, the next kernel change) not yet crashed at, the n-th of its hook, until
    a lifecycle runs through: every call of every hook, in the order the plugin makes
    them."""

    def __init__(self, hooks: frozenset[str] | None = None, *, changes: bool = False):
        self.hooks = hooks
        self.changes = changes
        self.next: dict[str, int] = {}  # hook -> the ordinal of its next change to crash at
        self.seen: dict[str, list[str]] = {}  # hook -> the crashed-at changes, in order
        self.finished = False
        self.runs = 0

    def __iter__(self) -> Iterator[CrashArm]:
        while not self.finished:
            expect(self.runs < MAX_CRASH_RUNS, f"over {MAX_CRASH_RUNS} crash runs: {self.seen}")
            self.runs += 1
            yield KernelCallArm(dict(self.next), self.hooks, self.changes)

    def reached(self, arm: CrashArm, where: Boundary | None) -> None:
        assert isinstance(arm, KernelCallArm)
        for hook in arm.passed:
            self.next[hook] = 0  # served without reaching its ordinal: no change is left
        if where is None:
            self.finished = True  # nothing left to crash at
            return
        self.seen.setdefault(where.hook, []).append(where.point)
        self.next[where.hook] = arm.ordinal(where.hook) + 1

    def boundaries(self) -> list[Boundary]:
        return [Boundary(h, point) for h, points in self.seen.items() for point in points]

    def done(self) -> None:
        expect(bool(self.seen), "no kernel call of the lifecycle could be observed")


def _refusal(exc: PluginCallError) -> Refused:
    return Refused(exc.code, exc.message)


class WirePlugin(TargetIdentity):
    """One session of a wire target (a ``WireSession``) as the checks drive it."""

    target: WireTarget

    def __init__(self, session: WireSession, crash: KernelCallArm | None) -> None:
        self.session = session
        self.target = session.target
        self.crash = crash
        self.prepared: PreparedState | None = None
        self.client = session.client()
        self._control: FakeKernelClient | None = None

    @property
    def attachment_scope(self) -> str:
        return self.target.connect(self.session.sandbox, None, "connect-1").envelope.scope

    # -- calls -----------------------------------------------------------------------------

    def _call(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except PluginCallError as exc:
            raise _refusal(exc) from exc

    def _as(self, token: str | None) -> PluginClient:
        return self.client if token is None else self.session.client(token)

    def get_info(self) -> EndpointInfo:
        return self._call(self.client.get_info)  # type: ignore[no-any-return]

    def pinned_digest(self) -> str | None:
        return self.target.contract_digest

    def invalid_configs(self) -> list[tuple[str, str, str]]:
        try:
            info = self.client.get_info()
            examples = json.loads(info.descriptor_json).get("examples", {}).get("invalid", [])
            return [
                (json.dumps(e["config"]), str(e.get("path", "")), str(e.get("rule", "")))
                for e in examples
            ]
        except (ValueError, AttributeError, KeyError, TypeError):
            return []

    def prepare(self, op: str = "prepare-1") -> PreparedState | None:
        if self.operation_only:
            return None
        response = self._call(lambda: self.client.node_prepare(self.target.prepare(op)))
        self.prepared = response.prepared_state
        return self.prepared

    def prepare_without_claim(self, op: str) -> Any:
        request = PrepareRequest(envelope(Hook.NODE_PREPARE, op, "prep-1", "step-1"), None, "{}")
        return self._call(lambda: self.client.node_prepare(request))

    def connect(
        self,
        op: str = "connect-1",
        *,
        config_json: str | None = None,
        interface_names: dict[str, str] | None = None,
        token: str | None = None,
    ) -> ConnectResponse:
        if interface_names is not None:
            # the same names, other values: the target's ports are its own
            first = next(iter(interface_names.values()))
            interface_names = dict.fromkeys(self.target.interface_names, first)
        request = self.target.connect(
            self.session.sandbox,
            self.prepared,
            op,
            config_json=config_json,
            interface_names=interface_names,
        )
        client = self._as(token)
        return self._call(lambda: client.connect_network(request))  # type: ignore[no-any-return]

    def remove(self, op: str = "remove-1", *, token: str | None = None) -> CleanupResponse:
        client = self._as(token)
        return self._call(lambda: client.remove_network(self.target.remove(op)))  # type: ignore[no-any-return]

    def unprepare(self, op: str = "unprepare-1") -> CleanupResponse:
        return self._call(lambda: self.client.node_unprepare(self.target.unprepare(op)))  # type: ignore[no-any-return]

    def inspect(self, operation_id: str, scope: str = "") -> InspectResponse:
        return self._call(lambda: self.client.inspect(operation_id, scope))  # type: ignore[no-any-return]

    def wrong_tokens(self) -> list[str]:
        return ["not-the-token", self.session.token + "x"]

    def journal_rows(self) -> int | None:
        return None  # the plugin's journal is its own business

    def journal_commits(self) -> int | None:
        return None

    # -- the process -------------------------------------------------------------------------

    def stop(self) -> None:
        self.session.stop()

    def start(self, *, ready: bool = True) -> None:
        self.session.start(ready=ready)

    def kill_and_restart(self) -> None:
        self.session.restart_after_kill()

    def recover(self) -> None:
        self.session.start()

    def _kernel_control(self) -> FakeKernelClient:
        socket = getattr(self.session.lab, "socket", None)
        if socket is None:
            raise NotApplicable(
                f"the kernel calls of {self.target.kernel_url} cannot be held "
                "(a crash at a kernel call needs the fake kernel: fake://)"
            )
        if self._control is None:
            self._control = FakeKernelClient(socket)
        return self._control

    def crashing(self, hook: str, call: Callable[[], Any]) -> Boundary | None:
        arm = self.crash
        ordinal = 0 if arm is None else arm.ordinal(hook)
        if ordinal == 0:
            call()
            if arm is not None:
                arm.passed.append(hook)
            return None
        assert arm is not None
        kernel = self._kernel_control()
        # The session's server holds no answer and has nothing armed: the last crash run
        # let go of what it held.
        kernel.stall_nth(ordinal, HOLD_S, mutating=arm.changes)
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["answer"] = call()
            except BaseException as exc:  # the killed plugin's call fails; reported below
                outcome["error"] = exc

        thread = threading.Thread(target=run, name=f"wire-{hook}", daemon=True)
        thread.start()
        held = None
        deadline = time.monotonic() + CALL_DEADLINE_S
        try:
            while held is None and thread.is_alive():
                held = kernel.wait_held(POLL_S)  # the held change, or the call's end
                expect(time.monotonic() < deadline, f"{hook} took over {CALL_DEADLINE_S}s")
            if held is not None:
                self.session.kill()
                if kernel.wait_held(0) != held:
                    raise WireDriverError(
                        f"the SIGKILL at {hook}'s {arm.what} #{ordinal} ({held}) came "
                        f"after its answer was released ({HOLD_S}s): the crash is not proven"
                    )
        finally:
            kernel.release_held()  # disarmed, and the killed plugin's answer let go
        thread.join(CALL_DEADLINE_S)
        if held is None:
            if "error" in outcome:
                raise outcome["error"]
            arm.passed.append(hook)
            return None
        return Boundary(hook, f"{arm.what} #{ordinal} ({held})")

    # -- the journal: the target's declared state files --------------------------------------

    def _state_files(self) -> list[Path]:
        if not self.target.state_files:
            raise NotApplicable("the target file declares no stateFiles (its journal)")
        return [
            self.target.directory / self.target.expand(f, self.session.values)
            for f in self.target.state_files
        ]

    def damage_journal(self) -> None:
        journal, *companions = self._state_files()
        if not journal.is_file():
            raise WireDriverError(f"the declared journal {journal} is not a file")
        for path in companions:
            if path.name.startswith(journal.name):  # SQLite's -wal and -shm, not a lease
                path.unlink(missing_ok=True)
        with journal.open("r+b") as f:
            f.write(GARBAGE)

    def journal_still_damaged(self) -> bool:
        journal = self._state_files()[0]
        return journal.is_file() and journal.read_bytes().startswith(GARBAGE)

    def lose_journal(self) -> None:
        files = self._state_files()
        if not files[0].is_file():
            raise WireDriverError(f"the declared journal {files[0]} is not a file")
        for path in files:
            path.unlink(missing_ok=True)

    # -- the host ------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return self.session.snapshot()

    def changes_since(self, baseline: dict[str, Any]) -> list[Any]:
        return self.session.changes_since(baseline)

    def plant_foreign(self, name: str) -> None:
        self.session.plant_foreign(name)

    def tamper(self) -> None:
        tamper = self.target.tamper
        if tamper is None:
            raise NotApplicable("the target file declares no tamper")
        assert self.session.lab is not None
        kernel = self.session.lab.kernel
        node = kernel.host_namespace()
        name = tamper.link if tamper.vf is None else tamper.vf[0]
        link = kernel.get_link(node, name=name)
        if link is None:
            raise WireDriverError(f"the tamper's link {name} is not in the node's namespace")
        if tamper.vf is None:
            kernel.set_link(node, link.ifindex, LinkChanges(**tamper.changes))
        else:
            kernel.set_vf(node, link.ifindex, tamper.vf[1], VFChanges(**tamper.changes))

    def close(self) -> None:
        try:
            if self._control is not None:
                self._control.close()
        finally:
            self.session.close()


class WireDriver(TargetIdentity):
    """Sessions of a wire target on the run's labs."""

    target: WireTarget

    def __init__(self, target: WireTarget, labs: WireLabs) -> None:
        self.target = target
        self.labs = labs

    @contextmanager
    def session(self, label: str, crash: CrashArm | None = None) -> Iterator[WirePlugin]:
        put = WirePlugin(WireSession(self.target, self.labs), crash)
        try:
            yield put
        finally:
            put.close()

    def crash_plan(self, pick: Callable[[list[Any]], list[Any]] | None = None) -> KernelCallCrashes:
        if self.target.kernel_url != "fake://":
            raise NotApplicable(
                f"the kernel calls of {self.target.kernel_url} cannot be held "
                "(a crash at a kernel call needs the fake kernel: fake://)"
            )
        return KernelCallCrashes()

    def response_lost(self, hook: str) -> CrashArm:
        """``hook``'s last kernel change: found by runs that crash at each of its changes
        in turn (each a SIGKILL), until one runs through."""
        self.crash_plan()  # not applicable where kernel calls cannot be held
        plan = KernelCallCrashes(hooks=frozenset({hook}), changes=True)
        for arm in plan:
            with self.session("response-probe", crash=arm) as put:
                where = None
                for step, call in _steps_to(put, hook):
                    where = put.crashing(step, call)
                plan.reached(arm, where)
        changes = len(plan.seen.get(hook, []))
        if not changes:
            raise NotApplicable(f"{hook} changes nothing in the kernel the suite can observe")
        return KernelCallArm({hook: changes}, frozenset({hook}), changes=True)


def _steps_to(put: WirePlugin, hook: str) -> list[tuple[str, Callable[[], Any]]]:
    """The hooks of a lifecycle up to ``hook``, included."""
    steps: list[tuple[str, Callable[[], Any]]] = []
    if not put.operation_only:
        steps.append(("NodePrepare", put.prepare))
    steps.append(("ConnectNetwork", put.connect))
    names = [name for name, _ in steps]
    return steps[: names.index(hook) + 1] if hook in names else steps
