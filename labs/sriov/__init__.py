"""The SR-IOV lab: NIC hosts from an Ansible inventory, provisioned and checked over SSH.

    inventory = load_inventory("inventories/emulated.yml")    # InventoryError: one line per problem
    remote = {h.name: connect(h) for h in inventory}           # testinfra hosts
    before = {h.name: snapshot(h, remote[h.name]) for h in inventory}
    provision(inventory).check()                                # ansible-runner; ProvisionError
    assert check_provisioned(host, remote[host.name]) == []
    teardown(inventory).check()
    assert check_no_trace(host, remote[host.name], before[host.name]) == []

See docs/labs.md for the inventory keys, what provisioning does and the checks.
"""

from typing import TYPE_CHECKING

from plugins.sdk import first_use_exports

from ._artifacts import CACHE_DIR, Distribution, DistributionError, build_distribution
from ._inventory import (
    CAPABILITIES,
    DEFAULT_HOST_NETNS,
    HOST_GROUP,
    Inventory,
    InventoryError,
    LabHost,
    PeerPort,
    PhysicalFunction,
    load_inventory,
)
from ._provision import (
    HostOutcome,
    ProvisionError,
    ProvisionResult,
    ansible_inventory,
    distributions,
    provision,
    teardown,
)
from ._role import ANSIBLE_DIR, role_defaults

# testinfra (which pytest rewrites as a plugin of its own) is imported with the first name
# that needs it, never with the root: a program that only reads an inventory (harness.rig,
# sizing its workers before pytest starts) must not import it before pytest does.
if TYPE_CHECKING:
    from ._checks import (
        MARKER_PREFIX,
        HostState,
        PfState,
        changes_since,
        check_no_trace,
        check_provisioned,
        connect,
        ownership_evidence,
        snapshot,
    )
    from ._lab import (
        SriovLab,
        SriovLabUnavailable,
        agent_command,
        lacking,
        remote_host,
        ssh_command,
        traffic_peer,
    )

__all__ = [
    "ANSIBLE_DIR",
    "CACHE_DIR",
    "CAPABILITIES",
    "DEFAULT_HOST_NETNS",
    "HOST_GROUP",
    "MARKER_PREFIX",
    "Distribution",
    "DistributionError",
    "HostOutcome",
    "HostState",
    "Inventory",
    "InventoryError",
    "LabHost",
    "PeerPort",
    "PfState",
    "PhysicalFunction",
    "ProvisionError",
    "ProvisionResult",
    "SriovLab",
    "SriovLabUnavailable",
    "agent_command",
    "ansible_inventory",
    "build_distribution",
    "changes_since",
    "check_no_trace",
    "check_provisioned",
    "connect",
    "distributions",
    "lacking",
    "load_inventory",
    "ownership_evidence",
    "provision",
    "remote_host",
    "role_defaults",
    "snapshot",
    "ssh_command",
    "teardown",
    "traffic_peer",
]

_MODULE_OF = {
    "MARKER_PREFIX": "_checks",
    "HostState": "_checks",
    "PfState": "_checks",
    "changes_since": "_checks",
    "check_no_trace": "_checks",
    "check_provisioned": "_checks",
    "connect": "_checks",
    "ownership_evidence": "_checks",
    "snapshot": "_checks",
    "SriovLab": "_lab",
    "SriovLabUnavailable": "_lab",
    "agent_command": "_lab",
    "lacking": "_lab",
    "remote_host": "_lab",
    "ssh_command": "_lab",
    "traffic_peer": "_lab",
}

# Hidden from mypy, which would otherwise accept any name imported from here; the
# TYPE_CHECKING imports above type them.
if not TYPE_CHECKING:
    __getattr__, __dir__ = first_use_exports(__name__, _MODULE_OF, globals(), __all__)
