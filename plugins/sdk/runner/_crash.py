"""Named crash points: one primitive at every durable boundary and kernel call.

Names are stable and deterministic: ``<hook>/<operation>/<effect>/<phase>``
(``-`` for operation-level boundaries); ``CrashPoint`` is the typed value and
``CrashPoint.parse`` reads a name back. A run can list the points it reached; a
point can be armed to crash there, either in-process (raise ``SimulatedCrash``,
which nothing in the SDK catches, then the harness abandons every in-memory
object) or by a real ``SIGKILL`` of the whole process.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ENV_ARM = "NETWORKPLUGIN_CRASH_AT"
ENV_MODE = "NETWORKPLUGIN_CRASH_MODE"
ENV_TRACE = "NETWORKPLUGIN_CRASH_TRACE"

UNSCOPED: Final = "-"
"""The operation or effect part of a point hit outside an operation or effect."""


class SimulatedCrash(BaseException):
    """Raised at an armed in-process crash point. BaseException: nothing may handle it."""


class CrashMode(enum.StrEnum):
    IN_PROCESS = "in-process"
    SIGKILL = "sigkill"


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
    # At an effect being undone: its Undoing, with what the removal finished since its
    # last commit (the effect undone before it, the target's start of cleanup, the
    # previous target's finish) and, in its first commit, its fence and record.
    UNDOING = "undoing"
    # The removal's response, with what it finished since its last commit (the last
    # target's finish with its last result) and, if it had no commit before, its fence.
    CLEANUP = "cleanup"
    PROBE = "probe"
    INTERRUPTED = "interrupted"


_KERNEL_PHASE = re.compile(r"kernel#(?P<n>[1-9][0-9]*)\.(?P<method>[^./]+)\.(?P<kind>before|after)")
_COMMIT_PHASE = re.compile(r"(?P<boundary>[^/]+)\.(?P<kind>before-commit|after-commit)")


@dataclass(frozen=True)
class Phase:
    """One side of one boundary: a journal commit, or the Nth mutating kernel call.

    ``boundary`` is the commit's name (``intent``, ``undoing``; the coordinator names
    its own, ``release``) or the kernel method (``create_link``); ``call`` numbers the
    mutating kernel calls of one effect from 1 (0 for a commit).
    """

    kind: PhaseKind
    boundary: str
    call: int = 0

    @classmethod
    def commit(cls, kind: PhaseKind, commit: Commit | str) -> Phase:
        return cls(kind, str(commit))

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
            return cls(PhaseKind(m["kind"]), m["boundary"])
        raise ValueError(f"{text!r} is not a crash-point phase")

    def __str__(self) -> str:
        if self.kind.is_kernel_call:
            return f"kernel#{self.call}.{self.boundary}.{self.kind}"
        return f"{self.boundary}.{self.kind}"


def _phases(commit: Commit | str) -> tuple[str, str]:
    return (
        f"{commit}.{PhaseKind.BEFORE_COMMIT.value}",
        f"{commit}.{PhaseKind.AFTER_COMMIT.value}",
    )


_COMMIT_PHASES: Final[dict[str, tuple[str, str]]] = {c: _phases(c) for c in Commit}


def commit_phases(commit: Commit | str) -> tuple[str, str]:
    """``str(Phase.commit(kind, commit))`` for the before- and the after-commit side.

    The names without building two ``Phase`` values: every journal commit names both.
    A ``Commit``'s are built once (an enum's ``.value`` is a descriptor call, four
    per commit); any other name is built here.
    """
    phases = _COMMIT_PHASES.get(commit)
    return _phases(commit) if phases is None else phases


@dataclass(frozen=True)
class CrashPoint:
    """``<hook>/<operation>/<effect>/<phase>``; ``str()`` is the name the rig enumerates.

    During cleanup the effect part is ``<target-operation>:<effect>``, so names are
    unique in a run.
    """

    hook: str
    operation: str
    effect: str
    phase: Phase

    @classmethod
    def parse(cls, name: str) -> CrashPoint:
        parts = name.split("/")
        if len(parts) != 4 or not all(parts):
            raise ValueError(f"{name!r} is not a crash point <hook>/<operation>/<effect>/<phase>")
        hook, operation, effect, phase = parts
        return cls(hook, operation, effect, Phase.parse(phase))

    def __str__(self) -> str:
        return f"{self.hook}/{self.operation}/{self.effect}/{self.phase}"


class CrashPoints:
    """Records reached points (in order) and crashes at the armed one."""

    def __init__(
        self,
        armed: str | None = None,
        mode: CrashMode = CrashMode.IN_PROCESS,
        trace: Path | None = None,
        *,
        armed_when: Callable[[str], bool] | None = None,
    ) -> None:
        self.armed = armed
        self.armed_when = armed_when  # crash at the first point this accepts (once)
        self.mode = mode
        self._trace = trace
        self._lock = threading.Lock()
        self._local = threading.local()
        self.reached: list[str] = []

    @classmethod
    def from_environment(cls) -> CrashPoints:
        """The test kit's launcher arms a service process through its environment."""
        trace = os.environ.get(ENV_TRACE)
        return cls(
            armed=os.environ.get(ENV_ARM) or None,
            mode=CrashMode(os.environ.get(ENV_MODE, CrashMode.SIGKILL.value)),
            trace=Path(trace) if trace else None,
        )

    @property
    def reached_points(self) -> list[CrashPoint]:
        """``reached`` as typed values."""
        return [CrashPoint.parse(name) for name in self.reached]

    @contextlib.contextmanager
    def scope(self, hook: str, operation_id: str, effect_id: str = UNSCOPED) -> Iterator[None]:
        """Name the boundaries hit by this thread (including kernel calls) inside the block."""
        previous = getattr(self._local, "prefix", None), getattr(self._local, "kernel_calls", 0)
        self._local.prefix = f"{hook}/{operation_id}/{effect_id}"
        self._local.kernel_calls = 0
        try:
            yield
        finally:
            self._local.prefix, self._local.kernel_calls = previous

    def at(self, phase: Phase) -> None:
        """``hit`` with a typed phase."""
        self.hit(str(phase))

    def hit(self, phase: str) -> None:
        prefix = getattr(self._local, "prefix", None) or f"-/{UNSCOPED}/{UNSCOPED}"
        name = f"{prefix}/{phase}"
        with self._lock:
            self.reached.append(name)
            if self._trace is not None:
                with self._trace.open("a") as f:
                    f.write(name + "\n")
                    f.flush()
                    os.fsync(f.fileno())
        if name == self.armed:
            self._crash(name)
        if self.armed_when is not None and self.armed_when(name):
            self.armed_when = None
            self._crash(name)

    def kernel_call(self, method: str) -> str:
        """The phase prefix for the next mutating kernel call of this effect."""
        n = getattr(self._local, "kernel_calls", 0) + 1
        self._local.kernel_calls = n
        return f"kernel#{n}.{method}"

    def _crash(self, name: str) -> None:
        if self.mode is CrashMode.SIGKILL:
            os.kill(os.getpid(), signal.SIGKILL)
        raise SimulatedCrash(name)


class _NoCrash(CrashPoints):
    """Production's crash points: records nothing, never crashes, keeps no per-thread state."""

    def __init__(self) -> None:
        super().__init__()

    @contextlib.contextmanager
    def scope(self, hook: str, operation_id: str, effect_id: str = UNSCOPED) -> Iterator[None]:
        yield

    def at(self, phase: Phase) -> None:
        return None

    def hit(self, phase: str) -> None:
        return None

    def kernel_call(self, method: str) -> str:
        return f"kernel#0.{method}"


NO_CRASH: Final[CrashPoints] = _NoCrash()
"""The do-nothing crash points every runner and service uses unless a test kit injects its own."""
