"""Registration: pinned bundles expand descriptors; a set is validated as a whole."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from plugins import bond, links, vf
from plugins.sdk import (
    DEFAULT_BUNDLE_ROOT,
    BundleStore,
    DescriptorRef,
    Endpoint,
    RegistrationError,
    Registry,
    StepKind,
)


@pytest.mark.parametrize(
    ("name", "register", "count"),
    [("vf", vf.register, 1), ("bond", bond.register, 1), ("links", links.register, 3)],
)
def test_packaging(name: str, register: Any, count: int) -> None:
    """Blueprint 13.3, for real: each service registers its endpoints and they validate."""
    registry = Registry()
    register(registry)
    sealed = registry.seal()
    assert len(sealed) == count, name
    assert len({r.contract_digest for r in sealed}) == count


def test_five_endpoints_have_five_distinct_contract_digests() -> None:
    registry = Registry()
    for register in (vf.register, bond.register, links.register):
        register(registry)
    sealed = registry.seal()
    assert sorted(r.endpoint.socket_name for r in sealed) == [
        "bond.sock",
        "ipvlan.sock",
        "macvlan.sock",
        "sriov.sock",
        "vlan.sock",
    ]
    assert len({r.contract_digest for r in sealed}) == 5


def test_descriptor_is_complete() -> None:
    registry = Registry()
    bond.register(registry)
    (reg,) = registry.seal()
    d = reg.descriptor.to_json()
    assert d["stepKinds"] == ["Operation"]
    assert d["inputs"] == [{"name": "members", "type": "KernelInterface/v1", "min": 2, "max": 8}]
    assert d["outputs"][0]["type"] == "KernelInterface/v1"
    assert d["allowedEffects"]["ConnectNetwork"] == [
        "linux/create-bond/v1",
        "linux/attach-member/v1",
        "linux/set-link-up/v1",
    ]
    assert d["preparation"]["semantics"] == "none"
    assert d["stateFormat"] == "bond-state/v1"
    assert d["configSchema"]["properties"]["mode"] == {"const": "active-backup"}


class _Handler(bond.Plugin):
    def __init__(self, ref: DescriptorRef) -> None:
        self.ref = ref

    def describe(self) -> DescriptorRef:
        return self.ref


BOND_REF = DescriptorRef("bond", "v1alpha1", (StepKind.OPERATION,), "bond/v1alpha1")


def seal_one(endpoint: Endpoint, bundles: BundleStore | None = None) -> None:
    registry = Registry(bundles)
    registry.register(endpoint)
    registry.seal()


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (
            DescriptorRef("bond", "v1alpha1", (StepKind.OPERATION,), "bond/v9"),
            "not pinned by this artifact",
        ),
        (
            DescriptorRef("bond", "v1alpha2", (StepKind.OPERATION,), "bond/v1alpha1"),
            "contractVersion 'v1alpha2'",
        ),
        (DescriptorRef("bond", "v1alpha1", (StepKind.ALLOCATION,), "bond/v1alpha1"), "stepKinds"),
        (
            DescriptorRef("vlan", "v1alpha1", (StepKind.OPERATION,), "bond/v1alpha1"),
            "name 'vlan' != 'bond'",
        ),
    ],
)
def test_missing_or_mismatching_bundle_fails_registration(ref: DescriptorRef, message: str) -> None:
    with pytest.raises(RegistrationError, match=message):
        seal_one(Endpoint("bond.sock", f"{ref.name}/v1alpha1", _Handler(ref)))


def copy_bundles(tmp_path: Path) -> Path:
    root = tmp_path / "contracts"
    shutil.copytree(DEFAULT_BUNDLE_ROOT, root)
    return root


def test_tampered_bundle_fails_its_pin(tmp_path: Path) -> None:
    root = copy_bundles(tmp_path)
    path = root / "bond" / "v1alpha1.json"
    path.write_text(path.read_text().replace('"maximum": 60000', '"maximum": 60001'))
    with pytest.raises(RegistrationError, match="does not match pin"):
        seal_one(Endpoint("bond.sock", "bond/v1alpha1", bond.Plugin()), BundleStore(root))


def test_missing_bundle_file_fails(tmp_path: Path) -> None:
    root = copy_bundles(tmp_path)
    (root / "bond" / "v1alpha1.json").unlink()
    with pytest.raises(RegistrationError, match="'bond/v1alpha1': missing"):
        seal_one(Endpoint("bond.sock", "bond/v1alpha1", bond.Plugin()), BundleStore(root))


def repin(root: Path, schema_id: str, edit: Any) -> None:
    path = root / f"{schema_id}.json"
    data = json.loads(path.read_text())
    edit(data)
    raw = json.dumps(data).encode()
    path.write_bytes(raw)
    pins = json.loads((root / "pins.json").read_text())
    pins[schema_id] = "sha256:" + hashlib.sha256(raw).hexdigest()
    (root / "pins.json").write_text(json.dumps(pins))


def test_narrower_profile_gets_a_distinct_contract_digest(tmp_path: Path) -> None:
    root = copy_bundles(tmp_path)

    def narrow(data: dict[str, Any]) -> None:
        data["profile"] = "active-backup-max4"
        data["inputs"][0]["max"] = 4

    repin(root, "bond/v1alpha1", narrow)
    wide = Registry()
    bond.register(wide)
    narrow_registry = Registry(BundleStore(root))
    bond.register(narrow_registry)
    (wide_reg,) = wide.seal()
    (narrow_reg,) = narrow_registry.seal()
    assert narrow_reg.descriptor.input_port("members") is not None
    assert narrow_reg.contract_digest != wide_reg.contract_digest


def test_malformed_bundle_is_named(tmp_path: Path) -> None:
    root = copy_bundles(tmp_path)
    repin(root, "bond/v1alpha1", lambda d: d.update(stepKinds=["Sometimes"]))
    with pytest.raises(RegistrationError, match="stepKinds/0"):
        seal_one(Endpoint("bond.sock", "bond/v1alpha1", bond.Plugin()), BundleStore(root))


def test_invalid_config_schema_in_bundle_fails(tmp_path: Path) -> None:
    root = copy_bundles(tmp_path)
    repin(root, "bond/v1alpha1", lambda d: d["configSchema"].update(type="objekt"))
    with pytest.raises(RegistrationError, match="bond/v1alpha1"):
        seal_one(Endpoint("bond.sock", "bond/v1alpha1", bond.Plugin()), BundleStore(root))


def test_one_bad_registration_fails_the_whole_set() -> None:
    registry = Registry()
    links.register(registry)
    registry.register(
        Endpoint(
            "bad.sock",
            "bond/v1alpha1",
            _Handler(DescriptorRef("bond", "v1alpha1", (StepKind.OPERATION,), "nope/v1")),
        )
    )
    with pytest.raises(RegistrationError, match="not pinned"):
        registry.seal()


@pytest.mark.parametrize(
    ("endpoints", "message"),
    [
        (
            [
                Endpoint("bond.sock", "bond/v1alpha1", bond.Plugin()),
                Endpoint("bond.sock", "vlan/v1alpha1", links.Plugin(links.Kind.VLAN)),
            ],
            "duplicate socket name 'bond.sock'",
        ),
        (
            [
                Endpoint("a.sock", "bond/v1alpha1", bond.Plugin()),
                Endpoint("b.sock", "bond/v1alpha1", bond.Plugin()),
            ],
            "duplicate state namespace",
        ),
        ([Endpoint("bond", "bond/v1alpha1", bond.Plugin())], "socket name must look like"),
        ([Endpoint("../bond.sock", "bond/v1alpha1", bond.Plugin())], "socket name must look like"),
        (
            [Endpoint("bond.sock", "sriov/v1alpha1", bond.Plugin())],
            "state namespace 'sriov/v1alpha1'",
        ),
        ([Endpoint("bond.sock", "bond/v1alpha1", object())], "lacks describe"),  # type: ignore[arg-type]
        ([], "no endpoints registered"),
    ],
)
def test_invalid_registration_sets(endpoints: list[Endpoint], message: str) -> None:
    registry = Registry()
    for ep in endpoints:
        registry.register(ep)
    with pytest.raises(RegistrationError, match=message):
        registry.seal()


def test_registry_is_sealed_after_success() -> None:
    registry = Registry()
    bond.register(registry)
    registry.seal()
    with pytest.raises(RegistrationError, match="sealed"):
        bond.register(registry)


def test_link_kind_is_fixed_by_registration() -> None:
    with pytest.raises(ValueError, match="'bond' is not a valid Kind"):
        links.Plugin("bond")  # type: ignore[arg-type]
