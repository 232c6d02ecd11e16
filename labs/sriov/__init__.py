"""The SR-IOV lab: NIC hosts from an Ansible inventory, provisioned and checked over SSH.

``load_inventory`` reads and checks an inventory (docs/labs.md). The provisioning and
host-check parts arrive in the modules below as they are built.
"""

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

__all__ = [
    "CAPABILITIES",
    "DEFAULT_HOST_NETNS",
    "HOST_GROUP",
    "Inventory",
    "InventoryError",
    "LabHost",
    "PeerPort",
    "PhysicalFunction",
    "load_inventory",
]
