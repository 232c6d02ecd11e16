"""What the runner tells operators: one log line and one metric per hook and per effect.

A hook's line carries the ids an operator searches by (plugin, hook, operation, scope,
step, claim, sandbox, trace); the effect lines written while the hook runs carry the
same ids, taken from the hook's context, plus the effect's own. A refusal is the hook's
line with its status code and reason. Nothing here reads or writes the journal.

``claim`` is the allocation root id of the request (the DRA claim's device), when the
request names one.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Iterator, Mapping

from .._errors import NetworkPluginError
from .._requests import CleanupRequest, ConnectRequest, PrepareRequest
from .._types import Hook
from ..store import EffectRecord, OperationRecord
from ..telemetry import Metrics, log_event

log = logging.getLogger("plugins.sdk.runner")

Request = PrepareRequest | ConnectRequest | CleanupRequest

# Outcomes that need an operator's eye: logged as warnings.
_BAD_OUTCOMES = frozenset(
    {"apply_failed", "capture_failed", "invalid_outputs", "undo_failed", "quarantined"}
)

# The ids of the hook running in this thread, for the effect lines it causes.
_CALL: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "networkplugin_call", default=None
)


def call_ids(plugin: str, hook: Hook, request: Request) -> dict[str, str]:
    """The ids of one call to ``hook`` (the RPC's, whatever the envelope claims)."""
    env = request.envelope
    claim = sandbox = ""
    if isinstance(request, PrepareRequest | ConnectRequest) and request.allocation is not None:
        claim = request.allocation.root_id
    if isinstance(request, ConnectRequest) and request.sandbox is not None:
        sandbox = request.sandbox.sandbox_id
    return {
        "plugin": plugin,
        "hook": hook.value,
        "operation": env.operation_id,
        "scope": env.scope,
        "step": env.step,
        "claim": claim,
        "sandbox": sandbox,
        "trace": env.trace_id,
    }


@contextlib.contextmanager
def hook_call(metrics: Metrics, plugin: str, hook: Hook, request: Request) -> Iterator[None]:
    """Time one hook, then log its line and report it, however it ends."""
    ids = call_ids(plugin, hook, request)
    token = _CALL.set(ids)
    started = time.perf_counter()
    outcome, reason, level = "OK", "", logging.INFO
    try:
        yield
    except NetworkPluginError as exc:
        outcome, reason, level = exc.code.name, exc.message, logging.WARNING
        raise
    except Exception as exc:  # the host logs the traceback; the line says which call it was
        outcome, reason, level = "INTERNAL", f"{type(exc).__name__}: {exc}", logging.ERROR
        raise
    finally:
        seconds = time.perf_counter() - started
        _CALL.reset(token)
        metrics.hook_finished(plugin, ids["hook"], outcome, seconds)
        log_event(
            log,
            level,
            f"hook {ids['hook']} {outcome}",
            **ids,
            outcome=outcome,
            duration_ms=round(seconds * 1000, 3),
            reason=reason,
        )


def effect_transition(
    metrics: Metrics,
    op: OperationRecord,
    rec: EffectRecord,
    outcome: str = "",
    reason: str = "",
) -> None:
    """``rec`` is in its new state; ``outcome`` (when it is one) is counted by kind."""
    if outcome:
        metrics.effect_finished(rec.kind, outcome)
    level = logging.WARNING if outcome in _BAD_OUTCOMES else logging.INFO
    if not log.isEnabledFor(level):
        return  # every transition passes here: build no line nobody will see
    ids = dict(_CALL.get() or {})
    # The operation the effect belongs to; a cleanup (or recovery) that changed it is
    # named as ``by``.
    caller = ids.get("operation", "")
    ids.update(operation=rec.operation_id, scope=op.scope, step=op.step)
    log_event(
        log,
        level,
        f"effect {rec.effect_id} {rec.state.value}",
        **ids,
        effect=rec.effect_id,
        kind=rec.kind,
        state=rec.state.value,
        outcome=outcome,
        namespace=rec.partition,
        attempt=rec.attempts or None,
        reason=reason,
        by=caller if caller != rec.operation_id else None,
    )
