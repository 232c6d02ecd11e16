"""validate_topology: every check of the blueprint's list, and the compiled hook order."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from plugins.coordinator import (
    TopologyError,
    TopologyErrors,
    parse_topology,
    validate_topology,
)
from plugins.sdk import InvalidArgument, PortSpec
from tests.coordinator.support import (
    compile_doc,
    errors,
    message,
    policies,
    raw,
    raw_policies,
    regs,
    steps,
    where,
)


def source(step: str, output: str = "interface") -> dict[str, Any]:
    return {"from": {"step": step, "output": output}}


# --- the examples compile to the blueprint's order ---------------------------------------


def test_vf_bond_vlan_compiles_to_the_blueprint_order() -> None:
    compiled = compile_doc(raw("vf-bond-vlan"))
    assert compiled.prepare_order == ("vf0", "vf1")
    assert compiled.connect_order == ("vf0", "vf1", "bond0", "data-vlan")
    assert compiled.remove_order == ("data-vlan", "bond0", "vf1", "vf0")
    assert compiled.unprepare_order == ("vf1", "vf0")
    bond0 = compiled.step("bond0")
    assert [str(s) for s in bond0.inputs["members"]] == ["vf0.interface", "vf1.interface"]
    assert bond0.dependencies == ("vf0", "vf1")
    assert dict(bond0.interface_names) == {"interface": "bond0"}
    assert bond0.config["mode"] == "active-backup"
    assert [str(s) for s in compiled.step("data-vlan").inputs["parent"]] == ["bond0.interface"]
    assert compiled.step("vf0").inputs == {}
    assert [s.name for s in compiled.roots()] == ["vf0", "vf1"]
    assert compiled.step("vf0").plugin == "sriov"
    assert compiled.step("vf0").is_root
    assert str(compiled.exports["data"]) == "data-vlan.interface"


@pytest.mark.parametrize(("name", "plugin"), [("macvlan", "macvlan"), ("ipvlan", "ipvlan")])
def test_shared_parent_examples_compile(name: str, plugin: str) -> None:
    compiled = compile_doc(raw(name))
    assert compiled.prepare_order == compiled.connect_order == ("secondary",)
    assert compiled.remove_order == compiled.unprepare_order == ("secondary",)
    step = compiled.step("secondary")
    assert step.plugin == plugin
    assert dict(step.capacity_requests) == {f"dra.networking/{plugin}s": 1}
    assert step.policies == (f"sdk-parent-{plugin}",)
    assert dict(step.interface_names) == {"interface": "secondary0"}


def test_connect_order_is_topological_and_stable_by_step_order() -> None:
    doc = raw("vf-bond-vlan")
    doc["spec"]["steps"].reverse()  # consumers first in the manifest
    compiled = compile_doc(doc)
    assert compiled.prepare_order == ("vf1", "vf0")
    assert compiled.connect_order == ("vf1", "vf0", "bond0", "data-vlan")
    assert compiled.remove_order == ("data-vlan", "bond0", "vf0", "vf1")
    assert compiled.unprepare_order == ("vf0", "vf1")


def test_descriptors_or_registrations_are_accepted() -> None:
    plain = {name: reg.descriptor for name, reg in regs().items()}
    compiled = validate_topology(parse_topology(raw("vf-bond-vlan")), plain)
    assert compiled.connect_order == ("vf0", "vf1", "bond0", "data-vlan")


def test_all_errors_are_collected_in_one_invalid_argument() -> None:
    doc = raw("vf-bond-vlan")
    s = steps(doc)
    s["vf0"]["pluginRef"]["contractVersion"] = "v1beta1"
    s["vf1"]["interfaceName"] = "net1"
    s["bond0"]["config"]["mode"] = "802.3ad"
    doc["spec"]["exports"]["data"]["from"]["step"] = "nowhere"
    err = errors(doc)
    assert isinstance(err, InvalidArgument)
    assert err.where() == [
        ("vf0", "pluginRef.contractVersion"),
        ("vf1", "interfaceName"),
        ("bond0", "config"),
        (None, "exports.data.from.step"),
    ]
    assert all(isinstance(e, TopologyError) and isinstance(e, InvalidArgument) for e in err.errors)
    assert "4 problems" in str(err)
    assert "step 'vf1' field 'interfaceName'" in str(err)


# --- step kinds ------------------------------------------------------------------------------


def test_plugin_step_kind_must_match() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["bond0"]["kind"] = "Allocation"
    assert ("bond0", "kind") in where(doc)
    assert "runs only as Operation steps" in message(doc, "bond0", "kind")


def test_allocation_step_needs_an_allocation() -> None:
    doc = raw("vf-bond-vlan")
    del steps(doc)["vf0"]["allocation"]
    assert where(doc) == [("vf0", "allocation")]


def test_operation_step_must_not_allocate() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["bond0"]["allocation"] = steps(raw("vf-bond-vlan"))["vf0"]["allocation"]
    assert where(doc) == [("bond0", "allocation")]


def test_an_allocation_plugin_cannot_run_as_an_operation() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["vf0"]["kind"] = "Operation"
    assert where(doc) == [("vf0", "kind"), ("vf0", "allocation")]


# --- plugin references ---------------------------------------------------------------------


def test_unknown_plugin() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["vf0"]["pluginRef"]["name"] = "sriov-dpdk"
    assert where(doc) == [("vf0", "pluginRef.name")]
    assert "known: bond, ipvlan, macvlan, sriov, vlan" in message(doc, "vf0", "pluginRef.name")


def test_contract_version_must_match() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["data-vlan"]["pluginRef"]["contractVersion"] = "v1"
    assert where(doc) == [("data-vlan", "pluginRef.contractVersion")]


def test_step_names_are_unique() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["vf1"]["name"] = "vf0"
    assert ("vf0", "name") in where(doc)


# --- input references ----------------------------------------------------------------------


def test_input_must_name_an_existing_step() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["bond0"]["inputs"]["members"][1] = source("vf9")
    assert where(doc) == [("bond0", "inputs.members[1].from.step")]


def test_input_must_name_a_declared_output() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["data-vlan"]["inputs"]["parent"] = source("bond0", "bond")
    assert where(doc) == [("data-vlan", "inputs.parent[0].from.output")]
    assert "has no output 'bond' (interface)" in message(
        doc, "data-vlan", "inputs.parent[0].from.output"
    )


@pytest.mark.parametrize(
    ("topology", "consumer", "port", "producer", "output"),
    [
        ("vf-bond-vlan", "bond0", "members", "vf0", "vf"),
        ("vf-bond-vlan", "data-vlan", "parent", "vf1", "vf"),
    ],
)
def test_prepared_outputs_are_not_connection_outputs(
    topology: str, consumer: str, port: str, producer: str, output: str
) -> None:
    doc = raw(topology)
    sources = steps(doc)[consumer]["inputs"][port]
    if isinstance(sources, list):
        sources[0] = source(producer, output)
    else:
        steps(doc)[consumer]["inputs"][port] = source(producer, output)
    field = f"inputs.{port}[0].from.output"
    assert where(doc) == [(consumer, field)]
    assert "is a NodePrepare output of 'sriov'" in message(doc, consumer, field)


def test_shared_parent_preparation_output_cannot_feed_a_vlan() -> None:
    doc = raw("macvlan")
    doc["spec"]["steps"].append(
        {
            "name": "tagged",
            "kind": "Operation",
            "pluginRef": {"name": "vlan", "contractVersion": "v1alpha1"},
            "inputs": {"parent": source("secondary", "parent")},
            "interfaceName": "tagged0",
            "config": {"vlanId": 7, "mtu": 1500},
        }
    )
    assert where(doc) == [("tagged", "inputs.parent[0].from.output")]
    assert "NodePrepare output of 'macvlan'" in message(
        doc, "tagged", "inputs.parent[0].from.output"
    )


def test_the_same_source_twice_on_one_port() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["bond0"]["inputs"]["members"][1] = source("vf0")
    assert where(doc) == [("bond0", "inputs.members[1]")]


def test_output_and_input_types_must_match() -> None:
    registrations = regs()
    sriov = registrations["sriov"].descriptor
    odd = dataclasses.replace(sriov, outputs=(PortSpec("interface", "RdmaDevice/v1"),))
    descriptors = {name: reg.descriptor for name, reg in registrations.items()} | {"sriov": odd}
    with pytest.raises(TopologyErrors) as info:
        validate_topology(parse_topology(raw("vf-bond-vlan")), descriptors)
    assert info.value.where() == [
        ("bond0", "inputs.members[0].from.output"),
        ("bond0", "inputs.members[1].from.output"),
    ]
    assert "is a RdmaDevice/v1, but port 'members' takes KernelInterface/v1" in str(info.value)


# --- ports and cardinality -------------------------------------------------------------------


def test_undeclared_input_port() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["data-vlan"]["inputs"]["lower"] = source("vf0")
    assert where(doc) == [("data-vlan", "inputs.lower")]
    assert "no input port 'lower' (input ports: parent)" in message(
        doc, "data-vlan", "inputs.lower"
    )


def test_a_root_takes_no_inputs() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["vf1"]["inputs"] = {"parent": source("vf0")}
    assert where(doc) == [("vf1", "inputs.parent")]


def test_missing_required_input_port() -> None:
    doc = raw("vf-bond-vlan")
    del steps(doc)["bond0"]["inputs"]
    assert where(doc) == [("bond0", "inputs.members")]
    assert "required input port 'members'" in message(doc, "bond0", "inputs.members")


def test_bond_needs_at_least_two_members() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["bond0"]["inputs"]["members"].pop()
    assert where(doc) == [("bond0", "inputs.members")]
    assert "takes 2..8 KernelInterface/v1 sources, got 1" in message(doc, "bond0", "inputs.members")


def test_bond_takes_at_most_eight_members() -> None:
    doc = raw("vf-bond-vlan")
    vf0 = steps(doc)["vf0"]
    extra = []
    for i in range(2, 9):
        step = {**vf0, "name": f"vf{i}", "interfaceName": f"net{i + 1}"}
        extra.append(step)
    doc["spec"]["steps"][2:2] = extra
    steps(doc)["bond0"]["inputs"]["members"] = [source(f"vf{i}") for i in range(9)]
    assert where(doc) == [("bond0", "inputs.members")]
    assert "got 9" in message(doc, "bond0", "inputs.members")
    steps(doc)["bond0"]["inputs"]["members"].pop()
    assert compile_doc(doc).step("bond0").dependencies == tuple(f"vf{i}" for i in range(8))


def test_vlan_parent_takes_exactly_one_source() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["data-vlan"]["inputs"]["parent"] = [source("bond0"), source("vf0")]
    assert where(doc) == [("data-vlan", "inputs.parent")]
    assert "takes 1 KernelInterface/v1 sources, got 2" in message(doc, "data-vlan", "inputs.parent")


def test_single_source_in_list_form_is_accepted() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["data-vlan"]["inputs"]["parent"] = [source("bond0")]
    assert compile_doc(doc).connect_order[-1] == "data-vlan"


# --- acyclicity ----------------------------------------------------------------------------


def test_cycle_is_reported_with_its_path() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["bond0"]["inputs"]["members"][1] = source("data-vlan")
    assert where(doc) == [("bond0", "inputs")]
    assert "cycle: bond0 -> data-vlan -> bond0" in message(doc, "bond0", "inputs")


def test_a_step_consuming_itself_is_a_cycle() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["data-vlan"]["inputs"]["parent"] = source("data-vlan")
    assert where(doc) == [("data-vlan", "inputs")]
    assert "data-vlan -> data-vlan" in message(doc, "data-vlan", "inputs")


def test_a_longer_cycle_reads_in_data_flow_order_from_its_earliest_step() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["vf1"]["inputs"] = {"extra": [source("data-vlan")]}
    expected = "the step graph has a cycle: vf1 -> bond0 -> data-vlan -> vf1"
    assert message(doc, "vf1", "inputs").endswith(expected)


# --- assigned names --------------------------------------------------------------------------


def test_interface_names_are_unique_across_steps() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["data-vlan"]["interfaceName"] = "net2"
    assert where(doc) == [("data-vlan", "interfaceName")]
    assert "already assigned by step 'vf1'" in message(doc, "data-vlan", "interfaceName")


@pytest.mark.parametrize(
    "name", ["sixteen-bytes-xx", "net 1", "net/1", "net:1", "n\u00e9t", "lo", "eth0"]
)
def test_interface_name_must_be_a_usable_linux_name(name: str) -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["vf0"]["interfaceName"] = name
    assert where(doc) == [("vf0", "interfaceName")]


def test_fifteen_byte_names_are_fine() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["vf0"]["interfaceName"] = "fifteen-bytes-x"
    assert compile_doc(doc).step("vf0").interface_names["interface"] == "fifteen-bytes-x"


def test_plugins_with_named_interfaces_need_an_interface_name() -> None:
    doc = raw("vf-bond-vlan")
    del steps(doc)["bond0"]["interfaceName"]
    assert where(doc) == [("bond0", "interfaceName")]


# --- profile config --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "mutate", "path", "rule"),
    [
        ("vf0", lambda c: c["vf"].update(vlan=4095), "$.vf.vlan", "range"),
        ("vf0", lambda c: c.update(rdmaAccess=True), "$.rdmaAccess", "enum"),
        ("vf1", lambda c: c["vf"].update(qos=3), "$.vf.vlan", "cross-field:qos-requires-vlan"),
        ("bond0", lambda c: c.update(miimon=100), "$.miimon", "unknown-key"),
        ("bond0", lambda c: c.pop("mtu"), "$.mtu", "required"),
        ("data-vlan", lambda c: c.update(mode="bridge"), "$.mode", "cross-field:vlan-forbids-mode"),
    ],
)
def test_config_is_validated_by_the_plugin_contract(
    step: str, mutate: Any, path: str, rule: str
) -> None:
    doc = raw("vf-bond-vlan")
    mutate(steps(doc)[step]["config"])
    err = errors(doc)
    assert err.where() == [(step, "config")]
    (only,) = err.errors
    assert only.path == path
    assert only.details["path"] == path
    assert path in only.message
    assert f"[{rule}]" in only.message


def test_omitted_config_is_checked_like_an_empty_object() -> None:
    doc = raw("macvlan")
    del doc["spec"]["steps"][0]["config"]
    err = errors(doc)
    assert err.where() == [("secondary", "config")]
    assert err.errors[0].path == "$.mode"


def test_macvlan_config_cannot_carry_a_vlan_id() -> None:
    doc = raw("macvlan")
    doc["spec"]["steps"][0]["config"]["vlanId"] = 100
    assert where(doc) == [("secondary", "config")]


# --- shared-parent quantities and groups -----------------------------------------------------

REQUEST = 'allocation.capacityRequests["dra.networking/macvlans"]'


def macvlan_step(doc: dict[str, Any]) -> dict[str, Any]:
    step: dict[str, Any] = doc["spec"]["steps"][0]
    return step


@pytest.mark.parametrize("quantity", ["0", "2", "64"])
def test_shared_step_must_request_exactly_one_unit(quantity: str) -> None:
    doc = raw("macvlan")
    macvlan_step(doc)["allocation"]["capacityRequests"]["dra.networking/macvlans"] = quantity
    assert where(doc) == [("secondary", REQUEST)]


def test_shared_step_must_request_its_own_plugins_capacity() -> None:
    doc = raw("macvlan")
    macvlan_step(doc)["allocation"]["capacityRequests"] = {"dra.networking/ipvlans": "1"}
    assert where(doc) == [("secondary", 'allocation.capacityRequests["dra.networking/ipvlans"]')]


def test_omitted_request_is_accepted_when_the_policy_default_is_one() -> None:
    doc = raw("macvlan")
    del macvlan_step(doc)["allocation"]["capacityRequests"]
    step = compile_doc(doc).step("secondary")
    assert dict(step.capacity_requests) == {"dra.networking/macvlans": 1}


def test_omitted_request_needs_a_policy() -> None:
    doc = raw("macvlan")
    del macvlan_step(doc)["allocation"]["capacityRequests"]
    assert where(doc, ()) == [("secondary", "allocation.capacityRequests")]
    assert compile_doc(raw("macvlan"), ()).step("secondary").policies == ()


def test_omitted_request_needs_a_policy_default_of_one() -> None:
    docs = raw_policies()
    del docs[0]["spec"]["exposure"]["capacity"]["macvlans"]["requestPolicy"]["default"]
    doc = raw("macvlan")
    del macvlan_step(doc)["allocation"]["capacityRequests"]
    assert where(doc, policies(docs)) == [("secondary", "allocation.capacityRequests")]
    assert compile_doc(raw("macvlan"), policies(docs)).prepare_order == ("secondary",)


def test_a_policy_must_offer_the_plugin() -> None:
    only_ipvlan = policies(raw_policies()[1:])
    assert where(raw("macvlan"), only_ipvlan) == [("secondary", "allocation")]
    assert "no DeviceExposurePolicy lists 'macvlan'" in str(errors(raw("macvlan"), only_ipvlan))


def test_policy_consumption_must_match_the_request() -> None:
    docs = raw_policies()
    mv = docs[0]["spec"]["exposure"]
    mv["capacity"]["macvlans"]["requestPolicy"]["validValues"] = ["1", "2"]
    mv["supportedNetworkPlugins"][0]["consumePerAllocation"] = {"macvlans": "2"}
    assert where(raw("macvlan"), policies(docs)) == [("secondary", "allocation")]
    assert 'consumes {"macvlans": "2"}' in str(errors(raw("macvlan"), policies(docs)))


def test_policy_must_have_a_compatibility_group_naming_the_plugin() -> None:
    docs = raw_policies()
    docs[0]["spec"]["exposure"]["compatibility"][0]["groups"] = ["mac-vlan"]
    assert where(raw("macvlan"), policies(docs)) == [("secondary", "allocation")]
    assert "no compatibility group naming 'macvlan'" in str(errors(raw("macvlan"), policies(docs)))


def test_policy_serving_a_shared_step_must_allow_multiple_allocations() -> None:
    docs = raw_policies()
    docs[0]["spec"]["exposure"]["allowMultipleAllocations"] = False
    assert where(raw("macvlan"), policies(docs)) == [("secondary", "allocation.sharing")]


def test_shared_plugins_need_shared_allocations() -> None:
    doc = raw("ipvlan")
    macvlan_step(doc)["allocation"]["sharing"] = "Exclusive"
    assert where(doc) == [("secondary", "allocation.sharing")]


def test_exclusive_plugins_need_exclusive_allocations() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["vf0"]["allocation"]["sharing"] = "Shared"
    assert where(doc) == [("vf0", "allocation.sharing")]


def test_exclusive_steps_request_no_capacity() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["vf0"]["allocation"]["capacityRequests"] = {"dra.networking/macvlans": "1"}
    assert where(doc) == [("vf0", REQUEST)]


# --- selectors and exports -------------------------------------------------------------------


def test_selector_syntax_is_checked_at_validation() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["vf1"]["allocation"]["selector"]["cel"] = (
        'device.attributes["dra.networking"].type =='
    )
    assert where(doc) == [("vf1", "allocation.selector.cel")]
    assert "syntax error" in message(doc, "vf1", "allocation.selector.cel")


def test_export_must_name_an_existing_step() -> None:
    doc = raw("vf-bond-vlan")
    doc["spec"]["exports"]["data"]["from"]["step"] = "vlan"
    assert where(doc) == [(None, "exports.data.from.step")]


@pytest.mark.parametrize("output", ["vf", "members", "iface"])
def test_export_must_name_a_connection_output(output: str) -> None:
    doc = raw("vf-bond-vlan")
    doc["spec"]["exports"]["raw"] = source("vf0", output)
    assert where(doc) == [(None, "exports.raw.from.output")]


def test_exports_are_optional() -> None:
    doc = raw("vf-bond-vlan")
    del doc["spec"]["exports"]
    assert compile_doc(doc).exports == {}


def test_descriptor_keys_must_be_plugin_names() -> None:
    descriptors = dict(regs())
    descriptors["vlan"] = descriptors["bond"]
    with pytest.raises(ValueError, match="describes plugin 'bond'"):
        validate_topology(parse_topology(raw("vf-bond-vlan")), descriptors)
