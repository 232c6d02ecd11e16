"""A declarative host description (YAML) that builds a FakeKernelModel.

Format (every key but the names is optional)::

    boot_id: <str>                  # default: DEFAULT_BOOT_ID
    host_path: /proc/1/ns/net       # the approved host namespace mount
    live_rename: false              # true: renaming an UP link works (Linux >= 6.2)
    nics:                           # NIC variants, referenced by PFs
      <variant>:
        capabilities: [link_state, trust, spoofchk, rate, vlan_proto_8021ad]
        max_mtu: 9702               # PF and VF netdev maximum MTU
        vf_offset: 128              # SR-IOV First VF Offset / VF Stride (routing ids)
        vf_stride: 2
    pfs:
      - name: enp3s0f0              # enpBsSfF encodes the PCI address 0000:BB:SS.F
        pci: "0000:03:00.0"         # required when the name does not encode it
        mac: "02:..."               # default: derived from the PCI address
        mtu: 1500
        nic: <variant>              # default: every capability, max_mtu 9702
        num_vfs: 4                  # VF netdevs <pf>v<i> appear in the host namespace
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
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml

from plugins.kernel import BondInfo, KernelError, Link, LinkChanges, LinkKind, LinkSpec, NsRef

from ._links import SETUP_MTU_BOUNDS
from ._vfs import CAPABILITIES
from .model import DEFAULT_BOOT_ID, FakeKernelModel

__all__ = ["DEFAULT_LAB", "LabError", "build_model", "load_lab", "parse_lab_yaml"]

DEFAULT_LAB = Path(__file__).parent / "labs" / "default.yaml"
_PCI = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-1][0-9a-f])\.([0-7])$")
_PCI_NAME = re.compile(r"^enp(\d+)s(\d+)f(\d+)$")
T = TypeVar("T")


class LabError(ValueError):
    """The lab description is invalid; the message says where and why."""


def load_lab(path: str | Path) -> FakeKernelModel:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise LabError(f"{path}: {e.strerror}") from None
    return build_model(parse_lab_yaml(text, str(path)))


def parse_lab_yaml(text: str, source: str = "lab") -> dict[str, Any]:
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        raise LabError(f"{source}: not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise LabError(f"{source}: a lab is a mapping, got {type(data).__name__}")
    return data


def build_model(desc: Mapping[str, Any]) -> FakeKernelModel:
    r = _Reader(desc, "lab")
    r.only("boot_id", "host_path", "live_rename", "nics", "pfs", "devices", "namespaces", "links")
    model = FakeKernelModel(
        r.get("boot_id", str, DEFAULT_BOOT_ID),
        host_path=r.get("host_path", str, "/proc/1/ns/net"),
        live_rename=r.get("live_rename", bool, False),
    )
    nics = {name: _nic(nr) for name, nr in r.mapping("nics")}
    for i, ns_name in enumerate(r.get("namespaces", list, [])):
        where = f"lab.namespaces[{i}]"
        _kernel(f"{where}: {ns_name!r}", model.add_namespace, _str(ns_name, where))
    for pr in r.items("pfs"):
        _pf(model, pr, nics)
    for dr in r.items("devices"):
        _device(model, dr)
    for lr in r.items("links"):
        _link(model, lr)
    return model


# -- sections --------------------------------------------------------------------------


def _nic(r: _Reader) -> dict[str, Any]:
    r.only("capabilities", "max_mtu", "vf_offset", "vf_stride")
    caps = [_str(c, f"{r.where}.capabilities") for c in r.get("capabilities", list, [])]
    unknown = sorted(set(caps) - CAPABILITIES)
    if unknown:
        raise LabError(f"{r.where}.capabilities: unknown {unknown} (known: {sorted(CAPABILITIES)})")
    return {
        "capabilities": caps,
        "max_mtu": r.get("max_mtu", int, 9702),
        "vf_offset": r.get("vf_offset", int, 128),
        "vf_stride": r.get("vf_stride", int, 2),
    }


DEFAULT_NIC: dict[str, Any] = {
    "capabilities": sorted(CAPABILITIES),
    "max_mtu": 9702,
    "vf_offset": 128,
    "vf_stride": 2,
}


def _pf(model: FakeKernelModel, r: _Reader, nics: dict[str, dict[str, Any]]) -> None:
    r.only("name", "pci", "mac", "mtu", "nic", "num_vfs", "vf_mtu", "up")
    name = r.require("name", str)
    pci = _pci_of(r, name)
    nic_name = r.get("nic", str, "")
    if nic_name and nic_name not in nics:
        raise LabError(f"{r.where}.nic: no NIC variant {nic_name!r} (have: {sorted(nics)})")
    nic = nics[nic_name] if nic_name else DEFAULT_NIC
    num_vfs = r.get("num_vfs", int, 0)
    if not 0 <= num_vfs <= 256:
        raise LabError(f"{r.where}.num_vfs: {num_vfs} is outside 0..256")
    rid = _rid(pci)
    vfs = []
    for i in range(num_vfs):
        vf_rid = rid + nic["vf_offset"] + nic["vf_stride"] * i
        if vf_rid > 0xFFFF:
            raise LabError(f"{r.where}.num_vfs: VF {i} runs past the PCI bus range")
        vf_pci = f"{pci[:4]}:{vf_rid >> 8:02x}:{(vf_rid >> 3) & 0x1F:02x}.{vf_rid & 7}"
        vfs.append((f"{name}v{i}", vf_pci, _mac_of(vf_pci)))
    pf = _kernel(
        r.where,
        model.add_pf,
        name,
        pci_address=pci,
        mac=r.get("mac", str, _mac_of(pci)),
        capabilities=nic["capabilities"],
        vfs=vfs,
        mtu=r.get("mtu", int, 1500),
        max_mtu=nic["max_mtu"],
        vf_mtu=r.get("vf_mtu", int, 1500),
        vf_max_mtu=nic["max_mtu"],
    )
    _set_up(model, r, pf)


def _device(model: FakeKernelModel, r: _Reader) -> None:
    r.only("name", "pci", "mac", "mtu", "min_mtu", "max_mtu", "namespace", "up")
    name = r.require("name", str)
    pci = _pci_of(r, name)
    device = _kernel(
        r.where,
        model.add_device,
        name,
        pci_address=pci,
        mac=r.get("mac", str, _mac_of(pci)),
        mtu=r.get("mtu", int, 1500),
        min_mtu=r.get("min_mtu", int, 68),
        max_mtu=r.get("max_mtu", int, 9702),
        ns=_ns(model, r, "namespace"),
    )
    _set_up(model, r, device)


_LINK_KEYS = (
    "kind",
    "name",
    "namespace",
    "mtu",
    "mac",
    "alias",
    "parent",
    "parent_namespace",
    "mode",
    "vlan_id",
    "vlan_protocol",
    "peer_name",
    "peer_namespace",
    "bond",
    "master",
    "up",
)


def _link(model: FakeKernelModel, r: _Reader) -> None:
    r.only(*_LINK_KEYS)
    kind = r.require("kind", str)
    if kind not in SETUP_MTU_BOUNDS:
        raise LabError(f"{r.where}.kind: {kind!r} is not one of {sorted(SETUP_MTU_BOUNDS)}")
    name = r.require("name", str)
    ns = _ns(model, r, "namespace") or model.host_namespace()
    parent_ns = _ns(model, r, "parent_namespace")
    parent = None
    parent_name = r.get("parent", str, "")
    if parent_name:
        found = model.get_link(parent_ns or ns, name=parent_name)
        if found is None:
            raise LabError(f"{r.where}.parent: no link {parent_name!r} in that namespace")
        parent = found.ifindex
    bond = None
    if "bond" in r.data:
        br = r.sub("bond")
        br.only("mode", "miimon_ms", "updelay_ms", "downdelay_ms")
        bond = BondInfo(
            mode=br.get("mode", str, "balance-rr"),
            miimon_ms=br.get("miimon_ms", int, 100),
            updelay_ms=br.get("updelay_ms", int, 0),
            downdelay_ms=br.get("downdelay_ms", int, 0),
        )
    spec = LinkSpec(
        kind=cast(LinkKind, kind),  # checked against the known kinds above
        name=name,
        mac=r.get("mac", str, "") or None,
        mtu=r.get("mtu", int, 0) or None,
        parent=parent,
        parent_ns=parent_ns,
        alias=r.get("alias", str, "") or None,
        bond=bond,
        vlan_id=r.get("vlan_id", int, -1) if "vlan_id" in r.data else None,
        vlan_protocol=r.get("vlan_protocol", str, "802.1Q"),
        mode=r.get("mode", str, "") or None,
        peer_name=r.get("peer_name", str, "") or None,
        peer_ns=_ns(model, r, "peer_namespace"),
    )
    link = _kernel(r.where, model.create_link, ns, spec)
    master_name = r.get("master", str, "")
    if master_name:
        master = model.get_link(ns, name=master_name)
        if master is None:
            raise LabError(f"{r.where}.master: no link {master_name!r} in that namespace")
        _kernel(r.where, model.set_link, ns, link.ifindex, LinkChanges(master=master.ifindex))
    _set_up(model, r, link)


# -- helpers ---------------------------------------------------------------------------


def _set_up(model: FakeKernelModel, r: _Reader, link: Link) -> None:
    if r.get("up", bool, False):
        _kernel(r.where, model.set_link, link.ns, link.ifindex, LinkChanges(up=True))


def _kernel(where: str, call: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except KernelError as e:
        raise LabError(f"{where}: the kernel refused: {e.strerror}") from None


def _ns(model: FakeKernelModel, r: _Reader, key: str) -> NsRef | None:
    name = r.get(key, str, "")
    if not name:
        return None
    try:
        return model.namespace(name)
    except KernelError:
        raise LabError(f"{r.where}.{key}: namespace {name!r} is not in lab.namespaces") from None


def _pci_of(r: _Reader, name: str) -> str:
    pci = r.get("pci", str, "").lower()
    if not pci:
        m = _PCI_NAME.match(name)
        if m is None:
            raise LabError(f"{r.where}.pci: required, {name!r} does not encode a PCI address")
        bus, slot, fn = (int(g) for g in m.groups())
        if bus > 0xFF or slot > 0x1F or fn > 7:
            raise LabError(f"{r.where}.pci: {name!r} encodes no valid PCI address")
        pci = f"0000:{bus:02x}:{slot:02x}.{fn}"
    if not _PCI.match(pci):
        raise LabError(f"{r.where}.pci: {pci!r} is not DDDD:BB:SS.F")
    return pci


def _rid(pci: str) -> int:
    m = _PCI.match(pci)
    assert m is not None
    _, bus, slot, fn = m.groups()
    return int(bus, 16) << 8 | int(slot, 16) << 3 | int(fn)


def _mac_of(pci: str) -> str:
    """A stable, locally administered address per PCI function."""
    domain, bus, rest = pci.split(":")
    slot, fn = rest.split(".")
    return f"02:00:{int(domain, 16) & 0xFF:02x}:{bus}:{slot}:{int(fn):02x}"


def _str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise LabError(f"{where}: expected a string, got {value!r}")
    return value


class _Reader:
    """Typed access to one mapping of the description, with its location for errors."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, Mapping):
            raise LabError(f"{where}: expected a mapping, got {data!r}")
        self.data: Mapping[str, Any] = data
        self.where = where

    def only(self, *keys: str) -> None:
        unknown = sorted(set(self.data) - set(keys))
        if unknown:
            raise LabError(f"{self.where}: unknown keys {unknown} (allowed: {sorted(keys)})")

    def require(self, key: str, kind: type[T]) -> T:
        if self.data.get(key) is None:
            raise LabError(f"{self.where}.{key}: required")
        return self._typed(key, kind)

    def get(self, key: str, kind: type[T], default: T) -> T:
        if self.data.get(key) is None:
            return default
        return self._typed(key, kind)

    def _typed(self, key: str, kind: type[T]) -> T:
        value = self.data[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise LabError(f"{self.where}.{key}: expected {kind.__name__}, got {value!r}")
        return value

    def sub(self, key: str) -> _Reader:
        return _Reader(self.data[key], f"{self.where}.{key}")

    def items(self, key: str) -> list[_Reader]:
        entries = self.get(key, list, [])
        return [_Reader(v, f"{self.where}.{key}[{i}]") for i, v in enumerate(entries)]

    def mapping(self, key: str) -> list[tuple[str, _Reader]]:
        section = self.get(key, dict, {})
        return [(str(k), _Reader(v, f"{self.where}.{key}.{k}")) for k, v in section.items()]


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a mapping key given twice instead of keeping the last."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
