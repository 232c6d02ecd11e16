"""Named crash points: one primitive at every durable boundary and kernel call.

Names are stable and deterministic: ``<hook>/<operation>/<effect>/<phase>``
(``-`` for operation-level boundaries). A run can list the points it reached;
a point can be armed to crash there, either in-process (raise ``SimulatedCrash``,
which nothing in the SDK catches, then the harness abandons every in-memory
object) or by a real ``SIGKILL`` of the whole process.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

ENV_ARM = "NETWORKPLUGIN_CRASH_AT"
ENV_MODE = "NETWORKPLUGIN_CRASH_MODE"
ENV_TRACE = "NETWORKPLUGIN_CRASH_TRACE"


class SimulatedCrash(BaseException):
    """Raised at an armed in-process crash point. BaseException: nothing may handle it."""


class CrashMode(enum.StrEnum):
    IN_PROCESS = "in-process"
    SIGKILL = "sigkill"


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
        trace = os.environ.get(ENV_TRACE)
        return cls(
            armed=os.environ.get(ENV_ARM) or None,
            mode=CrashMode(os.environ.get(ENV_MODE, CrashMode.SIGKILL.value)),
            trace=Path(trace) if trace else None,
        )

    @contextlib.contextmanager
    def scope(self, hook: str, operation_id: str, effect_id: str = "-") -> Iterator[None]:
        """Name the boundaries hit by this thread (including kernel calls) inside the block."""
        previous = getattr(self._local, "prefix", None), getattr(self._local, "kernel_calls", 0)
        self._local.prefix = f"{hook}/{operation_id}/{effect_id}"
        self._local.kernel_calls = 0
        try:
            yield
        finally:
            self._local.prefix, self._local.kernel_calls = previous

    def hit(self, phase: str) -> None:
        prefix = getattr(self._local, "prefix", None) or "-/-/-"
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
