"""The durable operation runner, effect executor contract and crash points."""

from ._crash import (
    ENV_ARM,
    ENV_MODE,
    ENV_TRACE,
    NO_CRASH,
    RECOVERY_HOOK,
    UNSCOPED,
    Commit,
    CrashMode,
    CrashPoint,
    CrashPoints,
    Owner,
    Phase,
    PhaseKind,
    SimulatedCrash,
)
from ._effects import (
    EffectContext,
    EffectExecutor,
    EffectRegistry,
    EvidenceScan,
    Observation,
    UndoOutcome,
    UndoResult,
    scope_evidence,
)
from ._endpoint import EndpointRunner
from ._runner import Runner
from ._semantic import request_semantics, semantic_digest

__all__ = [
    "ENV_ARM",
    "ENV_MODE",
    "ENV_TRACE",
    "NO_CRASH",
    "RECOVERY_HOOK",
    "UNSCOPED",
    "Commit",
    "CrashMode",
    "CrashPoint",
    "CrashPoints",
    "EffectContext",
    "EffectExecutor",
    "EffectRegistry",
    "EndpointRunner",
    "EvidenceScan",
    "Observation",
    "Owner",
    "Phase",
    "PhaseKind",
    "Runner",
    "SimulatedCrash",
    "UndoOutcome",
    "UndoResult",
    "request_semantics",
    "scope_evidence",
    "semantic_digest",
]
