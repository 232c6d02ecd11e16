"""Reading a ResourceClaim at prepare: is it the claim the kubelet named, allocated for
us, and which topology does its opaque config ask for?

The kubelet names a claim by namespace, name and uid. A claim deleted and re-created
under the same name is a different claim: its uid differs and we refuse it, so a pod
never gets the devices of a claim it did not ask for.

Our opaque config (``status.allocation.devices.config[].opaque`` with our driver)::

    apiVersion: dra.networking/v1alpha1
    kind: NetworkAttachment
    topology: <NetworkTopology name>

Entries come from the DeviceClass (``FromClass``) or the claim (``FromClaim``); an
entry with ``requests`` applies to those requests only (a result of a ``firstAvailable``
subrequest, ``req/sub``, belongs to ``req``). Every result of ours must be covered, and
all must name the same topology: a claim whose devices would be wired by two
topologies is refused rather than half-prepared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from lightkube import Client
from lightkube.models.resource_v1 import DeviceAllocationConfiguration
from lightkube.resources.resource_v1 import ResourceClaim

from plugins.coordinator import ClaimDevice, ClaimProblem, KubeClaim

from ._client import ApiRefused, api_call

__all__ = [
    "CONFIG_API_VERSION",
    "CONFIG_KIND",
    "AllocatedResult",
    "ClaimError",
    "ClaimResolver",
    "ResolvedClaim",
    "parse_attachment_config",
]

CONFIG_API_VERSION: Final = "dra.networking/v1alpha1"
CONFIG_KIND: Final = "NetworkAttachment"
_CONFIG_KEYS: Final = frozenset({"apiVersion", "kind", "topology"})


class ClaimError(ClaimProblem):
    """This claim cannot be prepared as it stands (replaced, gone, not allocated for us,
    a bad config); retrying the same claim does not help."""


@dataclass(frozen=True)
class AllocatedResult:
    """One ``status.allocation.devices.results`` entry of our driver."""

    request: str
    pool: str
    device: str
    share_id: str = ""
    """The allocation's ``shareID`` (a device allocated more than once); empty if none."""
    admin_access: bool = False


@dataclass(frozen=True)
class ResolvedClaim:
    namespace: str
    name: str
    uid: str
    topology: str
    results: tuple[AllocatedResult, ...]
    pods: tuple[str, ...] = ()
    """UIDs of the pods the claim is reserved for (``status.reservedFor``)."""

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name} (uid {self.uid})"

    def kube_claim(self) -> KubeClaim:
        """The coordinator's view of this claim (``plugins.coordinator.KubeClaim``)."""
        devices = tuple(ClaimDevice(r.request, r.pool, r.device, r.share_id) for r in self.results)
        return KubeClaim(self.namespace, self.name, self.uid, self.topology, devices, self.pods)


def parse_attachment_config(parameters: object, where: str) -> str:
    """The topology named by one opaque ``NetworkAttachment`` config; :class:`ClaimError`
    naming the first thing wrong with it."""
    if not isinstance(parameters, Mapping):
        raise ClaimError(f"{where}: parameters must be an object, got {type(parameters).__name__}")
    unknown = sorted(set(parameters) - _CONFIG_KEYS)
    if unknown:
        raise ClaimError(f"{where}: unknown keys {unknown} (allowed: {sorted(_CONFIG_KEYS)})")
    if parameters.get("apiVersion") != CONFIG_API_VERSION:
        raise ClaimError(
            f"{where}: apiVersion is {parameters.get('apiVersion')!r}, expected {CONFIG_API_VERSION!r}"
        )
    if parameters.get("kind") != CONFIG_KIND:
        raise ClaimError(f"{where}: kind is {parameters.get('kind')!r}, expected {CONFIG_KIND!r}")
    if "topology" not in parameters:
        raise ClaimError(f"{where}: topology is missing")
    topology = parameters["topology"]
    if not isinstance(topology, str) or not topology:
        raise ClaimError(f"{where}: topology must be a non-empty string, got {topology!r}")
    return topology


class ClaimResolver:
    """Resolves the kubelet's claim references against the API server (RBAC:
    ``get`` on ``resource.k8s.io`` ``resourceclaims``)."""

    def __init__(self, client: Client, driver: str) -> None:
        self._client = client
        self._driver = driver

    def resolve(self, namespace: str, name: str, uid: str) -> ResolvedClaim:
        """The claim ``namespace/name``, checked to be ``uid`` and allocated for our driver.

        :class:`ClaimError` when it is not; ``ApiUnavailable`` when the API server
        cannot answer now (retryable)."""
        ref = f"ResourceClaim {namespace}/{name}"
        try:
            with api_call(f"get {ref}"):
                claim = self._client.get(ResourceClaim, name, namespace=namespace)
        except ApiRefused as e:
            if e.code == 404:
                raise ClaimError(f"{ref} (uid {uid}) no longer exists") from e
            raise
        found = claim.metadata.uid if claim.metadata else None
        if found != uid:
            raise ClaimError(f"{ref} was replaced: expected uid {uid}, found {found}")
        allocation = claim.status.allocation if claim.status else None
        if allocation is None or allocation.devices is None:
            raise ClaimError(f"{ref} (uid {uid}) is not allocated")
        results = tuple(
            AllocatedResult(r.request, r.pool, r.device, r.shareID or "", bool(r.adminAccess))
            for r in allocation.devices.results or ()
            if r.driver == self._driver
        )
        if not results:
            raise ClaimError(
                f"{ref} (uid {uid}) has no device allocated by driver {self._driver!r}"
            )
        topology = self._topology(ref, results, allocation.devices.config or ())
        pods = tuple(c.uid for c in (claim.status.reservedFor if claim.status else None) or ())
        return ResolvedClaim(namespace, name, uid, topology, results, pods)

    def _topology(
        self,
        ref: str,
        results: Sequence[AllocatedResult],
        configs: Sequence[DeviceAllocationConfiguration],
    ) -> str:
        ours = [
            (i, c) for i, c in enumerate(configs) if c.opaque and c.opaque.driver == self._driver
        ]
        named: dict[str, set[str]] = {}  # topology -> where it was named
        for result in results:
            applying = [(i, c) for i, c in ours if _applies(c.requests, result.request)]
            if not applying:
                raise ClaimError(
                    f"{ref}: no {CONFIG_KIND} config of driver {self._driver!r} "
                    f"applies to request {result.request!r}"
                )
            for index, config in applying:
                where = f"{ref} config[{index}] ({config.source})"
                assert config.opaque is not None  # ours holds opaque configs only
                topology = parse_attachment_config(config.opaque.parameters, where)
                named.setdefault(topology, set()).add(where)
        if len(named) > 1:
            listed = "; ".join(f"{t!r} by {', '.join(sorted(w))}" for t, w in sorted(named.items()))
            raise ClaimError(f"{ref}: configs name different topologies: {listed}")
        return next(iter(named))


def _applies(requests: Sequence[str] | None, request: str) -> bool:
    if not requests:
        return True
    parent = request.partition("/")[0]
    return request in requests or parent in requests
