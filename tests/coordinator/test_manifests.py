"""Parsing NetworkTopology, DeviceExposurePolicy and inventory documents strictly."""

from __future__ import annotations

from typing import Any

import pytest

from plugins.coordinator import (
    API_VERSION,
    DRIVER_DOMAIN,
    ManifestError,
    PortSource,
    load_policies,
    load_topology,
    parse_policy,
    parse_topology,
)
from plugins.coordinator._policy import POLICY_SCHEMA
from plugins.coordinator._topology import TOPOLOGY_SCHEMA
from plugins.coordinator._yaml import DNS_LABEL, DNS_SUBDOMAIN, QUALIFIED_NAME
from plugins.sdk import DocumentSchema, InvalidArgument, Sharing, StepKind
from tests.coordinator.support import TOPOLOGIES, inventory, policies, raw, raw_policies


def topology_paths(doc: dict[str, Any]) -> tuple[str, ...]:
    with pytest.raises(ManifestError) as info:
        parse_topology(doc)
    assert isinstance(info.value, InvalidArgument)
    return info.value.paths


def policy_paths(doc: dict[str, Any]) -> tuple[str, ...]:
    with pytest.raises(ManifestError) as info:
        parse_policy(doc)
    return info.value.paths


# --- topologies --------------------------------------------------------------------------


def test_vf_bond_vlan_parses_into_frozen_dataclasses() -> None:
    topo = load_topology(TOPOLOGIES / "vf-bond-vlan.yaml")
    assert topo.name == "sdk-vf-bond-vlan"
    assert (topo.runtime_profile, topo.attachment_policy) == ("nri-secondary-v1", "SinglePod")
    assert topo.execution.max_parallel_steps == 1
    assert topo.execution.primary_network_policy == "Preserve"
    assert topo.step_names == ("vf0", "vf1", "bond0", "data-vlan")
    vf0, vf1, bond0, vlan = topo.steps
    assert vf0.kind is StepKind.ALLOCATION
    assert bond0.kind is StepKind.OPERATION
    assert (vf0.plugin_ref.name, vf0.plugin_ref.contract_version) == ("sriov", "v1alpha1")
    assert vf0.allocation is not None
    assert vf0.allocation.sharing is Sharing.EXCLUSIVE
    assert 'pfName == "enp3s0f0"' in vf0.allocation.selector.cel
    assert vf1.interface_name == "net2"
    assert bond0.allocation is None
    assert bond0.inputs["members"] == (
        PortSource("vf0", "interface"),
        PortSource("vf1", "interface"),
    )
    assert vlan.inputs["parent"] == (PortSource("bond0", "interface"),)
    assert vlan.config == {"vlanId": 100, "mtu": 1500}
    assert vf0.config["vf"] == {"vlan": 0, "spoofCheck": False, "trust": True}
    assert topo.exports["data"] == PortSource("data-vlan", "interface")
    with pytest.raises(AttributeError):
        vf0.name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        bond0.inputs["members"] = ()  # type: ignore[index]


def test_shared_capacity_request_parses() -> None:
    (step,) = parse_topology(raw("macvlan")).steps
    assert step.allocation is not None
    assert step.allocation.sharing is Sharing.SHARED
    assert dict(step.allocation.capacity_requests) == {"dra.networking/macvlans": "1"}


def test_unknown_key_is_named_by_its_path() -> None:
    doc = raw("vf-bond-vlan")
    doc["spec"]["steps"][2]["pluginRef"]["nmae"] = "bond"
    assert topology_paths(doc) == ("spec.steps[2].pluginRef.nmae",)


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d.update(apiVersion="networking.dra.io/v1"), "apiVersion"),
        (lambda d: d.update(kind="Topology"), "kind"),
        (lambda d: d.update(status={}), "status"),
        (lambda d: d["metadata"].update(name="Not_A_Name"), "metadata.name"),
        (lambda d: d["metadata"].update(uid="x"), "metadata.uid"),
        (lambda d: d["spec"].update(runtimeProfile="cni"), "spec.runtimeProfile"),
        (lambda d: d["spec"].update(attachmentPolicy="Shared"), "spec.attachmentPolicy"),
        (
            lambda d: d["spec"]["execution"].update(maxParallelSteps=0),
            "spec.execution.maxParallelSteps",
        ),
        (
            lambda d: d["spec"]["execution"].update(maxParallelSteps=True),
            "spec.execution.maxParallelSteps",
        ),
        (
            lambda d: d["spec"]["execution"].update(primaryNetworkPolicy="Replace"),
            "spec.execution.primaryNetworkPolicy",
        ),
        (lambda d: d["spec"].update(steps=[]), "spec.steps"),
        (lambda d: d["spec"]["steps"][0].update(kind="Root"), "spec.steps[0].kind"),
        (lambda d: d["spec"]["steps"][0].update(name="VF0"), "spec.steps[0].name"),
        (lambda d: d["spec"]["steps"][0].pop("pluginRef"), "spec.steps[0].pluginRef"),
        (
            lambda d: d["spec"]["steps"][0]["pluginRef"].update(contractVersion="1"),
            "spec.steps[0].pluginRef.contractVersion",
        ),
        (
            lambda d: d["spec"]["steps"][0]["allocation"].update(sharing="exclusive"),
            "spec.steps[0].allocation.sharing",
        ),
        (
            lambda d: d["spec"]["steps"][0]["allocation"]["selector"].update(cel=""),
            "spec.steps[0].allocation.selector.cel",
        ),
        (
            lambda d: d["spec"]["steps"][0]["allocation"].update(capacityRequests={"macvlans": 1}),
            "spec.steps[0].allocation.capacityRequests.macvlans",
        ),
        (lambda d: d["spec"]["steps"][0].update(config=[1]), "spec.steps[0].config"),
        (
            lambda d: d["spec"]["steps"][0].update(config={"mtu": float("nan")}),
            "spec.steps[0].config",
        ),
        (lambda d: d["spec"]["steps"][0].update(interfaceName=5), "spec.steps[0].interfaceName"),
        (
            lambda d: d["spec"]["steps"][2]["inputs"].update(members=[]),
            "spec.steps[2].inputs.members",
        ),
        (
            lambda d: d["spec"]["steps"][2]["inputs"]["members"][1].update(source={}),
            "spec.steps[2].inputs.members[1].source",
        ),
        (
            lambda d: d["spec"]["steps"][3]["inputs"]["parent"]["from"].pop("output"),
            "spec.steps[3].inputs.parent.from.output",
        ),
        (
            lambda d: d["spec"]["exports"]["data"]["from"].update(step="Bad Name"),
            "spec.exports.data.from.step",
        ),
    ],
)
def test_shape_problems_are_named_by_path(mutate: Any, path: str) -> None:
    doc = raw("vf-bond-vlan")
    mutate(doc)
    assert topology_paths(doc) == (path,)


@pytest.mark.parametrize("quantity", ["1k", "-1", "1.5", True, 1.0])
def test_capacity_quantities_are_whole_numbers(quantity: object) -> None:
    doc = raw("macvlan")
    doc["spec"]["steps"][0]["allocation"]["capacityRequests"]["dra.networking/macvlans"] = quantity
    assert topology_paths(doc) == (
        'spec.steps[0].allocation.capacityRequests["dra.networking/macvlans"]',
    )


def test_integer_quantity_is_normalized_to_a_string() -> None:
    doc = raw("macvlan")
    doc["spec"]["steps"][0]["allocation"]["capacityRequests"]["dra.networking/macvlans"] = 1
    (step,) = parse_topology(doc).steps
    assert step.allocation is not None
    assert step.allocation.capacity_requests["dra.networking/macvlans"] == "1"


def test_every_shape_problem_is_reported_at_once() -> None:
    doc = raw("vf-bond-vlan")
    doc["spec"]["steps"][0]["kind"] = "Root"
    doc["spec"]["steps"][1]["extra"] = 1
    doc["spec"]["execution"]["maxParallelSteps"] = "1"
    assert set(topology_paths(doc)) == {
        "spec.steps[0].kind",
        "spec.steps[1].extra",
        "spec.execution.maxParallelSteps",
    }


def test_a_topology_file_holds_one_document(tmp_path: Any) -> None:
    path = tmp_path / "two.yaml"
    path.write_text((TOPOLOGIES / "macvlan.yaml").read_text() + "---\n{}\n")
    with pytest.raises(ManifestError, match="exactly one NetworkTopology"):
        load_topology(path)


# --- policies ------------------------------------------------------------------------------


def test_the_two_policies_parse() -> None:
    macvlan, ipvlan = policies()
    assert (macvlan.name, ipvlan.name) == ("sdk-parent-macvlan", "sdk-parent-ipvlan")
    ex = macvlan.exposure
    assert (ex.device_name_suffix, ex.allow_multiple_allocations) == ("-macvlan", True)
    assert ex.capacity["macvlans"].value == "64"
    rp = ex.capacity["macvlans"].request_policy
    assert rp is not None
    assert (rp.default, rp.valid_values) == ("1", ("1",))
    supported = macvlan.supports("macvlan")
    assert supported is not None
    assert supported.consumes() == {"dra.networking/macvlans": "1"}
    assert macvlan.supports("ipvlan") is None
    (rule,) = macvlan.groups_naming("macvlan")
    assert (rule.scope, rule.domain, rule.groups) == ("interface", "interface-mode", ("macvlan",))
    assert ipvlan.groups_naming("macvlan") == ()


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda p: p["spec"].update(action="hide"), "spec.action"),
        (lambda p: p["spec"]["exposure"].update(colour="red"), "spec.exposure.colour"),
        (
            lambda p: p["spec"]["exposure"]["supportedNetworkPlugins"][0].update(
                consumePerAllocation={"ipvlans": "1"}
            ),
            "spec.exposure.supportedNetworkPlugins[0].consumePerAllocation.ipvlans",
        ),
        (
            lambda p: p["spec"]["exposure"]["supportedNetworkPlugins"][0].update(
                consumePerAllocation={"macvlans": "2"}
            ),
            "spec.exposure.supportedNetworkPlugins[0].consumePerAllocation.macvlans",
        ),
        (
            lambda p: p["spec"]["exposure"]["supportedNetworkPlugins"][0].pop(
                "consumePerAllocation"
            ),
            "spec.exposure.supportedNetworkPlugins[0].consumePerAllocation",
        ),
        (
            lambda p: p["spec"]["exposure"]["capacity"]["macvlans"]["requestPolicy"].update(
                default="2"
            ),
            "spec.exposure.capacity.macvlans.requestPolicy.default",
        ),
        (
            lambda p: p["spec"]["exposure"]["capacity"]["macvlans"].update(value="lots"),
            "spec.exposure.capacity.macvlans.value",
        ),
        (
            lambda p: p["spec"]["exposure"]["compatibility"][0].update(scope="rack"),
            "spec.exposure.compatibility[0].scope",
        ),
        (
            lambda p: p["spec"]["exposure"]["compatibility"][0].update(groups=[]),
            "spec.exposure.compatibility[0].groups",
        ),
        (
            lambda p: p["spec"]["exposure"].update(deviceNameSuffix="_MV"),
            "spec.exposure.deviceNameSuffix",
        ),
    ],
)
def test_policy_problems_are_named_by_path(mutate: Any, path: str) -> None:
    doc = raw_policies()[0]
    mutate(doc)
    assert policy_paths(doc) == (path,)


# --- inventory -----------------------------------------------------------------------------


def test_inventory_follows_the_fake_lab_pci_scheme() -> None:
    inv = inventory()
    assert inv.pool == "fake-node-1"
    vfs = [d for d in inv.devices if d.networking["type"] == "vf"]
    assert [d.name for d in vfs] == [f"enp3s0f{pf}v{i}" for pf in (0, 1) for i in range(4)]
    assert [d.networking["pciAddress"] for d in vfs] == [
        f"0000:03:10.{2 * i + pf}" for pf in (0, 1) for i in range(4)
    ]
    assert [d.networking["vfIndex"] for d in vfs] == [0, 1, 2, 3] * 2
    parent = inv.device("enp3s0f2")
    assert parent is not None
    assert dict(parent.attributes[DRIVER_DOMAIN]) == {
        "type": "pf",
        "ifName": "enp3s0f2",
        "pciAddress": "0000:03:00.2",
    }


def test_policy_names_are_unique_within_a_file(tmp_path: Any) -> None:
    text = (TOPOLOGIES / "policies.yaml").read_text()
    first = text.split("\n---\n")[0]
    path = tmp_path / "twice.yaml"
    path.write_text(first + "\n---\n" + first)
    with pytest.raises(ManifestError, match="duplicate 'sdk-parent-macvlan'"):
        load_policies(path)


# --- schemas -------------------------------------------------------------------------------


def test_a_bad_topology_file_names_the_file_path_and_rule(tmp_path: Any) -> None:
    path = tmp_path / "topology.yaml"
    text = (TOPOLOGIES / "macvlan.yaml").read_text()
    path.write_text(text.replace("maxParallelSteps: 1", "maxParallelSteps: many"))
    with pytest.raises(ManifestError) as info:
        load_topology(path)
    (problem,) = info.value.problems
    assert (problem.path, problem.rule) == ("spec.execution.maxParallelSteps", "type")
    assert str(info.value) == (
        f'{path}: spec.execution.maxParallelSteps: must be of type integer, got string "many"'
        " [type]"
    )


def test_a_bad_policy_names_the_path_and_rule() -> None:
    doc = raw_policies()[0]
    doc["spec"]["exposure"]["compatibility"][0]["groups"] = ["Mac Vlan"]
    with pytest.raises(ManifestError) as info:
        parse_policy(doc, "policies.yaml (document 1)")
    assert str(info.value) == (
        "policies.yaml (document 1): spec.exposure.compatibility[0].groups[0]: must match"
        ' pattern "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", got "Mac Vlan" [pattern]'
    )


@pytest.mark.parametrize("schema_file", [TOPOLOGY_SCHEMA, POLICY_SCHEMA])
def test_the_schemas_agree_with_the_code(schema_file: str) -> None:
    """JSON cannot import the constants it repeats; this keeps the copies equal."""
    schema = DocumentSchema.packaged("plugins.coordinator", schema_file).schema
    assert schema["properties"]["apiVersion"] == {"const": API_VERSION}
    definitions = schema["$defs"]
    assert definitions["dnsLabel"]["pattern"] == DNS_LABEL.pattern
    assert definitions["dnsSubdomain"]["pattern"] == DNS_SUBDOMAIN.pattern
    if schema_file == TOPOLOGY_SCHEMA:
        assert definitions["qualifiedName"]["pattern"] == QUALIFIED_NAME.pattern
        step = definitions["step"]["properties"]
        assert step["kind"]["enum"] == [k.value for k in StepKind]
        assert step["allocation"]["properties"]["sharing"]["enum"] == [s.value for s in Sharing]
