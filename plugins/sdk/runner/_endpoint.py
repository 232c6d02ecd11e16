"""The runner as one logical endpoint sees it: the host's ``EndpointService``.

Checks the envelope and the step kind, builds the handler's call view, and hands the
handler's plan to the runner; builds the typed response from the recorded outputs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._calls import ConnectCall, PrepareCall, RemoveCall, UnprepareCall
from .._errors import WrongStepKind
from .._plan import Plan
from .._registry import Registration
from .._requests import (
    CleanupRequest,
    CleanupResponse,
    ConnectRequest,
    ConnectResponse,
    EndpointInfo,
    InspectResponse,
    PrepareRequest,
    PrepareResponse,
)
from .._types import Hook, PreparedState, StepKind
from ._codec import handles
from ._observe import Request, hook_call
from ._validation import check_cleanup_plan, check_envelope

if TYPE_CHECKING:
    from ._runner import Runner

_ROOT_HOOKS = (Hook.NODE_PREPARE, Hook.NODE_UNPREPARE)


class EndpointRunner:
    """The runner as seen through one logical endpoint (the host's EndpointService)."""

    def __init__(self, runner: Runner, reg: Registration) -> None:
        self._runner = runner
        self.registration = reg

    def info(self) -> EndpointInfo:
        return self._runner.info(self.registration)

    def _check_hook(self, hook: Hook) -> None:
        reg = self.registration
        if hook in _ROOT_HOOKS and StepKind.ALLOCATION not in reg.descriptor.step_kinds:
            raise WrongStepKind(
                f"{reg.name}: {hook.value} is not a hook of an Operation-only plugin"
            )

    def _observed(self, hook: Hook, req: Request) -> contextlib.AbstractContextManager[None]:
        """Each hook's one log line and latency, whatever it answers."""
        return hook_call(self._runner.metrics, self.registration.name, hook, req)

    def node_prepare(self, req: PrepareRequest) -> PrepareResponse:
        with self._observed(Hook.NODE_PREPARE, req):
            return self._node_prepare(req)

    def connect_network(self, req: ConnectRequest) -> ConnectResponse:
        with self._observed(Hook.CONNECT_NETWORK, req):
            return self._connect_network(req)

    def remove_network(self, req: CleanupRequest) -> CleanupResponse:
        with self._observed(Hook.REMOVE_NETWORK, req):
            return self._remove_network(req)

    def node_unprepare(self, req: CleanupRequest) -> CleanupResponse:
        with self._observed(Hook.NODE_UNPREPARE, req):
            return self._node_unprepare(req)

    def _node_prepare(self, req: PrepareRequest) -> PrepareResponse:
        reg = self.registration
        check_envelope(req, Hook.NODE_PREPARE)
        self._check_hook(Hook.NODE_PREPARE)
        call = PrepareCall(
            req.envelope,
            reg.descriptor,
            reg.validator,
            req.config_json,
            req.allocation,
            req.requirements,
        )

        def respond(plan: Plan, outputs: Mapping[str, Mapping[str, Any]]) -> PrepareResponse:
            exported = handles(reg, req, plan, outputs, self._runner.boot_id)
            root = req.allocation.root_id if req.allocation else ""
            state = PreparedState(
                root, reg.name, req.envelope.scope, tuple(h for hs in exported.values() for h in hs)
            )
            return PrepareResponse(state)

        result = self._runner.run_create(
            reg, req, lambda: reg.endpoint.handler.node_prepare(call), respond
        )
        assert isinstance(result, PrepareResponse)
        return result

    def _connect_network(self, req: ConnectRequest) -> ConnectResponse:
        reg = self.registration
        check_envelope(req, Hook.CONNECT_NETWORK)
        call = ConnectCall(
            req.envelope,
            reg.descriptor,
            reg.validator,
            req.config_json,
            req.sandbox,
            req.inputs,
            req.interface_names,
            req.prepared,
            req.allocation,
            req.grants,
        )

        def respond(plan: Plan, outputs: Mapping[str, Mapping[str, Any]]) -> ConnectResponse:
            return ConnectResponse(handles(reg, req, plan, outputs, self._runner.boot_id))

        result = self._runner.run_create(
            reg, req, lambda: reg.endpoint.handler.connect_network(call), respond
        )
        assert isinstance(result, ConnectResponse)
        return result

    def _remove_network(self, req: CleanupRequest) -> CleanupResponse:
        reg = self.registration
        check_envelope(req, Hook.REMOVE_NETWORK)
        call = RemoveCall(req.envelope, reg.descriptor, reg.validator, req.target_operation_id)
        return self._runner.run_cleanup(
            reg,
            req,
            lambda: check_cleanup_plan(
                reg.endpoint.handler.remove_network(call), Hook.CONNECT_NETWORK
            ),
        )

    def _node_unprepare(self, req: CleanupRequest) -> CleanupResponse:
        reg = self.registration
        check_envelope(req, Hook.NODE_UNPREPARE)
        self._check_hook(Hook.NODE_UNPREPARE)
        call = UnprepareCall(req.envelope, reg.descriptor, reg.validator, req.target_operation_id)
        return self._runner.run_cleanup(
            reg,
            req,
            lambda: check_cleanup_plan(
                reg.endpoint.handler.node_unprepare(call), Hook.NODE_PREPARE
            ),
        )

    def inspect(self, operation_id: str, scope: str) -> InspectResponse:
        return self._runner.inspect(self.registration, operation_id, scope)

    def serving(self) -> bool:
        """The health service's answer: recovered, and the journal intact and writable."""
        return self._runner.serving()
