"""The coordinator's side of the Kubernetes API server, through lightkube.

``make_client`` builds the client (kubeconfig, in-cluster, or a server URL), its writes
managed by the driver's name. ``ClaimResolver`` reads a ResourceClaim at prepare and
checks it is the claim the kubelet named (uid), allocated for our driver, with one
``NetworkAttachment`` opaque config naming its topology (``ResolvedClaim``).
``ClaimStatusWriter`` applies our ``status.devices`` entries (KEP-4817).
``SlicePublisher`` publishes the node's devices as ResourceSlices, one pool per node.

Errors: ``ClaimError`` (this claim cannot be prepared as it stands), ``ApiUnavailable``
(retryable: the server did not answer, or answered 429/5xx), ``ApiRefused`` (any other
refusal, with the Status's code and reason). The RBAC each call needs is in
docs/kubernetes-api.md.
"""

from ._claims import (
    CONFIG_API_VERSION,
    CONFIG_KIND,
    AllocatedResult,
    ClaimError,
    ClaimResolver,
    ResolvedClaim,
    parse_attachment_config,
)
from ._client import (
    DEFAULT_TIMEOUT,
    ApiRefused,
    ApiUnavailable,
    KubeConfigError,
    api_call,
    make_client,
)
from ._slices import (
    MAX_ATTRIBUTES_AND_CAPACITIES,
    MAX_DEVICES_PER_SLICE,
    PCI_BUS_ID,
    PCIE_ROOT,
    PublishOutcome,
    RefusedDevice,
    SlicePublisher,
    slice_device,
)
from ._status import CONDITION_NETWORK_READY, CONDITION_READY, ClaimStatusWriter, DeviceStatus

__all__ = [
    "CONDITION_NETWORK_READY",
    "CONDITION_READY",
    "CONFIG_API_VERSION",
    "CONFIG_KIND",
    "DEFAULT_TIMEOUT",
    "MAX_ATTRIBUTES_AND_CAPACITIES",
    "MAX_DEVICES_PER_SLICE",
    "PCIE_ROOT",
    "PCI_BUS_ID",
    "AllocatedResult",
    "ApiRefused",
    "ApiUnavailable",
    "ClaimError",
    "ClaimResolver",
    "ClaimStatusWriter",
    "DeviceStatus",
    "KubeConfigError",
    "PublishOutcome",
    "RefusedDevice",
    "ResolvedClaim",
    "SlicePublisher",
    "api_call",
    "make_client",
    "parse_attachment_config",
    "slice_device",
]
