"""The durable operation runner, effect executor contract and crash points."""

from ._crash import CrashMode, CrashPoints, SimulatedCrash
from ._effects import (
    EffectContext,
    EffectExecutor,
    EffectRegistry,
    Observation,
    UndoOutcome,
    UndoResult,
)
from ._runner import EndpointRunner, Runner
from ._semantic import request_semantics, semantic_digest

__all__ = [
    "CrashMode",
    "CrashPoints",
    "EffectContext",
    "EffectExecutor",
    "EffectRegistry",
    "EndpointRunner",
    "Observation",
    "Runner",
    "SimulatedCrash",
    "UndoOutcome",
    "UndoResult",
    "request_semantics",
    "semantic_digest",
]
