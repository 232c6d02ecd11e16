"""The only protobuf <-> value conversion of the coordinator program's contract.

Decoding a request refuses a missing message field with one ``InvalidArgument`` naming it;
the service (``_program``) checks the values themselves.
"""

from __future__ import annotations

from plugins.api.coordinator.v1alpha1 import pb
from plugins.sdk import InvalidArgument, NamespaceHandle, SandboxHandle

from ._journal import Claim
from ._program_values import (
    ApplicationStatus,
    ApplyRequest,
    ApplyResult,
    CoordinatorStatus,
    OpenCall,
    OutputHandle,
    RemoveResult,
    StepReceipt,
)


def apply_request_to_pb(r: ApplyRequest) -> pb.ApplyTopologyRequest:
    ns = r.sandbox.namespace
    return pb.ApplyTopologyRequest(
        attachment_id=r.attachment,
        claim_id=r.claim,
        topology=r.topology,
        sandbox=pb.SandboxHandle(
            sandbox_id=r.sandbox.sandbox_id,
            network_namespace=pb.NamespaceHandle(
                path=ns.path, device=ns.device, inode=ns.inode, boot_id=ns.boot_id
            ),
        ),
    )


def apply_request_from_pb(m: pb.ApplyTopologyRequest) -> ApplyRequest:
    if not m.HasField("sandbox") or not m.sandbox.HasField("network_namespace"):
        raise InvalidArgument("sandbox.network_namespace is required")
    ns = m.sandbox.network_namespace
    return ApplyRequest(
        m.attachment_id,
        m.claim_id,
        m.topology,
        SandboxHandle(
            m.sandbox.sandbox_id, NamespaceHandle(ns.path, ns.device, ns.inode, ns.boot_id)
        ),
    )


def apply_result_to_pb(r: ApplyResult) -> pb.ApplyTopologyResponse:
    return pb.ApplyTopologyResponse(
        attachment_id=r.attachment,
        state=r.state,
        outputs=[
            pb.OutputHandle(
                step=o.step, port=o.port, id=o.id, type=o.type, description_json=o.description_json
            )
            for o in r.outputs
        ],
    )


def apply_result_from_pb(m: pb.ApplyTopologyResponse) -> ApplyResult:
    return ApplyResult(
        m.attachment_id,
        m.state,
        tuple(OutputHandle(o.step, o.port, o.id, o.type, o.description_json) for o in m.outputs),
    )


def remove_result_to_pb(r: RemoveResult) -> pb.RemoveTopologyResponse:
    return pb.RemoveTopologyResponse(
        attachment_id=r.attachment,
        state=r.state,
        receipts=[
            pb.StepReceipt(step=x.step, hook=x.hook, status=x.status, detail=x.detail)
            for x in r.receipts
        ],
    )


def remove_result_from_pb(m: pb.RemoveTopologyResponse) -> RemoveResult:
    return RemoveResult(
        m.attachment_id,
        m.state,
        tuple(StepReceipt(x.step, x.hook, x.status, x.detail) for x in m.receipts),
    )


def status_to_pb(s: CoordinatorStatus) -> pb.GetStatusResponse:
    return pb.GetStatusResponse(
        ready=s.ready,
        fault=s.fault,
        applications=[
            pb.Application(
                attachment_id=a.attachment,
                claim_id=a.claim,
                topology=a.topology,
                sandbox_id=a.sandbox_id,
                state=a.state,
                error=a.error,
            )
            for a in s.applications
        ],
        open_calls=[
            pb.OpenCall(
                operation_id=c.operation_id,
                plugin=c.plugin,
                hook=c.hook,
                state=c.state,
                error=c.error,
            )
            for c in s.open_calls
        ],
        claims=[
            pb.Claim(resource=c.resource, holder=c.holder, mode=c.mode, group=c.group)
            for c in s.claims
        ],
    )


def status_from_pb(m: pb.GetStatusResponse) -> CoordinatorStatus:
    return CoordinatorStatus(
        m.ready,
        m.fault,
        tuple(
            ApplicationStatus(
                a.attachment_id, a.claim_id, a.topology, a.sandbox_id, a.state, a.error
            )
            for a in m.applications
        ),
        tuple(OpenCall(c.operation_id, c.plugin, c.hook, c.state, c.error) for c in m.open_calls),
        tuple(Claim(c.resource, c.holder, c.mode, c.group) for c in m.claims),
    )
