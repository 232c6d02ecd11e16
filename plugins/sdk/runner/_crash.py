"""Crash points: typed values at every durable boundary and kernel call.

A ``CrashPoint`` is data: whose journal it is a boundary of (``Owner``), the hook, the
operation (or unit) and effect it is in, and its ``Phase`` (a journal commit's before
or after side, or the Nth mutating kernel call's). Points compare, hash and sort as
data; ``str()`` is their one rendering, for logs, report labels and the environment of
a launched process, and ``CrashPoint.parse`` reads that rendering back (at a process
boundary only: nothing builds or edits a point's name as text).

Every boundary is hit through one primitive (``CrashPoints.hit``). A run can list the
points it reached; a point can be armed to crash there, either in-process (raise
``SimulatedCrash``, which nothing in the SDK catches, then the harness abandons every
in-memory object) or by a real ``SIGKILL`` of the whole process.

Production runs ``NO_CRASH``: it records nothing and can never crash. Only a test
kit builds a ``CrashPoints`` (``from_environment`` is for its launcher of service
processes, never for a service's own entry point).
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, TypeVar

T = TypeVar("T")

ENV_ARM = "NETWORKPLUGIN_CRASH_AT"
ENV_MODE = "NETWORKPLUGIN_CRASH_MODE"
ENV_TRACE = "NETWORKPLUGIN_CRASH_TRACE"

UNSCOPED: Final = "-"
"""The hook, operation or effect of a point hit outside one."""

RECOVERY_HOOK: Final = "Recovery"
"""The hook of a service's recovery at startup (its points are the service's own)."""


class SimulatedCrash(BaseException):
    """Raised at an armed in-process crash point. BaseException: nothing may handle it."""


class CrashMode(enum.StrEnum):
    IN_PROCESS = "in-process"
    SIGKILL = "sigkill"


class Owner(enum.StrEnum):
    """Whose journal a point is a boundary of."""

    SERVICE = "service"
    """A plugin service's runner: its hooks, its cleanup and its recovery."""
    COORDINATOR = "Coordinator"
    """The coordinator's journal, under a hook's call (``plugins.coordinator.Coordinator``)."""
    PODS = "Pods"
    """The Kubernetes node's adapter: its claim and sandbox units (``plugins.coordinator``)."""


class PhaseKind(enum.StrEnum):
    """Which side of which kind of boundary a point is on."""

    BEFORE_COMMIT = "before-commit"
    AFTER_COMMIT = "after-commit"
    BEFORE_KERNEL_CALL = "before"
    AFTER_KERNEL_CALL = "after"

    @property
    def is_kernel_call(self) -> bool:
        return self in (PhaseKind.BEFORE_KERNEL_CALL, PhaseKind.AFTER_KERNEL_CALL)


class Commit(enum.StrEnum):
    """The runner's journal commits, each bracketed by a before- and an after-commit point.

    A hook commits at most once per effect plus once: each record durable before an
    effect's first mutation (or compensation) also carries what the previous step finished
    (docs/runner.md, "The record sequence").
    """

    INTENT = "intent"
    # At an effect: its before-image and Applying, the first effect an attempt runs.
    APPLYING = "applying"
    # At an effect: the previous effect's Applied, and this one's before-image and Applying.
    ADVANCE = "advance"
    # The last effect's Applied (when this attempt ran it) and the replayable response.
    RESPONSE = "response"
    # An attempt's way out on an error: the operation Failed, with what it carried (the
    # previous effect's Applied) and the failing effect's note.
    FAILURE = "failure"
    # At an effect being undone: its Undoing, with what the removal finished since its
    # last commit (the effect undone before it, the target's start of cleanup, the
    # previous target's finish) and, in its first commit, its fence and record.
    UNDOING = "undoing"
    # The removal's response, with what it finished since its last commit (the last
    # target's finish with its last result) and, if it had no commit before, its fence.
    CLEANUP = "cleanup"
    # Recovery's one transaction: every observation of a probe and every interruption.
    RECOVERY = "recovery"


_KERNEL_PHASE = re.compile(
    r"kernel#(?P<n>[1-9][0-9]*)\.(?P<method>[^./:]+)\.(?P<kind>before|after)"
)
_COMMIT_PHASE = re.compile(
    r"(?P<boundary>[^/.:]+)(?::(?P<detail>[^/]+?))?\.(?P<kind>before-commit|after-commit)"
)


@dataclass(frozen=True, order=True)
class Phase:
    """One side of one boundary: a journal commit, or the Nth mutating kernel call.

    ``boundary`` is the commit's name (``intent``, ``undoing``; the coordinator names
    its own, ``record_call``) or the kernel method (``create_link``); ``detail`` is the
    state a commit writes where one commit writes several (the coordinator's
    ``set_unit`` of ``preparing``); ``call`` numbers the mutating kernel calls of one
    effect from 1 (0 for a commit).
    """

    kind: PhaseKind
    boundary: str
    call: int = 0
    detail: str = ""

    @classmethod
    def commit(cls, kind: PhaseKind, commit: Commit | str, detail: str = "") -> Phase:
        return cls(kind, str(commit), 0, detail)

    @classmethod
    def kernel(cls, kind: PhaseKind, call: int, method: str) -> Phase:
        return cls(kind, method, call)

    @classmethod
    def parse(cls, text: str) -> Phase:
        if m := _KERNEL_PHASE.fullmatch(text):
            kind = (
                PhaseKind.BEFORE_KERNEL_CALL
                if m["kind"] == "before"
                else PhaseKind.AFTER_KERNEL_CALL
            )
            return cls(kind, m["method"], int(m["n"]))
        if m := _COMMIT_PHASE.fullmatch(text):
            return cls(PhaseKind(m["kind"]), m["boundary"], 0, m["detail"] or "")
        raise ValueError(f"{text!r} is not a crash-point phase")

    def __str__(self) -> str:
        if self.kind.is_kernel_call:
            return f"kernel#{self.call}.{self.boundary}.{self.kind}"
        if self.detail:
            return f"{self.boundary}:{self.detail}.{self.kind}"
        return f"{self.boundary}.{self.kind}"


def _commit_sides(commit: Commit | str, detail: str = "") -> tuple[Phase, Phase]:
    return (
        Phase.commit(PhaseKind.BEFORE_COMMIT, commit, detail),
        Phase.commit(PhaseKind.AFTER_COMMIT, commit, detail),
    )


# A Commit's two phases are built once: every journal commit names both.
_COMMIT_PHASES: Final[dict[str, tuple[Phase, Phase]]] = {c: _commit_sides(c) for c in Commit}


def commit_phases(commit: Commit | str, detail: str = "") -> tuple[Phase, Phase]:
    """The before- and the after-commit phase of ``commit`` (writing ``detail``)."""
    phases = None if detail else _COMMIT_PHASES.get(commit)
    return _commit_sides(commit, detail) if phases is None else phases


_IDENTITY_SEPARATORS = re.compile(r"([.:,])")


@dataclass(frozen=True, order=True)
class CrashPoint:
    """One boundary: whose (``owner``), in which hook, operation and effect, which side.

    A service's points are in its hook's operation (``operation``, the operation id), at
    an effect or at the operation's level (``effect`` ``-``); recovery's are in the
    pseudo-hook ``Recovery`` (``RECOVERY_HOOK``). During cleanup the effect is
    ``<target-operation>:<effect>``, so a run's points are unique. The coordinator's are
    under the hook it calls, ``operation`` naming the subject of the commit (an operation
    id, a unit or a preparation scope); the Kubernetes adapter's under its unit.

    ``str()``: ``<hook>/<operation>/<effect>/<phase>`` for a service,
    ``<owner>/<hook>/<operation>/<phase>`` for the others (their effect is always ``-``).
    """

    hook: str
    operation: str
    effect: str
    phase: Phase
    owner: Owner = Owner.SERVICE

    @classmethod
    def parse(cls, name: str) -> CrashPoint:
        """The point ``str()`` rendered (from an environment, a trace or a log)."""
        parts = name.split("/")
        if len(parts) != 4 or not all(parts):
            raise ValueError(f"{name!r} is not a crash point <hook>/<operation>/<effect>/<phase>")
        first, second, third, phase = parts
        if first in (Owner.COORDINATOR, Owner.PODS):
            return cls(second, third, UNSCOPED, Phase.parse(phase), Owner(first))
        return cls(first, second, third, Phase.parse(phase))

    def __str__(self) -> str:
        if self.owner is Owner.SERVICE:
            return f"{self.hook}/{self.operation}/{self.effect}/{self.phase}"
        return f"{self.owner}/{self.hook}/{self.operation}/{self.phase}"

    @property
    def in_effect(self) -> bool:
        """Hit inside an effect (or, during cleanup, an effect being undone)."""
        return self.effect != UNSCOPED

    def with_identities(self, renames: Mapping[str, str]) -> CrashPoint:
        """The same boundary in a run of other identities: each identity in ``renames``
        (a claim, an attachment, a pod's uid) that is a whole part of the operation or the
        effect (operation ids join their parts with ``.``, ``:`` and ``,``) is replaced."""

        def renamed(value: str) -> str:
            parts = _IDENTITY_SEPARATORS.split(value)
            return "".join(renames.get(part, part) for part in parts)

        return replace(self, operation=renamed(self.operation), effect=renamed(self.effect))


@dataclass(frozen=True)
class _Scope:
    hook: str
    operation: str
    effect: str
    owner: Owner


_UNSCOPED: Final = _Scope(UNSCOPED, UNSCOPED, UNSCOPED, Owner.SERVICE)


class CrashPoints:
    """Records reached points (in order) and crashes at the armed one."""

    def __init__(
        self,
        armed: CrashPoint | None = None,
        mode: CrashMode = CrashMode.IN_PROCESS,
        trace: Path | None = None,
        *,
        armed_when: Callable[[CrashPoint], bool] | None = None,
    ) -> None:
        if armed is not None and not isinstance(armed, CrashPoint):
            # A name would never equal a reached point: the run would never crash.
            raise TypeError(f"arm a CrashPoint, not {armed!r} (CrashPoint.parse reads a name)")
        self.armed = armed
        self.armed_when = armed_when  # crash at the first point this accepts (once)
        self.mode = mode
        self._trace = trace
        self._lock = threading.Lock()
        self._local = threading.local()
        self.reached: list[CrashPoint] = []

    @classmethod
    def from_environment(cls) -> CrashPoints:
        """The test kit's launcher arms a service process through its environment."""
        trace = os.environ.get(ENV_TRACE)
        armed = os.environ.get(ENV_ARM)
        return cls(
            armed=CrashPoint.parse(armed) if armed else None,
            mode=CrashMode(os.environ.get(ENV_MODE, CrashMode.SIGKILL.value)),
            trace=Path(trace) if trace else None,
        )

    def scope(
        self,
        hook: str,
        operation_id: str,
        effect_id: str = UNSCOPED,
        *,
        owner: Owner = Owner.SERVICE,
    ) -> contextlib.AbstractContextManager[None]:
        """Name the boundaries hit by this thread (including kernel calls) inside the block."""
        return self._scope(hook, operation_id, effect_id, owner)

    @contextlib.contextmanager
    def _scope(self, hook: str, operation_id: str, effect_id: str, owner: Owner) -> Iterator[None]:
        previous = getattr(self._local, "scope", None), getattr(self._local, "kernel_calls", 0)
        self._local.scope = _Scope(hook, operation_id, effect_id, owner)
        self._local.kernel_calls = 0
        try:
            yield
        finally:
            self._local.scope, self._local.kernel_calls = previous

    def hit(self, phase: Phase) -> None:
        """This thread reached ``phase`` in its scope: record it, and crash if armed there."""
        where: _Scope = getattr(self._local, "scope", None) or _UNSCOPED
        point = CrashPoint(where.hook, where.operation, where.effect, phase, where.owner)
        with self._lock:
            self.reached.append(point)
            if self._trace is not None:
                with self._trace.open("a") as f:
                    f.write(f"{point}\n")
                    f.flush()
                    os.fsync(f.fileno())
        if point == self.armed:
            self._crash(point)
        if self.armed_when is not None and self.armed_when(point):
            self.armed_when = None
            self._crash(point)

    def commit(self, boundary: Commit | str, write: Callable[[], T], detail: str = "") -> T:
        """``write()``, one journal commit, between its before- and after-commit points
        (``detail``: the state it writes, where one commit writes one of several)."""
        before, after = commit_phases(boundary, detail)
        self.hit(before)
        result = write()
        self.hit(after)
        return result

    def kernel_phases(self, method: str) -> tuple[Phase, Phase]:
        """The before and after phase of the next mutating kernel call of this effect."""
        n = getattr(self._local, "kernel_calls", 0) + 1
        self._local.kernel_calls = n
        return (
            Phase.kernel(PhaseKind.BEFORE_KERNEL_CALL, n, method),
            Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, n, method),
        )

    def _crash(self, point: CrashPoint) -> None:
        if self.mode is CrashMode.SIGKILL:
            os.kill(os.getpid(), signal.SIGKILL)
        raise SimulatedCrash(str(point))


_NO_SCOPE: contextlib.nullcontext[None] = contextlib.nullcontext()


class _NoCrash(CrashPoints):
    """Production's crash points: records nothing, never crashes, keeps no per-thread state."""

    def __init__(self) -> None:
        super().__init__()

    def scope(
        self,
        hook: str,
        operation_id: str,
        effect_id: str = UNSCOPED,
        *,
        owner: Owner = Owner.SERVICE,
    ) -> contextlib.AbstractContextManager[None]:
        # One shared, reusable no-op: a generator-made context manager per effect cost
        # ~3 % of a hook's Python time here.
        return _NO_SCOPE

    def hit(self, phase: Phase) -> None:
        return None

    def commit(self, boundary: Commit | str, write: Callable[[], T], detail: str = "") -> T:
        return write()

    def kernel_phases(self, method: str) -> tuple[Phase, Phase]:
        return _NO_KERNEL_CALL


_NO_KERNEL_CALL: Final = (
    Phase.kernel(PhaseKind.BEFORE_KERNEL_CALL, 0, "-"),
    Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, 0, "-"),
)

NO_CRASH: Final[CrashPoints] = _NoCrash()
"""The do-nothing crash points every runner and service uses unless a test kit injects its own."""
