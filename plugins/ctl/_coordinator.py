"""``coordinator apps|show|remove``: the coordinator program's applications, over its socket.

The CLI asks the coordinator (``GetStatus``, ``RemoveTopology``) and never reads its
journal: the coordinator is the one writer and the one that knows what is in flight.
Where its socket and token are comes from the coordinator's own config file, named by
the node config's ``coordinator`` key (``--coordinator-socket`` overrides the socket).

An open call belongs to an application when its scope is the attachment (a connect or
a removal) or one of the claim's preparation scopes (``<claim>.<step>``); a claim is
held for it when its holder is such a scope. A removed application holds nothing: its
claim id may have been applied again under a new attachment since.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from plugins.coordinator import (
    ApplicationStatus,
    Claim,
    CoordinatorCallError,
    CoordinatorClient,
    CoordinatorConfig,
    CoordinatorStatus,
    OpenCall,
    RemoveResult,
)
from plugins.sdk import NetworkPluginError
from plugins.sdk.host import read_token

from ._errors import CtlError, Exit, failed_call
from ._node import NodeConfig

JSON = Any
STATUS_TIMEOUT_S: Final = 10.0
REMOVE_TIMEOUT_S: Final = 300.0
"""A removal calls every step's plugin in turn, each within the coordinator's own deadline."""


@dataclass(frozen=True)
class CoordinatorAccess:
    """Where the coordinator answers and the token it wants."""

    socket: Path
    token: str


def coordinator_access(node: NodeConfig, socket: Path | None) -> CoordinatorAccess:
    """The socket and token of the coordinator's config (``socket`` overrides its socket)."""
    if node.coordinator_config is None:
        raise CtlError(
            Exit.USAGE,
            f"node config {node.path}: no 'coordinator' key naming the coordinator's config "
            "file (where its socket and token are)",
        )
    try:
        config = CoordinatorConfig.load(node.coordinator_config)
        token = read_token(config.token_file)
    except NetworkPluginError as exc:
        raise CtlError(Exit.USAGE, exc.message) from None
    return CoordinatorAccess((socket or config.socket).absolute(), token)


def _call_error(access: CoordinatorAccess, exc: CoordinatorCallError, timeout_s: float) -> CtlError:
    code, words = failed_call(exc.code, exc.message, peer="coordinator", timeout_s=timeout_s)
    return CtlError(code, f"coordinator {access.socket}: {words}")


def _socket_there(access: CoordinatorAccess) -> None:
    """A missing socket said as such (gRPC would only say it cannot connect)."""
    try:
        st = os.stat(access.socket)
    except OSError as exc:
        raise CtlError(
            Exit.UNREACHABLE,
            f"coordinator {access.socket}: {exc.strerror or exc} (coordinator down?)",
        ) from None
    if not stat.S_ISSOCK(st.st_mode):
        raise CtlError(Exit.USAGE, f"coordinator {access.socket}: not a Unix socket")


def status(access: CoordinatorAccess) -> CoordinatorStatus:
    """The coordinator's status; a damaged journal is exit 3 (it answers nothing else)."""
    _socket_there(access)
    with CoordinatorClient(access.socket, access.token, timeout=STATUS_TIMEOUT_S) as client:
        try:
            found = client.status()
        except CoordinatorCallError as exc:
            raise _call_error(access, exc, STATUS_TIMEOUT_S) from None
    if found.fault:
        raise CtlError(
            Exit.JOURNAL, f"coordinator {access.socket}: its journal is damaged: {found.fault}"
        )
    return found


def remove(access: CoordinatorAccess, attachment: str) -> RemoveResult:
    """Ask the coordinator to remove ``attachment``; refused (exit 4) while it recovers."""
    if not status(access).ready:
        raise CtlError(
            Exit.UNREACHABLE,
            f"coordinator {access.socket}: recovering, not ready for requests; nothing was "
            f"asked: run the remove again once 'coordinator apps' answers",
        )
    with CoordinatorClient(access.socket, access.token, timeout=REMOVE_TIMEOUT_S) as client:
        try:
            return client.remove(attachment)
        except CoordinatorCallError as exc:
            raise _call_error(access, exc, REMOVE_TIMEOUT_S) from None


def _scope_and_step(operation: str) -> tuple[str, str]:
    """An operation id's scope and step (``<scope>:<step>:<hook>:g<generation>``)."""
    parts = operation.split(":")
    return (parts[0], parts[1]) if len(parts) == 4 else ("", "")


def _owns(app: ApplicationStatus, scope: str) -> bool:
    if scope == app.attachment:
        return True
    return app.state != "removed" and scope.startswith(f"{app.claim}.")


def _call(call: OpenCall) -> dict[str, JSON]:
    scope, step = _scope_and_step(call.operation_id)
    return {
        "operation": call.operation_id,
        "scope": scope,
        "step": step,
        "plugin": call.plugin,
        "hook": call.hook,
        "state": call.state,
        "error": call.error,
    }


def _claim(claim: Claim) -> dict[str, JSON]:
    return {
        "resource": claim.resource,
        "holder": claim.holder,
        "mode": claim.mode,
        "group": claim.group,
    }


def application_rows(found: CoordinatorStatus) -> list[dict[str, JSON]]:
    """``coordinator apps``: every application, with its open calls and the claims it holds."""
    return [_application(found, app) for app in found.applications]


def _application(found: CoordinatorStatus, app: ApplicationStatus) -> dict[str, JSON]:
    return {
        "attachment": app.attachment,
        "claim": app.claim,
        "topology": app.topology,
        "sandbox": app.sandbox_id,
        "state": app.state,
        "error": app.error,
        "openCalls": [
            _call(c) for c in found.open_calls if _owns(app, _scope_and_step(c.operation_id)[0])
        ],
        "claims": [_claim(c) for c in found.claims if _owns(app, c.holder)],
    }


def application_detail(found: CoordinatorStatus, attachment: str) -> dict[str, JSON]:
    """``coordinator show APP``; an attachment the coordinator never applied is exit 2."""
    for app in found.applications:
        if app.attachment == attachment:
            return _application(found, app)
    raise CtlError(Exit.USAGE, f"application {attachment}: the coordinator never applied it")


def removal(result: RemoveResult) -> dict[str, JSON]:
    """``coordinator remove APP``'s answer: its state and every cleanup receipt, in order."""
    return {
        "attachment": result.attachment,
        "state": result.state,
        "receipts": [
            {"step": r.step, "hook": r.hook, "status": r.status, "detail": r.detail}
            for r in result.receipts
        ],
    }


def removal_exit(result: RemoveResult) -> Exit:
    """0 when removed; 1 while the coordinator keeps it removing (a receipt neither CLEANED nor
    NOT_RUN)."""
    return Exit.OK if result.state == "removed" else Exit.FINDINGS
