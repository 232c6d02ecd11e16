"""Semantic digests: what makes two requests "the same operation".

Inputs (blueprint 5.2): logical plugin identity, hook, immutable preparation or
attachment identity, allocation/config/input-handle meaning, assigned names and
desired generation. Trace ids, deadlines, coordinator epochs and authentication
bytes are deliberately absent: a retry that differs only in those is the same
operation and replays.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Any

from .._plan import digest
from .._requests import CleanupRequest, ConnectRequest, PrepareRequest
from .._types import OperationEnvelope

Request = PrepareRequest | ConnectRequest | CleanupRequest


def to_json_value(value: Any) -> Any:
    """Plain JSON for dataclasses, mappings, sequences and enums (no live objects)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    return value


def _config(raw: str) -> Any:
    # Only called after strict validation, so this parses; whitespace is not semantic.
    return json.loads(raw)


def request_semantics(plugin_identity: str, request: Request) -> dict[str, Any]:
    env: OperationEnvelope = request.envelope
    meaning: dict[str, Any] = {
        "plugin": plugin_identity,
        "hook": env.hook.value,
        "scope": env.scope,
        "step": env.step,
        "generation": env.generation,
    }
    if isinstance(request, PrepareRequest):
        meaning |= {
            "allocation": to_json_value(request.allocation),
            "config": _config(request.config_json),
            "requirements": to_json_value(request.requirements),
        }
    elif isinstance(request, ConnectRequest):
        meaning |= {
            "allocation": to_json_value(request.allocation),
            "config": _config(request.config_json),
            "sandbox": to_json_value(request.sandbox),
            "inputs": to_json_value(request.inputs),
            "interfaceNames": to_json_value(request.interface_names),
            "prepared": to_json_value(request.prepared),
            "grants": sorted(to_json_value(request.grants), key=json.dumps),
        }
    else:
        meaning["target"] = request.target_operation_id
    return meaning


def semantic_digest(plugin_identity: str, request: Request) -> str:
    return digest(request_semantics(plugin_identity, request))
