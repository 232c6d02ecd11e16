"""One rooted error hierarchy for the SDK, the runner and the host.

Every error carries the gRPC status category it maps to and whether a caller may
retry the same operation identity. The host translates these to gRPC status codes
in exactly one place; nothing else in the SDK knows about gRPC.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import ClassVar


class Code(enum.Enum):
    """Status categories; names match gRPC status codes one to one."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    ABORTED = "ABORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    UNAVAILABLE = "UNAVAILABLE"
    NOT_FOUND = "NOT_FOUND"
    DATA_LOSS = "DATA_LOSS"
    INTERNAL = "INTERNAL"


class NetworkPluginError(Exception):
    """Root of every error the SDK raises on purpose."""

    code: ClassVar[Code] = Code.INTERNAL
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, details: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, str] = dict(details or {})


class InvalidArgument(NetworkPluginError):
    """The request itself is malformed; retrying it unchanged cannot succeed."""

    code = Code.INVALID_ARGUMENT


class ConfigError(InvalidArgument):
    """A plugin config failed strict decoding.

    ``path`` is a JSONPath-like location (``$.vf.vlan``, ``$.members[1]``) and
    ``rule`` names the violated rule (``unknown-key``, ``range``, ...).
    """

    def __init__(self, path: str, rule: str, message: str) -> None:
        super().__init__(f"config {path}: {message} [{rule}]", details={"path": path, "rule": rule})
        self.path = path
        self.rule = rule


class PlanError(NetworkPluginError):
    """A handler produced an invalid plan. Nothing was recorded or executed."""

    code = Code.INTERNAL

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid plan: " + "; ".join(problems))
        self.problems = list(problems)


class FailedPrecondition(NetworkPluginError):
    """The request is well formed but the node or call state does not permit it."""

    code = Code.FAILED_PRECONDITION


class WrongStepKind(FailedPrecondition):
    """A hook was called on a plugin whose step kind does not have that hook."""


class PrerequisiteError(FailedPrecondition):
    """A call-view prerequisite check (blueprint 4.2) failed."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(f"{check}: {message}", details={"check": check})
        self.check = check


class RegistrationError(NetworkPluginError):
    """A registration (or the set of registrations) is invalid; the host must not serve."""

    code = Code.INTERNAL


class Unauthenticated(NetworkPluginError):
    code = Code.UNAUTHENTICATED


class Aborted(NetworkPluginError):
    """Fenced, stale or conflicting with other work on the same scope or resource."""

    code = Code.ABORTED


class AlreadyExists(NetworkPluginError):
    """An operation id was reused with different semantics."""

    code = Code.ALREADY_EXISTS


class Unavailable(NetworkPluginError):
    """Recovering, or the scope is unavailable pending reconciliation."""

    code = Code.UNAVAILABLE
    retryable = True


class NotFound(NetworkPluginError):
    code = Code.NOT_FOUND


class DataLoss(NetworkPluginError):
    """Durable state is damaged or lost; retrying cannot help until an operator acts.

    Distinct from ``Unavailable`` (recovering, or a fault that clears by itself) so a
    client can tell "retry later" from "page someone".
    """

    code = Code.DATA_LOSS
