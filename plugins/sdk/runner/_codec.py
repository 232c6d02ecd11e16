"""Responses: typed handles from a plan's exports, and the replayable JSON of each response.

A succeeded create stores its response so that a retry replays it byte for byte; a
finished cleanup stores its own. Pure: no journal, no kernel.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .._plan import Plan, canonical_json, digest
from .._registry import Registration
from .._requests import (
    CleanupResponse,
    CleanupStatus,
    ConnectRequest,
    ConnectResponse,
    EffectState,
    EffectStatus,
    PrepareRequest,
    PrepareResponse,
)
from .._types import Hook, PreparedState, ResourceHandle
from ._semantic import to_json_value
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
    data = json.loads(stored)
    if isinstance(request, PrepareRequest):
        ps = data["prepared_state"]
        return PrepareResponse(
            PreparedState(
                ps["root_id"],
                ps["plugin"],
                ps["preparation_id"],
                tuple(ResourceHandle(**h) for h in ps["handles"]),
            ),
            tuple(data["cdi_device_ids"]),
        )
    return ConnectResponse(
        {port: tuple(ResourceHandle(**h) for h in hs) for port, hs in data["outputs"].items()}
    )


def cleanup_response(stored: str) -> CleanupResponse:
    """The response a finished cleanup stored."""
    data = json.loads(stored)
    return CleanupResponse(
        CleanupStatus(data["status"]),
        data["detail"],
        tuple(
            EffectStatus(e["effect_id"], e["kind"], EffectState(e["state"]), e["detail"])
            for e in data["effects"]
        ),
    )
