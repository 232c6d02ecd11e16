"""The plugin under test: the one interface every conformance check drives.

A check (``conformance.suite``) is written once against a ``Driver``: it opens
sessions (a fresh host and the plugin serving on it), calls the four hooks, restarts
or kills the plugin, arms crashes, damages the plugin's journal and reads the host's
kernel. Two drivers implement it:

- in process (``conformance.inprocess``): a Python plugin's registration run by the
  SDK's runner in this process; crashes are the runner's crash points, armed one at a
  time, and the journal is the runner's own files;
- over the wire (``conformance.wire_driver``): any program started by the commands of a
  target file, called over its socket; a crash is a SIGKILL while the fake kernel holds
  the answer to one of its kernel calls (the calls the suite can observe), and the
  journal is what the target file declares as its state files.

What a driver cannot do makes the check it needs not applicable (``NotApplicable``,
saying why), never a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from plugins.sdk import (
    CleanupResponse,
    ConnectResponse,
    EndpointInfo,
    InspectResponse,
    PreparedState,
)

HOOKS = ("NodePrepare", "ConnectNetwork", "RemoveNetwork", "NodeUnprepare")


class ConformanceError(AssertionError):
    """What the plugin got wrong (the check's verdict)."""


class NotApplicable(Exception):
    """The check does not apply to this plugin, or this driver cannot run it (says why)."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


class Refused(Exception):
    """A call the plugin answered with a status other than OK, as either driver sees it.

    ``code`` is the gRPC status name; ``config`` the (path, rule) of a config rejection
    where the driver can see them (the SDK's ``ConfigError`` in process), else None."""

    def __init__(self, code: str, message: str, config: tuple[str, str] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.config = config


@dataclass(frozen=True)
class Boundary:
    """Where a crash run crashed: the hook being served and the driver's name for the
    point (a crash point of the SDK's runner; over the wire the kernel call whose answer
    was held when the plugin was killed)."""

    hook: str
    point: str

    def __str__(self) -> str:
        return f"{self.hook}: {self.point}" if self.point else self.hook


CrashArm: TypeAlias = Any
"""One crash run's instruction to a session: opaque to the checks, the driver's own
(a crash point of the runner in process; over the wire the kernel calls to hold)."""


class CrashPlan(Protocol):
    """The crash runs of crash-at-every-boundary. Iterating yields the arm of each run;
    ``reached`` is told where that run crashed (None: it ran to the end), which may decide
    the next arm (over the wire the boundaries are discovered by the runs themselves)."""

    def __iter__(self) -> Iterator[CrashArm]: ...

    def reached(self, arm: CrashArm, where: Boundary | None) -> None: ...

    def done(self) -> None:
        """After the last run: raise ``ConformanceError`` if the plan saw too little."""


class PluginUnderTest(Protocol):
    """One session: a fresh host, and the plugin serving on it (``close`` ends both).

    The hook calls build the target's one valid request per hook (the same request for
    the same operation id: a retry is the very same call) and raise ``Refused`` for an
    answer other than OK. ``prepared`` is what the last ``prepare`` answered."""

    prepared: PreparedState | None

    @property
    def name(self) -> str: ...

    @property
    def operation_only(self) -> bool: ...

    @property
    def interface(self) -> str:
        """The interface name the connect assigns: where a foreign object is planted."""

    @property
    def attachment_scope(self) -> str:
        """The scope the connect names."""

    # -- the wire ------------------------------------------------------------------------

    def get_info(self) -> EndpointInfo:
        """GetInfo over the plugin's socket with the right token."""

    def pinned_digest(self) -> str | None:
        """The contract digest GetInfo must report (None: any non-empty one)."""

    def invalid_configs(self) -> list[tuple[str, str, str]]:
        """The invalid examples the plugin's own descriptor declares: (config JSON, path,
        rule)."""

    def prepare(self, op: str = "prepare-1") -> PreparedState | None:
        """NodePrepare (None, and no call, for an Operation-only plugin)."""

    def prepare_without_claim(self, op: str) -> Any:
        """A NodePrepare under the suite's own ids with no allocation (wrong step kind)."""

    def connect(
        self,
        op: str = "connect-1",
        *,
        config_json: str | None = None,
        interface_names: dict[str, str] | None = None,
        token: str | None = None,
    ) -> ConnectResponse: ...

    def remove(self, op: str = "remove-1", *, token: str | None = None) -> CleanupResponse: ...

    def unprepare(self, op: str = "unprepare-1") -> CleanupResponse: ...

    def inspect(self, operation_id: str, scope: str = "") -> InspectResponse: ...

    def wrong_tokens(self) -> list[str]:
        """Tokens the plugin must refuse."""

    # -- what the driver can see of the journal (None: it cannot) ------------------------

    def journal_rows(self) -> int | None: ...

    def journal_commits(self) -> int | None: ...

    # -- the plugin's process ------------------------------------------------------------

    def stop(self) -> None:
        """A clean shutdown; the kernel keeps its state."""

    def start(self, *, ready: bool = True) -> None:
        """Start again (recovery is the plugin's); ``ready=False``: wait only until it
        answers GetInfo, ready or not."""

    def kill_and_restart(self) -> None:
        """A crash between calls (nothing of the plugin's memory survives), then a start."""

    def crashing(self, hook: str, call: Callable[[], Any]) -> Boundary | None:
        """Run ``call`` (one hook) under the session's crash arm: where the plugin crashed
        (it is then down: ``recover``), or None when the call ran to its answer."""

    def recover(self) -> None:
        """Start the plugin again after a crash of ``crashing``."""

    # -- the journal ---------------------------------------------------------------------

    def damage_journal(self) -> None:
        """With the plugin stopped: overwrite the journal with garbage (and drop its
        companions); raises ``NotApplicable`` when the driver does not know the files."""

    def journal_still_damaged(self) -> bool:
        """The garbage is still what the journal holds (it was not recreated)."""

    def lose_journal(self) -> None:
        """With the plugin stopped: delete every file of the journal (and its lease)."""

    # -- the host ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]: ...

    def changes_since(self, baseline: dict[str, Any]) -> list[Any]: ...

    def plant_foreign(self, name: str) -> None:
        """An administrator's link with exactly the name the plugin is about to use."""

    def tamper(self) -> None:
        """An administrator changes a field the plugin set; ``NotApplicable`` when the
        target declares none."""

    def close(self) -> None: ...


class TargetIdentity:
    """What a driver or session knows of its plugin from the target's description (a
    ``Target`` or a ``WireTarget``: both name the plugin, its step kind, the connect's
    interface and an administrator's change, if any)."""

    target: Any

    @property
    def name(self) -> str:
        return str(self.target.name)

    @property
    def operation_only(self) -> bool:
        return bool(self.target.operation_only)

    @property
    def interface(self) -> str:
        return str(self.target.interface)

    @property
    def has_tamper(self) -> bool:
        """The target declares an administrator's change (external-change applies)."""
        return self.target.tamper is not None


class Driver(Protocol):
    """Sessions of one plugin, each on a fresh host."""

    @property
    def operation_only(self) -> bool: ...

    @property
    def has_tamper(self) -> bool: ...

    def session(
        self, label: str, crash: CrashArm | None = None
    ) -> AbstractContextManager[PluginUnderTest]: ...

    def crash_plan(self, pick: Callable[[list[Any]], list[Any]] | None = None) -> CrashPlan:
        """The runs of crash-at-every-boundary (``pick``: a sample of the listed points,
        where the driver lists them before running)."""

    def response_lost(self, hook: str) -> CrashArm:
        """A crash after ``hook``'s last change to the host, before its answer is sent:
        the caller never hears how it went. ``NotApplicable`` if the driver cannot."""
