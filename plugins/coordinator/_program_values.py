"""The coordinator program's values: its requests and answers, the checks of a request's
names and sandbox, and the journal form of an allocation (``_program`` uses them, ``_wire``
puts them on the wire)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from plugins.sdk import InvalidArgument, ResourceHandle, SandboxHandle, Sharing, from_json_value

from ._allocate import AllocatedDevice
from ._journal import Application, Claim

# Ids become parts of operation ids (``<scope>:<step>:<hook>:g1``) and preparation scopes
# (``<claim>.<step>``): no ':' or '.' of their own.
_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class ApplyRequest:
    attachment: str
    claim: str
    topology: str
    sandbox: SandboxHandle


@dataclass(frozen=True)
class OutputHandle:
    """One typed handle a step produced on one of its output ports."""

    step: str
    port: str
    id: str
    type: str
    description_json: str


@dataclass(frozen=True)
class ApplyResult:
    attachment: str
    state: str
    outputs: tuple[OutputHandle, ...]


NOT_RUN: Final = "NOT_RUN"
"""A removed application's receipt for a step that never ran: nothing to clean up."""


@dataclass(frozen=True)
class StepReceipt:
    step: str
    hook: str
    status: str  # CLEANED, PENDING or QUARANTINED; NOT_RUN in a finished removal
    detail: str


@dataclass(frozen=True)
class RemoveResult:
    attachment: str
    state: str  # removed, or removing while a receipt is not CLEANED
    receipts: tuple[StepReceipt, ...]


@dataclass(frozen=True)
class ApplicationStatus:
    attachment: str
    claim: str
    topology: str
    sandbox_id: str
    state: str
    error: str


@dataclass(frozen=True)
class OpenCall:
    operation_id: str
    plugin: str
    hook: str
    state: str
    error: str


@dataclass(frozen=True)
class CoordinatorStatus:
    ready: bool
    fault: str
    applications: tuple[ApplicationStatus, ...]
    open_calls: tuple[OpenCall, ...]
    claims: tuple[Claim, ...]


def check_name(value: str, what: str) -> str:
    if _NAME.fullmatch(value) is None:
        raise InvalidArgument(
            f"{what} {value!r} must be a DNS label: 1-63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return value


def one_line(text: str) -> str:
    return " ".join(text.split())


def allocation_to_json(a: AllocatedDevice) -> dict[str, Any]:
    return {
        "step": a.step,
        "device": a.device,
        "sourceDevice": a.source_device,
        "deviceType": a.device_type,
        "sharing": a.sharing.value,
        "attributes": dict(a.attributes),
        "consumed": dict(a.consumed),
        "policy": a.policy,
        "pool": a.pool,
        "driver": a.driver,
    }


def allocation_from_json(d: Mapping[str, Any]) -> AllocatedDevice:
    return AllocatedDevice(
        d["step"],
        d["device"],
        d["sourceDevice"],
        d["deviceType"],
        Sharing(d["sharing"]),
        d["attributes"],
        d["consumed"],
        d["policy"],
        d["pool"],
        d["driver"],
    )


def allocations_of(app: Application) -> dict[str, AllocatedDevice]:
    return {s: allocation_from_json(a) for s, a in app.request["allocations"].items()}


def sandbox_of(app: Application) -> SandboxHandle:
    sandbox: SandboxHandle = from_json_value(SandboxHandle, app.request["sandbox"])
    return sandbox


def flatten(
    outputs: Mapping[str, Mapping[str, Sequence[ResourceHandle]]],
) -> tuple[OutputHandle, ...]:
    return tuple(
        OutputHandle(step, port, h.id, h.type, h.description_json)
        for step, ports in outputs.items()
        for port, handles in sorted(ports.items())
        for h in handles
    )


def check_sandbox(sandbox: SandboxHandle) -> None:
    problems = []
    if not sandbox.sandbox_id:
        problems.append("sandbox.sandbox_id is empty")
    ns = sandbox.namespace
    if not ns.path.startswith("/"):
        problems.append(f"sandbox.network_namespace.path {ns.path!r} is not an absolute path")
    if not ns.boot_id:
        problems.append("sandbox.network_namespace.boot_id is empty")
    if problems:
        raise InvalidArgument("; ".join(problems))
