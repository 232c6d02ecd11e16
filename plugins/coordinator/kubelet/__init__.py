"""The kubelet side of the coordinator's Kubernetes adapter: a DRA plugin the kubelet
registers through its plugin watcher.

``KubeletPlugin`` serves the kubelet's DRA service (v1 and v1beta1) on
``<plugins_dir>/<driver>/dra.sock``, then ``pluginregistration.Registration`` on
``<registry_dir>/<driver>-reg.sock`` (with the pod's UID, ``dra-<uid>.sock`` and
``<driver>-<uid>-reg.sock``: the kubelet's rolling-update naming); optionally ``v1alpha1.DRAResourceHealth`` from a
``HealthSource`` (``DeviceHealthBoard`` is one). The kubelet's calls reach a
``ClaimPreparer`` as ``ClaimRef`` values, version-neutral, and its answers
(``PrepareOutcome`` of ``PreparedDevice``) go back per claim: no claim, malformed
request or handler exception fails the RPC.
"""

from ._dra import (
    ClaimPreparer,
    ClaimRef,
    DRAPluginV1,
    DRAPluginV1beta1,
    PreparedDevice,
    PrepareOutcome,
    checked_claims,
)
from ._health import (
    HEALTH_STATES,
    DeviceHealthBoard,
    Health,
    HealthServicer,
    HealthSource,
    health_response,
)
from ._plugin import (
    DEFAULT_PLUGINS_DIR,
    DEFAULT_REGISTRY_DIR,
    KubeletPlugin,
    check_driver_name,
    dra_socket_path,
    registration_socket_path,
)
from ._registration import (
    PLUGIN_TYPE,
    SUPPORTED_VERSIONS,
    RegistrationEvent,
    RegistrationServicer,
)

__all__ = [
    "DEFAULT_PLUGINS_DIR",
    "DEFAULT_REGISTRY_DIR",
    "HEALTH_STATES",
    "PLUGIN_TYPE",
    "SUPPORTED_VERSIONS",
    "ClaimPreparer",
    "ClaimRef",
    "DRAPluginV1",
    "DRAPluginV1beta1",
    "DeviceHealthBoard",
    "Health",
    "HealthServicer",
    "HealthSource",
    "KubeletPlugin",
    "PrepareOutcome",
    "PreparedDevice",
    "RegistrationEvent",
    "RegistrationServicer",
    "check_driver_name",
    "checked_claims",
    "dra_socket_path",
    "health_response",
    "registration_socket_path",
]
