"""Responses: typed handles from a plan's exports, and the replayable JSON of each response.

A succeeded create stores its response so that a retry replays it byte for byte; a
finished cleanup stores its own. Both are written and read back by the SDK's one codec
(``to_json_value`` / ``from_json_value``: snake_case field names, enums by value), so a
stored response that does not fit its type fails loudly instead of replaying something
else. Pure: no journal, no kernel.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .._codec import from_json_value, to_json_value
from .._plan import Plan, canonical_json, digest
from .._registry import Registration
from .._requests import (
    CleanupResponse,
    ConnectRequest,
    ConnectResponse,
    PrepareRequest,
    PrepareResponse,
)
from .._types import Hook, ResourceHandle
from ._validation import export_ports


def response_json(response: PrepareResponse | ConnectResponse | CleanupResponse) -> str:
    return canonical_json(to_json_value(response))


def handles(
    reg: Registration,
    request: PrepareRequest | ConnectRequest,
    plan: Plan,
    outputs: Mapping[str, Mapping[str, Any]],
    boot_id: str,
) -> dict[str, tuple[ResourceHandle, ...]]:
    """Typed handles for every export, with ids stable across retries and restarts."""
    env = request.envelope
    partition = reg.endpoint.state_namespace
    ports = export_ports(reg, env.hook)
    attachment = env.scope if env.hook is Hook.CONNECT_NETWORK else ""
    root = root_provenance(request)
    result: dict[str, tuple[ResourceHandle, ...]] = {}
    for port, refs in plan.exports.items():
        made = []
        for i, ref in enumerate(refs):
            description = outputs[ref.effect_id][ref.port]
            hid = "rh-" + digest([partition, env.scope, env.step, port, i])[7:31]
            made.append(
                ResourceHandle(
                    hid,
                    ports[port].type,
                    env.scope,
                    env.step,
                    attachment,
                    boot_id,
                    root,
                    canonical_json(description),
                )
            )
        result[port] = tuple(made)
    return result


def root_provenance(request: PrepareRequest | ConnectRequest) -> str:
    if request.allocation is not None:
        return request.allocation.root_id
    if isinstance(request, ConnectRequest):
        return ",".join(sorted({h.root_provenance for hs in request.inputs.values() for h in hs}))
    return ""


def replay(
    stored: str, request: PrepareRequest | ConnectRequest
) -> PrepareResponse | ConnectResponse:
    """The response a succeeded create stored, for the retry of the same request."""
    kind = PrepareResponse if isinstance(request, PrepareRequest) else ConnectResponse
    response: PrepareResponse | ConnectResponse = from_json_value(kind, json.loads(stored))
    return response


def cleanup_response(stored: str) -> CleanupResponse:
    """The response a finished cleanup stored."""
    response: CleanupResponse = from_json_value(CleanupResponse, json.loads(stored))
    return response
