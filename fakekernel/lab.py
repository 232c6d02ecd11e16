"""A declarative host description (YAML) that builds a FakeKernelModel.

Format (every key but the names is optional)::

    boot_id: <str>                  # default: DEFAULT_BOOT_ID
    host_path: /proc/1/ns/net       # the approved host namespace mount
    live_rename: false              # true: renaming an UP link works (Linux >= 6.2)
    loopback: false                 # true: every namespace has its lo, as on Linux
    host_loopback_up: false         # true: the host's lo is up (a booted system's is)
    mac_address_policy: none        # persistent: udev gives new random-address VF netdevs
                                    # an address of their name (Debian's default)
    nics:                           # NIC variants, referenced by PFs
      <variant>:
        capabilities: [link_state, trust, spoofchk, rate, vlan_proto_8021ad]
        max_mtu: 9702               # PF and VF netdev maximum MTU
        vf_offset: 128              # SR-IOV First VF Offset / VF Stride (routing ids)
        vf_stride: 2
        vf_probe_answered: false    # true: a VF made with its PF up is answered at once
        vf_mailbox: true            # false: the VFs' VLANs, carrier and the VF table's MACs
                                    # do not wait for the PF to answer (default: the driver's)
    pfs:
      - name: enp3s0f0              # enpBsSfF encodes the PCI address 0000:BB:SS.F
        pci: "0000:03:00.0"         # required when the name does not encode it
        mac: "02:..."               # default: derived from the PCI address
        mtu: 1500
        nic: <variant>              # default: every capability, max_mtu 9702
        num_vfs: 4                  # VF netdevs <pf>v<i> appear in the host namespace
        cable: true                 # false: the port never has link (no carrier, no VF rates)
        link_kept: false            # true: its link status stays set while it is down
                                    # (QEMU's igb, once the PF has been opened)
        vf_mtu: 1500
        up: false                   # administrative state (PFs, devices and links)
    devices:                        # other PCI netdevs, e.g. shared parents
      - {name: enp3s0f2, mtu: 9000, pci: ..., mac: ..., max_mtu: ..., namespace: ..., up: true}
    namespaces: [name, ...]         # mounted at /run/netns/<name>
    links:                          # foreign links, created with the kernel's own rules
      - {kind: dummy, name: foreign0, alias: foreign, namespace: ..., mtu: ..., mac: ...,
         parent: <name>, parent_namespace: ..., mode: ..., vlan_id: ..., vlan_protocol: ...,
         peer_name: ..., peer_namespace: ..., bond: {mode: ..., miimon_ms: ...},
         master: <name>, up: true}

VF PCI addresses follow the SR-IOV routing-id arithmetic (PF id + offset + stride * i),
so with the defaults the VFs of 0000:03:00.0 are 0000:03:10.0, 0000:03:10.2, ...

A description says little about the state its devices are in, and what it leaves out is
the kernel's default (down, default VF settings), which is also what a VF that lost
its settings looks like. ``randomize_start_state`` and ``plant_pod_interface`` give a
built lab a random starting state, the same for the same seed, so a restore bug
cannot hide behind defaults.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

from plugins.kernel import (
    PCI_ADDRESS,
    BondInfo,
    Kernel,
    KernelError,
    Link,
    LinkChanges,
    LinkKind,
    LinkSpec,
    NsRef,
    VFChanges,
    VFConfig,
)
from plugins.sdk import DocumentSchema, YAMLLoadError, load_yaml_documents

from ._errors import LabError
from ._nics import DRIVERS, NicProfile, profile, vf_pci
from ._state import LOOPBACK_IFINDEX
from .model import DEFAULT_BOOT_ID, FakeKernelModel

__all__ = [
    "DEFAULT_LAB",
    "LAB_SCHEMA",
    "LabError",
    "build_model",
    "load_lab",
    "parse_lab_yaml",
    "plant_pod_interface",
    "randomize_start_state",
]

DEFAULT_LAB = Path(__file__).parent / "labs" / "default.yaml"
_PCI_NAME = re.compile(r"^enp(\d+)s(\d+)f(\d+)$")
T = TypeVar("T")


LAB_SCHEMA = "lab.schema.json"


def load_lab(path: str | Path) -> FakeKernelModel:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise LabError(f"{path}: {e.strerror}") from None
    return build_model(parse_lab_yaml(text, str(path)), str(path))


def parse_lab_yaml(text: str, source: str = "lab") -> dict[str, Any]:
    try:  # the SDK's one strict loader: duplicate keys, aliases and odd tags refused
        documents = load_yaml_documents(text, source)
    except YAMLLoadError as e:
        raise LabError(f"not valid YAML: {e}") from None
    if not documents:
        return {}
    if len(documents) > 1:
        raise LabError(f"{source}: a lab is one YAML document, got {len(documents)}")
    data = documents[0]
    if not isinstance(data, dict):
        raise LabError(f"{source}: a lab is a mapping, got {type(data).__name__}")
    return data


def build_model(desc: Mapping[str, Any], source: str | None = None) -> FakeKernelModel:
    """Build the model a description asks for; ``source`` (a file) prefixes any error.

    The shape is fakekernel/schemas/lab.schema.json's; what refers to what (NIC
    variants, namespaces, parents, masters) and what the kernel refuses is checked here.
    """
    schema = DocumentSchema.packaged("fakekernel", LAB_SCHEMA, root="lab")
    problems = schema.problems(desc)
    try:
        if problems:
            raise LabError("; ".join(p.line("lab") for p in problems))
        return _build(_Section(desc, "lab"))
    except LabError as e:
        if source is None:
            raise
        raise LabError(f"{source}: {e}") from None


def _build(lab: _Section) -> FakeKernelModel:
    model = FakeKernelModel(
        lab.get("boot_id", DEFAULT_BOOT_ID),
        host_path=lab.get("host_path", "/proc/1/ns/net"),
        live_rename=lab.get("live_rename", False),
        loopback=lab.get("loopback", False),
        mac_address_policy=lab.get("mac_address_policy", "none"),
    )
    if lab.get("host_loopback_up", False):
        if not lab.get("loopback", False):
            raise LabError("lab.host_loopback_up: the lab has no loopback devices (loopback)")
        host = model.host_namespace()
        model.set_link(host, LOOPBACK_IFINDEX, LinkChanges(up=True))
    nics = {name: _nic(section) for name, section in lab.mapping("nics")}
    namespaces: list[str] = lab.get("namespaces", [])
    for i, ns_name in enumerate(namespaces):
        _kernel(f"lab.namespaces[{i}]: {ns_name!r}", model.add_namespace, ns_name)
    for section in lab.items("pfs"):
        _pf(model, section, nics)
    for section in lab.items("devices"):
        _device(model, section)
    for section in lab.items("links"):
        _link(model, section)
    return model


# -- sections --------------------------------------------------------------------------


def _nic(r: _Section) -> NicProfile:
    """A NIC variant: a driver's profile (``driver``, default generic) with overrides.
    A variant without ``driver`` and without ``capabilities`` has none (as before)."""
    driver = r.get("driver", "generic")
    if driver not in DRIVERS:
        raise LabError(f"{r.where}.driver: no NIC profile {driver!r} (have: {sorted(DRIVERS)})")
    caps = r.data.get("capabilities")
    if caps is None and driver == "generic":
        caps = []
    return profile(
        driver,
        capabilities=caps,
        max_mtu=r.data.get("max_mtu"),
        vf_offset=r.data.get("vf_offset"),
        vf_stride=r.data.get("vf_stride"),
        totalvfs=r.data.get("totalvfs"),
        vf_probe_answered=r.data.get("vf_probe_answered"),
        vf_mailbox=r.data.get("vf_mailbox"),
    )


def _pf(model: FakeKernelModel, r: _Section, nics: dict[str, NicProfile]) -> None:
    name: str = r.data["name"]
    pci = _pci_of(r, name)
    nic_name = r.get("nic", "")
    if nic_name and nic_name not in nics and nic_name not in DRIVERS:
        known = sorted({*nics, *DRIVERS})
        raise LabError(f"{r.where}.nic: no NIC variant {nic_name!r} (have: {known})")
    nic = nics.get(nic_name) or (profile(nic_name) if nic_name else profile("generic"))
    vfs = []
    num_vfs = r.get("num_vfs", 0)
    if num_vfs > nic.totalvfs:
        raise LabError(f"{r.where}.num_vfs: {num_vfs} above the NIC's totalvfs {nic.totalvfs}")
    for i in range(num_vfs):
        vf_pci_address = vf_pci(pci, nic, i)
        if vf_pci_address is None:
            raise LabError(f"{r.where}.num_vfs: VF {i} runs past the PCI bus range")
        vfs.append((f"{name}v{i}", vf_pci_address, _mac_of(vf_pci_address)))
    pf = _kernel(
        r.where,
        model.add_pf,
        name,
        pci_address=pci,
        mac=r.get("mac", _mac_of(pci)),
        capabilities=nic.capabilities,
        vfs=vfs,
        mtu=r.get("mtu", 1500),
        max_mtu=nic.max_mtu,
        vf_mtu=r.get("vf_mtu", 1500),
        vf_max_mtu=nic.max_mtu,
        nic=nic,
        cable=r.get("cable", True),
        link_kept=r.get("link_kept", False),
    )
    _set_up(model, r, pf)


def _device(model: FakeKernelModel, r: _Section) -> None:
    name: str = r.data["name"]
    pci = _pci_of(r, name)
    device = _kernel(
        r.where,
        model.add_device,
        name,
        pci_address=pci,
        mac=r.get("mac", _mac_of(pci)),
        mtu=r.get("mtu", 1500),
        min_mtu=r.get("min_mtu", 68),
        max_mtu=r.get("max_mtu", 9702),
        ns=_ns(model, r, "namespace"),
    )
    _set_up(model, r, device)


def _link(model: FakeKernelModel, r: _Section) -> None:
    kind: LinkKind = r.data["kind"]  # one of the schema's kinds
    name: str = r.data["name"]
    ns = _ns(model, r, "namespace") or model.host_namespace()
    parent_ns = _ns(model, r, "parent_namespace")
    parent = None
    parent_name = r.get("parent", "")
    if parent_name:
        found = model.get_link(parent_ns or ns, name=parent_name)
        if found is None:
            raise LabError(f"{r.where}.parent: no link {parent_name!r} in that namespace")
        parent = found.ifindex
    bond = None
    if r.get("bond", None) is not None:
        br = r.section("bond")
        bond = BondInfo(
            mode=br.get("mode", "balance-rr"),
            miimon_ms=br.get("miimon_ms", 100),
            updelay_ms=br.get("updelay_ms", 0),
            downdelay_ms=br.get("downdelay_ms", 0),
        )
    spec = LinkSpec(
        kind=kind,
        name=name,
        mac=r.get("mac", "") or None,
        mtu=r.get("mtu", 0) or None,
        parent=parent,
        parent_ns=parent_ns,
        alias=r.get("alias", "") or None,
        bond=bond,
        vlan_id=r.get("vlan_id", -1) if "vlan_id" in r.data else None,
        vlan_protocol=r.get("vlan_protocol", "802.1Q"),
        mode=r.get("mode", "") or None,
        peer_name=r.get("peer_name", "") or None,
        peer_ns=_ns(model, r, "peer_namespace"),
    )
    link = _kernel(r.where, model.create_link, ns, spec)
    master_name = r.get("master", "")
    if master_name:
        master = model.get_link(ns, name=master_name)
        if master is None:
            raise LabError(f"{r.where}.master: no link {master_name!r} in that namespace")
        _kernel(r.where, model.set_link, ns, link.ifindex, LinkChanges(master=master.ifindex))
    _set_up(model, r, link)


# -- randomized starting states --------------------------------------------------------

# What the devices of a real node run: 1500 or larger frames, never less, because the
# example topologies ask 1500 of VFs and of shared parents (which are never reconfigured,
# and any netdev may be allocated as one); a VF never more than its PF (several PF
# drivers refuse a VF frame larger than the PF's).
DEVICE_MTUS = (1500, 9000)
VF_MTUS = (1500, 4000, 9000)
POD_MTUS = (1450, 1500, 8950)  # a CNI's primary interface: overlay, plain, jumbo overlay
MAX_TX_RATES = (0, 1000, 10000, 25000)  # Mbps; 0: unlimited
MIN_TX_RATES = (0, 100, 500)
LINK_STATES = ("auto", "enable", "disable")


def randomize_start_state(kernel: Kernel, seed: int) -> None:
    """Give every PCI netdev of the host namespace a random starting state, the same for
    the same seed: admin state, MTU, MAC, and for VFs their PF's VF-table entry (VLAN,
    spoof checking, trust, link state, rates, administrative MAC) where the NIC has the
    control; then plant foreign links in the host: a veth pair and a macvlan on a PF.

    Each device draws from its own stream (seed and PCI address), so its state does not
    change when a lab gains or loses another device. Works on anything with the kernel
    interface (the model, or a client of its server).
    """
    host = kernel.host_namespace()
    devices = [lk for lk in kernel.list_links(host) if lk.kind == "device"]
    macs = _MacSource()
    for link in devices:  # PFs first: a VF's MTU is bounded by its PF's
        if link.vf_of is None:
            rng = random.Random(f"{seed}/{link.pci_address}")
            mtu = rng.choice(_fitting(DEVICE_MTUS, link))
            kernel.set_link(host, link.ifindex, _admin_state(rng, macs, mtu))
    for link in devices:
        if link.vf_of is not None:
            _randomize_vf(kernel, random.Random(f"{seed}/{link.pci_address}"), macs, link)
    _plant_host_foreign_links(kernel, random.Random(f"{seed}/foreign"), macs)


def plant_pod_interface(kernel: Kernel, sandbox: NsRef, seed: int) -> Link:
    """The pod's primary interface, which is not ours: ``eth0`` in ``sandbox``, a veth
    whose peer is in the host namespace, as a CNI plugin leaves it.

    It must be the sandbox's first link: it takes ifindex 2, which in the host is the
    first PF's, never a VF's, so a VF moved in keeps its ifindex there and brings it
    home (Linux renumbers a moved link whose ifindex is taken, and keeps the new one).
    """
    rng = random.Random(f"{seed}/pod/{sandbox.inode}")
    spec = LinkSpec(
        kind="veth",
        name="eth0",
        mtu=rng.choice(POD_MTUS),
        peer_name=f"veth{sandbox.inode & 0xFFFFFFFF:08x}",
        peer_ns=kernel.host_namespace(),
    )
    pod = kernel.create_link(sandbox, spec)
    if rng.random() < 0.5:
        pod = kernel.set_link(sandbox, pod.ifindex, LinkChanges(up=True))
    return pod


def _randomize_vf(kernel: Kernel, rng: random.Random, macs: _MacSource, vf: Link) -> None:
    assert vf.vf_of is not None
    host = kernel.host_namespace()
    pf_pci, index = vf.vf_of
    pf = kernel.find_device(pf_pci)
    assert pf is not None, f"VF {vf.name} has no PF netdev"
    # An administrative MAC (which the VF driver then takes as its netdev's address), or
    # none and an address of the VF's own: both are common.
    admin_mac = macs.next(rng) if rng.random() < 0.5 else None
    table = _vf_table_changes(rng, kernel.get_vfs(host, pf.ifindex)[index], admin_mac)
    kernel.set_vf(host, pf.ifindex, index, table)
    mtus = [m for m in _fitting(VF_MTUS, vf) if m <= pf.mtu]
    changes = _admin_state(rng, macs, rng.choice(mtus), own_mac=admin_mac is None)
    kernel.set_link(host, vf.ifindex, changes)


def _vf_table_changes(rng: random.Random, now: VFConfig, admin_mac: str | None) -> VFChanges:
    """Random VF-table settings, only for the controls the NIC reports (None: it has none).

    QoS stays 0: the plugins may set a VLAN alone, and a QoS priority without a VLAN is
    refused (EINVAL), so a random QoS would make valid plugin configs fail.
    """
    ceiling = rng.choice(MAX_TX_RATES)
    has_rates = now.max_tx_rate is not None
    return VFChanges(
        mac=admin_mac,
        vlan=rng.choice((0, rng.randint(1, 4094))),
        spoofchk=rng.random() < 0.5 if now.spoofchk is not None else None,
        trust=rng.random() < 0.5 if now.trust is not None else None,
        link_state=rng.choice(LINK_STATES) if now.link_state is not None else None,
        max_tx_rate=ceiling if has_rates else None,
        min_tx_rate=rng.choice([r for r in MIN_TX_RATES if r <= ceiling]) if has_rates else None,
    )


def _plant_host_foreign_links(kernel: Kernel, rng: random.Random, macs: _MacSource) -> None:
    """Links nobody of ours may touch, next to the ones we use: a veth pair, and a
    macvlan on a PF (never on a shared parent: an ipvlan needs its lower to itself)."""
    host = kernel.host_namespace()
    veth = LinkSpec(
        kind="veth",
        name="fveth0",
        peer_name="fveth1",
        mtu=rng.choice(DEVICE_MTUS),
        mac=macs.next(rng),
        alias="foreign",
    )
    pfs = [lk for lk in kernel.list_links(host) if lk.kind == "device" and _has_vfs(kernel, lk)]
    planted = [kernel.create_link(host, veth)]
    if pfs:
        lower = rng.choice(pfs)
        macvlan = LinkSpec(
            kind="macvlan",
            name="fmacvlan0",
            parent=lower.ifindex,
            mode=rng.choice(("bridge", "vepa", "private")),
            mtu=rng.choice([m for m in DEVICE_MTUS if m <= lower.mtu]),
            mac=macs.next(rng),
            alias="foreign",
        )
        planted.append(kernel.create_link(host, macvlan))
    for link in planted:
        if rng.random() < 0.5:
            kernel.set_link(host, link.ifindex, LinkChanges(up=True))


def _has_vfs(kernel: Kernel, link: Link) -> bool:
    return link.vf_of is None and bool(kernel.get_vfs(kernel.host_namespace(), link.ifindex))


def _fitting(mtus: tuple[int, ...], link: Link) -> list[int]:
    fitting = [m for m in mtus if link.min_mtu <= m <= link.max_mtu]
    return fitting or [link.mtu]


def _admin_state(
    rng: random.Random, macs: _MacSource, mtu: int, *, own_mac: bool = True
) -> LinkChanges:
    return LinkChanges(mtu=mtu, mac=macs.next(rng) if own_mac else None, up=rng.random() < 0.5)


class _MacSource:
    """Random unicast, locally administered addresses, never the same one twice."""

    def __init__(self) -> None:
        self._given: set[str] = set()

    def next(self, rng: random.Random) -> str:
        while True:
            octets = [rng.randrange(256) for _ in range(6)]
            octets[0] = (octets[0] & 0xFC) | 0x02  # unicast, locally administered
            mac = ":".join(f"{o:02x}" for o in octets)
            if mac not in self._given:
                self._given.add(mac)
                return mac


# -- helpers ---------------------------------------------------------------------------


def _set_up(model: FakeKernelModel, r: _Section, link: Link) -> None:
    if r.get("up", False):
        _kernel(r.where, model.set_link, link.ns, link.ifindex, LinkChanges(up=True))


def _kernel(where: str, call: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except KernelError as e:
        raise LabError(f"{where}: the kernel refused: {e.strerror}") from None


def _ns(model: FakeKernelModel, r: _Section, key: str) -> NsRef | None:
    name = r.get(key, "")
    if not name:
        return None
    try:
        return model.namespace(name)
    except KernelError:
        raise LabError(f"{r.where}.{key}: namespace {name!r} is not in lab.namespaces") from None


def _pci_of(r: _Section, name: str) -> str:
    pci = r.get("pci", "").lower()
    if not pci:
        m = _PCI_NAME.match(name)
        if m is None:
            raise LabError(f"{r.where}.pci: required, {name!r} does not encode a PCI address")
        bus, slot, fn = (int(g) for g in m.groups())
        if bus > 0xFF or slot > 0x1F or fn > 7:
            raise LabError(f"{r.where}.pci: {name!r} encodes no valid PCI address")
        pci = f"0000:{bus:02x}:{slot:02x}.{fn}"
    if not PCI_ADDRESS.match(pci):
        raise LabError(f"{r.where}.pci: {pci!r} is not DDDD:BB:SS.F")
    return pci


def _mac_of(pci: str) -> str:
    """A stable, locally administered address per PCI function."""
    domain, bus, rest = pci.split(":")
    slot, fn = rest.split(".")
    return f"02:00:{int(domain, 16) & 0xFF:02x}:{bus}:{slot}:{int(fn):02x}"


class _Section:
    """One mapping of a description that matched the schema, with its location for errors.

    The schema has checked every type; a key that is absent or null takes the default.
    """

    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        self.data = data
        self.where = where

    def get(self, key: str, default: T) -> T:
        value = self.data.get(key)
        return default if value is None else cast(T, value)

    def section(self, key: str) -> _Section:
        return _Section(self.data[key], f"{self.where}.{key}")

    def items(self, key: str) -> list[_Section]:
        entries: list[Mapping[str, Any]] = self.get(key, [])
        return [_Section(v, f"{self.where}.{key}[{i}]") for i, v in enumerate(entries)]

    def mapping(self, key: str) -> list[tuple[str, _Section]]:
        section: Mapping[str, Mapping[str, Any]] = self.get(key, {})
        return [(k, _Section(v, f"{self.where}.{key}.{k}")) for k, v in section.items()]
