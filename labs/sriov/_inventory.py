"""The SR-IOV lab's inventory: an Ansible YAML inventory of NIC hosts, read and checked.

The file is an ordinary Ansible inventory (``ansible-inventory -i FILE`` reads it and the
playbooks use its variables as they are), restricted to one shape so the rig can rely on
it: hosts in the group ``sriov_hosts``, connection keys and the lab's ``sriov_*`` keys
per host, or shared in ``all.vars`` / ``sriov_hosts.vars``. The shape is
``schemas/sriov-inventory.schema.json``; what a schema cannot say (a connection key given
nowhere, a PCI address or netdev twice on a host, a peer naming no host) is checked here,
once the shape is right, and reported the same way: one line per problem,
``<path>: <why> [<rule>]``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from plugins.sdk import (
    DocumentError,
    DocumentSchema,
    SchemaProblem,
    YAMLLoadError,
    load_yaml_mapping,
)

__all__ = [
    "CAPABILITIES",
    "DEFAULT_HOST_NETNS",
    "DEFAULT_PYTHON",
    "HOST_GROUP",
    "INVENTORY_SCHEMA",
    "Inventory",
    "InventoryError",
    "LabHost",
    "PeerPort",
    "PhysicalFunction",
    "load_inventory",
]

INVENTORY_SCHEMA = "sriov-inventory.schema.json"
HOST_GROUP = "sriov_hosts"
DEFAULT_HOST_NETNS = "/proc/1/ns/net"
DEFAULT_PYTHON = "3.11"
DEFAULT_SSH_PORT = 22
# What a lab may promise per PF; the conformance checks needing one a PF lacks expect the
# kernel's refusal instead of success (docs/labs.md).
CAPABILITIES = (
    "vf_mac",
    "vf_vlan",
    "vf_spoofchk",
    "vf_trust",
    "vf_rate",
    "vf_link_state",
    "bond_of_vfs",
    "vlan_on_vf",
    "vlan_on_bond",
)
# Connection keys a host must end up with, from itself or a group's vars.
_REQUIRED_CONNECTION = ("ansible_host", "ansible_user", "ansible_ssh_private_key_file")


class InventoryError(ValueError):
    """An inventory that cannot be used: names the file and every problem, one line each."""

    def __init__(self, source: str, lines: tuple[str, ...]) -> None:
        self.source = source
        self.lines = lines
        super().__init__(f"{source}: " + "; ".join(lines))


@dataclass(frozen=True)
class PeerPort:
    """The port cabled to a PF: a netdev on ``host`` (an inventory host name)."""

    host: str
    netdev: str


@dataclass(frozen=True)
class PhysicalFunction:
    pci: str
    vfs: int
    model: str
    driver: str
    vf_driver: str
    capabilities: frozenset[str]
    netdev: str | None = None
    peer: PeerPort | None = None

    def can(self, capability: str) -> bool:
        return capability in self.capabilities


@dataclass(frozen=True)
class LabHost:
    name: str
    address: str
    port: int
    user: str
    key_file: Path
    pfs: tuple[PhysicalFunction, ...]
    host_netns: str = DEFAULT_HOST_NETNS
    python: str = DEFAULT_PYTHON
    ssh_args: str = ""
    emulated: bool = False  # labs.emulated_host: the rig boots it for the run
    # The host's Ansible variables as the inventory gives them (group vars merged in, the
    # key path resolved): what the playbooks see.
    variables: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def kernel_url(self) -> str:
        """The services' ``kernel`` key on this host (docs/deploying.md)."""
        return f"linux://{self.host_netns}"

    def pf(self, pci: str) -> PhysicalFunction:
        for pf in self.pfs:
            if pf.pci == pci:
                return pf
        raise KeyError(f"{self.name} has no PF {pci}")


@dataclass(frozen=True)
class Inventory:
    path: Path
    hosts: tuple[LabHost, ...]

    def host(self, name: str) -> LabHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(f"{self.path} has no host {name!r}")

    def __iter__(self) -> Iterator[LabHost]:
        return iter(self.hosts)

    def groups(self) -> list[tuple[str, ...]]:
        """The hosts in groups that can run apart: a host with every host its PFs' traffic
        peers name (and theirs), each group's names in inventory order, the groups in the
        order of their first host. A group is provisioned, driven and torn down by one
        process; two groups share nothing (one xdist worker each: harness.rig)."""
        names = [h.name for h in self.hosts]
        group_of = {name: {name} for name in names}
        for host in self.hosts:
            for pf in host.pfs:
                if pf.peer is not None and pf.peer.host in group_of:
                    joined = group_of[host.name] | group_of[pf.peer.host]
                    for name in joined:
                        group_of[name] = joined
        groups: list[tuple[str, ...]] = []
        for name in names:
            group = tuple(n for n in names if n in group_of[name])
            if group not in groups:
                groups.append(group)
        return groups

    def group_of(self, name: str) -> tuple[str, ...]:
        """The group (``groups``) ``name`` is in; KeyError naming the file if none."""
        self.host(name)
        return next(group for group in self.groups() if name in group)

    def only(self, names: Collection[str]) -> Inventory:
        """The same inventory with only the hosts ``names`` (KeyError naming the file for
        a name it does not have)."""
        for name in names:
            self.host(name)
        return replace(self, hosts=tuple(h for h in self.hosts if h.name in names))

    def reached_at(self, name: str, address: str, port: int) -> Inventory:
        """The same inventory with host ``name`` at another address and port: how a session
        of the emulated host (sshd forwarded to a free port) uses inventories/emulated.yml."""
        self.host(name)  # KeyError naming the file when there is no such host
        hosts = tuple(
            replace(
                h, address=address, port=port, variables={**h.variables, "ansible_host": address}
            )
            if h.name == name
            else h
            for h in self.hosts
        )
        return replace(self, hosts=hosts)


def load_inventory(path: str | Path) -> Inventory:
    """Read, check and resolve an inventory; :class:`InventoryError` names every problem.

    A relative key path is resolved against the inventory's directory, as Ansible does
    not: the rig may run from anywhere, so the file must mean one thing.
    """
    path = Path(path)
    try:
        document = load_yaml_mapping(path)
    except YAMLLoadError as exc:
        where = f"line {exc.line}, column {exc.column}: " if exc.line else ""
        raise InventoryError(str(path), (where + exc.problem,)) from None
    schema = DocumentSchema.packaged("labs.sriov", INVENTORY_SCHEMA)
    try:
        schema.check(document, str(path))
    except DocumentError as exc:
        raise InventoryError(str(path), exc.lines) from None
    problems: list[SchemaProblem] = []
    hosts = tuple(_hosts(document, path.parent, problems))
    problems += _peer_problems(hosts)
    if problems:
        raise InventoryError(str(path), tuple(p.line() for p in problems))
    return Inventory(path, hosts)


_HOSTS_PATH = ("all", "children", HOST_GROUP, "hosts")


def _hosts(
    document: Mapping[str, Any], base: Path, problems: list[SchemaProblem]
) -> Iterator[LabHost]:
    shared = {
        **document["all"].get("vars", {}),
        **document["all"]["children"][HOST_GROUP].get("vars", {}),
    }
    for name, own in document["all"]["children"][HOST_GROUP]["hosts"].items():
        where = (*_HOSTS_PATH, name)
        data = {**shared, **own}
        missing = [key for key in _REQUIRED_CONNECTION if key not in data]
        for key in missing:
            problems.append(
                SchemaProblem(
                    (*where, key),
                    "required",
                    f"missing {key!r}: neither the host nor all.vars / {HOST_GROUP}.vars give it",
                )
            )
        pfs = tuple(_pfs(own["sriov_pfs"], (*where, "sriov_pfs"), name, problems))
        if missing:
            continue
        key_file = Path(data["ansible_ssh_private_key_file"])
        yield LabHost(
            name=name,
            address=data["ansible_host"],
            port=data.get("ansible_port", DEFAULT_SSH_PORT),
            user=data["ansible_user"],
            key_file=key_file if key_file.is_absolute() else base / key_file,
            pfs=pfs,
            host_netns=data.get("sriov_host_netns", DEFAULT_HOST_NETNS),
            python=data.get("sriov_python", DEFAULT_PYTHON),
            ssh_args=data.get("ansible_ssh_common_args", ""),
            emulated=own.get("sriov_emulated", False),
            variables={
                **data,
                "ansible_ssh_private_key_file": str(
                    key_file if key_file.is_absolute() else base / key_file
                ),
            },
        )


def _pfs(
    items: list[Mapping[str, Any]],
    where: tuple[str | int, ...],
    host: str,
    problems: list[SchemaProblem],
) -> Iterator[PhysicalFunction]:
    first: dict[tuple[str, str], int] = {}
    for i, item in enumerate(items):
        for key in ("pci", "netdev"):
            value = item.get(key)
            if value is None:
                continue
            if (key, value) in first:
                problems.append(
                    SchemaProblem(
                        (*where, i, key),
                        "unique",
                        f"{value!r} is already PF {first[key, value]}'s",
                    )
                )
            first.setdefault((key, value), i)
        peer = item.get("peer")
        yield PhysicalFunction(
            pci=item["pci"],
            vfs=item["vfs"],
            model=item["model"],
            driver=item["driver"],
            vf_driver=item["vf_driver"],
            capabilities=frozenset(item["capabilities"]),
            netdev=item.get("netdev"),
            peer=PeerPort(peer.get("host", host), peer["netdev"]) if peer else None,
        )


def _peer_problems(hosts: tuple[LabHost, ...]) -> list[SchemaProblem]:
    names = {host.name for host in hosts}
    problems = []
    for host in hosts:
        for i, pf in enumerate(host.pfs):
            if pf.peer is not None and pf.peer.host not in names:
                problems.append(
                    SchemaProblem(
                        (*_HOSTS_PATH, host.name, "sriov_pfs", i, "peer", "host"),
                        "reference",
                        f"no host {pf.peer.host!r} in {HOST_GROUP}",
                    )
                )
    return problems
