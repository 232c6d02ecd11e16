"""The over-the-wire driver: any program a target file describes, called over its socket.

A session is a ``WireSession`` (a fresh lab, the plugin started by its command). The
checks see what a node sees: gRPC answers, the kernel's snapshot, and the plugin's
declared state files (``stateFiles``: what journal damage and loss act on).

Crashes: on ``fake://`` the suite asks the fake kernel server to hold back its answer to
the plugin's next call of each kernel method (``FakeKernelClient.stall``), and SIGKILLs
the plugin once one is held (``wait_stalled``): the call has taken effect, the plugin
never learns it did. A kernel call can only be told apart by its method, so a run stops
at the first call of a method not yet crashed at in that hook; the next run crashes at
the next such call, until a lifecycle runs to its end: every first call of each method
in each hook, in the order the plugin makes them. On ``linux://`` the kernel's calls
cannot be held, and the crash checks say so (not applicable).
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
from plugins.kernel import KERNEL_CALLS, LinkChanges, VFChanges
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

HELD_CALLS = tuple(KERNEL_CALLS)
"""The calls of the kernel seam a plugin can make, each of which the fake kernel server
can hold (its dispatch is derived from the same table)."""
CHANGING_CALLS = frozenset(name for name, call in KERNEL_CALLS.items() if call.mutating)

HOLD_S = 3.0
"""How long the server holds a crashed-at answer: the SIGKILL must land within it (it
takes milliseconds; the kill is checked to have come while the answer was held)."""
CALL_DEADLINE_S = 120.0
POLL_S = 0.01
MAX_CRASH_RUNS = 200


@dataclass
class KernelCallArm:
    """Crash at the first call, in a hook, of a method not excluded for that hook
    (``only``: among these methods; ``hooks``: in these hooks only)."""

    exclude: Mapping[str, frozenset[str]] = field(default_factory=dict)
    only: frozenset[str] | None = None
    hooks: frozenset[str] | None = None

    def candidates(self, hook: str) -> list[str]:
        if self.hooks is not None and hook not in self.hooks:
            return []
        methods = HELD_CALLS if self.only is None else sorted(self.only)
        return [m for m in methods if m not in self.exclude.get(hook, frozenset())]


class KernelCallCrashes:
    """The crash runs over the wire: each run finds the next boundary (a kernel call of a
    method not yet crashed at in its hook), until a lifecycle runs through."""

    def __init__(self, only: frozenset[str] | None = None, hooks: frozenset[str] | None = None):
        self.only = only
        self.hooks = hooks
        self.seen: dict[str, list[str]] = {}
        self.finished = False
        self.runs = 0

    def __iter__(self) -> Iterator[CrashArm]:
        while not self.finished:
            expect(self.runs < MAX_CRASH_RUNS, f"over {MAX_CRASH_RUNS} crash runs: {self.seen}")
            self.runs += 1
            exclude = {hook: frozenset(methods) for hook, methods in self.seen.items()}
            yield KernelCallArm(exclude, self.only, self.hooks)

    def reached(self, arm: CrashArm, where: Boundary | None) -> None:
        assert isinstance(arm, KernelCallArm)
        if where is not None:
            self.seen.setdefault(where.hook, []).append(where.point.split()[-1])
        else:
            self.finished = True  # nothing left to crash at

    def boundaries(self) -> list[Boundary]:
        return [Boundary(h, f"kernel call {m}") for h, ms in self.seen.items() for m in ms]

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
        if arm is None:
            call()
            return None
        kernel = self._kernel_control()
        # The session's server holds no answer yet (WireLabs.without_held_answers).
        armed = arm.candidates(hook)
        for method in armed:
            kernel.stall(method, HOLD_S)
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["answer"] = call()
            except BaseException as exc:  # the killed plugin's call fails; reported below
                outcome["error"] = exc

        thread = threading.Thread(target=run, name=f"wire-{hook}", daemon=True)
        thread.start()
        hit = None
        deadline = time.monotonic() + CALL_DEADLINE_S
        try:
            while hit is None and thread.is_alive():
                hit = next((m for m in armed if kernel.wait_stalled(m, 0)), None)
                if hit is None:
                    expect(time.monotonic() < deadline, f"{hook} took over {CALL_DEADLINE_S}s")
                    thread.join(POLL_S)  # the call's end, or the next look at the holds
            if hit is not None:
                self.session.kill()
                expect_held = kernel.wait_stalled(hit, 0)
                if not expect_held:
                    raise WireDriverError(
                        f"the SIGKILL at {hook}'s {hit} came after its answer was released "
                        f"({HOLD_S}s): the crash point is not proven"
                    )
        finally:
            for m in armed:
                kernel.stall(m, 0)  # disarm: the next call is answered at once
        thread.join(CALL_DEADLINE_S)
        if hit is None:
            if "error" in outcome:
                raise outcome["error"]
            return None
        return Boundary(hook, f"kernel call {hit}")

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
        if crash is not None:
            self.labs.without_held_answers(HELD_CALLS)
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
        """The first call of the method of ``hook``'s last kernel change: found by runs that
        crash at each changing call in turn (each a SIGKILL), until one runs through."""
        self.crash_plan()  # not applicable where kernel calls cannot be held
        plan = KernelCallCrashes(only=CHANGING_CALLS, hooks=frozenset({hook}))
        for arm in plan:
            with self.session("response-probe", crash=arm) as put:
                where = None
                for step, call in _steps_to(put, hook):
                    where = put.crashing(step, call)
                plan.reached(arm, where)
        last = plan.seen.get(hook)
        if not last:
            raise NotApplicable(f"{hook} changes nothing in the kernel the suite can observe")
        others = frozenset(m for m in CHANGING_CALLS if m != last[-1])
        return KernelCallArm({hook: others}, CHANGING_CALLS, frozenset({hook}))


def _steps_to(put: WirePlugin, hook: str) -> list[tuple[str, Callable[[], Any]]]:
    """The hooks of a lifecycle up to ``hook``, included."""
    steps: list[tuple[str, Callable[[], Any]]] = []
    if not put.operation_only:
        steps.append(("NodePrepare", put.prepare))
    steps.append(("ConnectNetwork", put.connect))
    names = [name for name, _ in steps]
    return steps[: names.index(hook) + 1] if hook in names else steps
