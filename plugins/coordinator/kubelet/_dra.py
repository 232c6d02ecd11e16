"""The kubelet's DRA service (v1 and v1beta1), translated to one version-neutral handler.

The kubelet batches the claims of one pod that this driver allocated and expects an
entry for every claim uid in the answer: a claim left out is retried, and an RPC that
fails with a status makes the kubelet drop the whole response. So nothing a claim or
the handler does fails the RPC: a malformed claim (empty uid, namespace or name; a uid
listed twice) gets its own error and never reaches the handler, a handler exception
becomes every remaining claim's error, and a claim the handler forgot gets one too.

The two versions differ only in ``Device.share_id`` (v1 has it, with explicit presence;
v1beta1 drops it). Decoding, checking and calling the handler happen once
(``prepare_claims``/``unprepare_claims`` below); each servicer only encodes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc

from plugins.api.kubelet.dra.v1 import dra_pb2 as v1
from plugins.api.kubelet.dra.v1 import dra_pb2_grpc as v1_grpc
from plugins.api.kubelet.dra.v1beta1 import dra_pb2 as v1beta1
from plugins.api.kubelet.dra.v1beta1 import dra_pb2_grpc as v1beta1_grpc

log = logging.getLogger("plugins.coordinator.kubelet")


@dataclass(frozen=True)
class ClaimRef:
    """A ResourceClaim as the kubelet names it."""

    uid: str
    namespace: str
    name: str


@dataclass(frozen=True)
class PreparedDevice:
    """One device the runtime must make available for a prepared claim.

    ``requests`` empty means every request of the claim; ``share_id`` empty means none
    (it is sent only on v1, which has the field).
    """

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...] = ()
    share_id: str = ""


@dataclass(frozen=True)
class PrepareOutcome:
    """A claim's result: its devices, or ``error`` (then the devices are not sent)."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class ClaimPreparer(Protocol):
    """What the coordinator does for the kubelet's calls. Called from gRPC worker threads,
    possibly for two pods at once: an implementation guards its own state."""

    def prepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareOutcome]:
        """An outcome per claim uid, for every claim given."""
        ...

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """An error per claim uid, ``""`` when the claim is unprepared (or never was)."""
        ...


class _WireClaim(Protocol):
    """``Claim`` of either version."""

    @property
    def namespace(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def name(self) -> str: ...


def checked_claims(wire: Sequence[_WireClaim]) -> tuple[list[ClaimRef], dict[str, str]]:
    """The well-formed claims of a request, and an error per claim uid that is not.

    A uid listed twice is refused for both listings (the kubelet never sends one; a
    request that does is not the kubelet's, and neither listing is trusted). A claim
    without a uid answers under the key ``""``, the only key it could have.
    """
    counts: dict[str, int] = {}
    for claim in wire:
        counts[claim.uid] = counts.get(claim.uid, 0) + 1
    good: list[ClaimRef] = []
    errors: dict[str, str] = {}
    for claim in wire:
        where = f"claim {claim.namespace or '?'}/{claim.name or '?'}"
        if not claim.uid:
            errors[""] = f"{where}: uid is empty"
        elif counts[claim.uid] > 1:
            errors[claim.uid] = (
                f"{where}: uid {claim.uid} is listed {counts[claim.uid]} times in one request"
            )
        elif not claim.namespace or not claim.name:
            missing = "namespace" if not claim.namespace else "name"
            errors[claim.uid] = f"claim uid {claim.uid}: {missing} is empty"
        else:
            good.append(ClaimRef(uid=claim.uid, namespace=claim.namespace, name=claim.name))
    return good, errors


def prepare_claims(
    preparer: ClaimPreparer, wire: Sequence[_WireClaim]
) -> dict[str, PrepareOutcome]:
    """An outcome for every claim uid of the request, whatever the handler does."""
    claims, errors = checked_claims(wire)
    results = {uid: PrepareOutcome(error=error) for uid, error in errors.items()}
    if not claims:
        return results
    try:
        answered = dict(preparer.prepare_claims(claims))
    except Exception as exc:
        log.error("preparing claims %s failed", _uids(claims), exc_info=exc)
        reason = f"preparing failed: {type(exc).__name__}: {exc}"
        return results | {c.uid: PrepareOutcome(error=reason) for c in claims}
    for claim in claims:
        outcome = answered.pop(claim.uid, None)
        if not isinstance(outcome, PrepareOutcome):
            log.error("prepare of claim %s returned %r, not an outcome", claim.uid, outcome)
            outcome = PrepareOutcome(error="the coordinator gave no result for this claim")
        results[claim.uid] = outcome
    if answered:
        log.warning("prepare answered claims that were not asked for: %s", sorted(answered))
    return results


def unprepare_claims(preparer: ClaimPreparer, wire: Sequence[_WireClaim]) -> dict[str, str]:
    """An error (``""``: done) for every claim uid of the request, whatever the handler does."""
    claims, results = checked_claims(wire)
    if not claims:
        return results
    try:
        answered = dict(preparer.unprepare_claims(claims))
    except Exception as exc:
        log.error("unpreparing claims %s failed", _uids(claims), exc_info=exc)
        reason = f"unpreparing failed: {type(exc).__name__}: {exc}"
        return results | {c.uid: reason for c in claims}
    for claim in claims:
        error = answered.pop(claim.uid, None)
        if not isinstance(error, str):
            log.error("unprepare of claim %s returned %r, not a string", claim.uid, error)
            error = "the coordinator gave no result for this claim"
        results[claim.uid] = error
    if answered:
        log.warning("unprepare answered claims that were not asked for: %s", sorted(answered))
    return results


def _uids(claims: Sequence[ClaimRef]) -> str:
    return ", ".join(c.uid for c in claims)


def _log_failures(rpc: str, errors: Mapping[str, str]) -> None:
    for uid, error in sorted(errors.items()):
        if error:
            log.warning("%s: claim %s: %s", rpc, uid or "(no uid)", error)


def _prepared(
    response: v1.NodePrepareResourcesResponse | v1beta1.NodePrepareResourcesResponse,
    outcomes: Mapping[str, PrepareOutcome],
) -> None:
    """Fill either version's response (the same fields; v1beta1 has no ``share_id``: a
    kubelet that speaks only v1beta1 cannot be told which share of a device this is, and
    does not ask)."""
    _log_failures("NodePrepareResources", {u: o.error for u, o in outcomes.items()})
    shares = isinstance(response, v1.NodePrepareResourcesResponse)
    for uid, outcome in outcomes.items():
        entry = response.claims[uid]
        if outcome.error:
            entry.error = outcome.error
            continue
        for device in outcome.devices:
            out = entry.devices.add(
                request_names=device.requests,
                pool_name=device.pool,
                device_name=device.device,
                cdi_device_ids=device.cdi_device_ids,
            )
            if shares and device.share_id:
                out.share_id = device.share_id  # type: ignore[union-attr]


def _unprepared(
    response: v1.NodeUnprepareResourcesResponse | v1beta1.NodeUnprepareResourcesResponse,
    errors: Mapping[str, str],
) -> None:
    _log_failures("NodeUnprepareResources", errors)
    for uid, error in errors.items():
        response.claims[uid].error = error


class DRAPluginV1(v1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``."""

    def __init__(self, preparer: ClaimPreparer) -> None:
        self._preparer = preparer

    def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodePrepareResourcesResponse:
        response = v1.NodePrepareResourcesResponse()
        _prepared(response, prepare_claims(self._preparer, request.claims))
        return response

    def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodeUnprepareResourcesResponse:
        response = v1.NodeUnprepareResourcesResponse()
        _unprepared(response, unprepare_claims(self._preparer, request.claims))
        return response


class DRAPluginV1beta1(v1beta1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``: v1 without ``share_id``."""

    def __init__(self, preparer: ClaimPreparer) -> None:
        self._preparer = preparer

    def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodePrepareResourcesResponse:
        response = v1beta1.NodePrepareResourcesResponse()
        _prepared(response, prepare_claims(self._preparer, request.claims))
        return response

    def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        response = v1beta1.NodeUnprepareResourcesResponse()
        _unprepared(response, unprepare_claims(self._preparer, request.claims))
        return response
