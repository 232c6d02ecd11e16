"""SlicePublisher: one pool per node, slices of at most 128 devices, the generation bumped
on change only, stale slices deleted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.resource_v1 import ResourceSlice

from harness.k8s.apiserver import FakeAPIServer
from plugins.coordinator import AttributeValue, Device, PublishedDevice
from plugins.coordinator.kubeapi import (
    PCI_BUS_ID,
    PCIE_ROOT,
    ApiUnavailable,
    SlicePublisher,
    make_client,
    slice_device,
)
from plugins.sdk import InvalidArgument
from tests.kubeapi import DRIVER, NODE, served


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[FakeAPIServer]:
    with served(request) as server:
        yield server


@pytest.fixture
def client(api: FakeAPIServer) -> Iterator[Client]:
    with make_client(DRIVER, server=api.url, timeout=5) as c:
        yield c


@pytest.fixture
def publisher(client: Client) -> SlicePublisher:
    return SlicePublisher(client, DRIVER, NODE)


def vf(index: int, **extra: Any) -> PublishedDevice:
    attributes = {
        DRIVER: {
            "type": "vf",
            "ifName": f"enp3s0f0v{index}",
            "pciAddress": f"0000:03:10.{index % 8}",
            "vfIndex": index,
            **extra,
        }
    }
    name = f"vf{index:03d}"
    return PublishedDevice(name, Device(name, attributes), None, attributes, {})


def writes(api: FakeAPIServer) -> list[str]:
    return [f"{r.method} {r.status}" for r in api.requests if r.method != "GET"]


def pools(api: FakeAPIServer) -> list[tuple[str, int, int, int]]:
    """(name, generation, slice count, devices) per slice on the server."""
    return [
        (
            s["metadata"]["name"],
            s["spec"]["pool"]["generation"],
            s["spec"]["pool"]["resourceSliceCount"],
            len(s["spec"].get("devices", [])),
        )
        for s in api.slices()
    ]


def test_a_device_goes_out_with_qualified_and_standard_attributes() -> None:
    attributes: dict[str, dict[str, AttributeValue]] = {
        DRIVER: {
            "type": "pf",
            "ifName": "enp3s0f2",
            "pciAddress": "0000:03:00.2",
            "pcieRoot": "pci0000:00",
            "numaNode": 1,
            "sriovCapable": True,
        }
    }
    device = PublishedDevice(
        "enp3s0f2", Device("enp3s0f2", attributes), None, attributes, {f"{DRIVER}/macvlans": 64}
    )
    assert slice_device(device) == {
        "name": "enp3s0f2",
        "attributes": {
            f"{DRIVER}/ifName": {"string": "enp3s0f2"},
            f"{DRIVER}/numaNode": {"int": 1},
            f"{DRIVER}/pciAddress": {"string": "0000:03:00.2"},
            PCI_BUS_ID: {"string": "0000:03:00.2"},
            PCIE_ROOT: {"string": "pci0000:00"},
            f"{DRIVER}/sriovCapable": {"bool": True},
            f"{DRIVER}/type": {"string": "pf"},
        },
        "capacity": {f"{DRIVER}/macvlans": {"value": "64"}},
    }


def test_a_node_publishes_one_pool_named_after_it(
    api: FakeAPIServer, publisher: SlicePublisher
) -> None:
    outcome = publisher.publish([vf(1), vf(0)])
    assert (outcome.generation, outcome.written, outcome.refused) == (1, True, ())
    [stored] = api.slices()
    assert stored["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert (stored["spec"]["driver"], stored["spec"]["nodeName"]) == (DRIVER, NODE)
    assert [d["name"] for d in stored["spec"]["devices"]] == ["vf000", "vf001"]
    [listing] = [r for r in api.requests if r.method == "GET"]
    assert "fieldSelector=spec.nodeName%3Dnode-1%2Cspec.driver%3Ddra.networking" in listing.query


def test_a_large_pool_is_cut_into_slices_of_128(
    api: FakeAPIServer, publisher: SlicePublisher
) -> None:
    outcome = publisher.publish([vf(i) for i in range(300)])
    assert outcome.slices == tuple(f"{NODE}-{DRIVER}-{i}" for i in range(3))
    assert pools(api) == [
        (f"{NODE}-{DRIVER}-0", 1, 3, 128),
        (f"{NODE}-{DRIVER}-1", 1, 3, 128),
        (f"{NODE}-{DRIVER}-2", 1, 3, 44),
    ]


def test_publishing_the_same_devices_writes_nothing(
    api: FakeAPIServer, client: Client, publisher: SlicePublisher
) -> None:
    publisher.publish([vf(i) for i in range(200)])
    version, before = api.version, len(writes(api))
    again = SlicePublisher(client, DRIVER, NODE).publish([vf(i) for i in range(200)])  # a restart
    assert (again.generation, again.written) == (1, False)
    assert api.version == version
    assert len(writes(api)) == before


def test_a_change_bumps_every_slice_to_the_next_generation(
    api: FakeAPIServer, publisher: SlicePublisher
) -> None:
    publisher.publish([vf(i) for i in range(200)])
    outcome = publisher.publish([vf(i, numaNode=0) if i == 150 else vf(i) for i in range(200)])
    assert outcome.generation == 2
    assert [(g, c) for _, g, c, _ in pools(api)] == [(2, 2), (2, 2)]


def test_a_shrunk_pool_deletes_its_stale_slices_and_leaves_others_alone(
    api: FakeAPIServer, client: Client, publisher: SlicePublisher
) -> None:
    SlicePublisher(client, DRIVER, "node-2").publish([vf(0)])
    SlicePublisher(client, "gpu.example.com", NODE).publish([vf(0)])
    publisher.publish([vf(i) for i in range(300)])
    outcome = publisher.publish([vf(0)])
    assert outcome.deleted == (f"{NODE}-{DRIVER}-1", f"{NODE}-{DRIVER}-2")
    assert sorted(s["metadata"]["name"] for s in api.slices()) == [
        f"{NODE}-{DRIVER}-0",
        f"{NODE}-gpu.example.com-0",
        f"node-2-{DRIVER}-0",
    ]
    assert pools(api)[0][1:] == (2, 1, 1)


def test_an_empty_pool_is_one_empty_slice(api: FakeAPIServer, publisher: SlicePublisher) -> None:
    publisher.publish([vf(0)])
    assert publisher.publish([]).written
    assert pools(api) == [(f"{NODE}-{DRIVER}-0", 2, 1, 0)]
    assert not publisher.publish([]).written


def test_a_device_over_the_api_limits_is_refused_and_the_others_published(
    api: FakeAPIServer, publisher: SlicePublisher
) -> None:
    crowded = vf(1, **{f"extra{i}": i for i in range(30)})  # 34 of ours, and the standard pciBusID
    wordy = vf(2, description="x" * 65)
    outcome = publisher.publish([vf(0), crowded, wordy])
    assert [(r.device, r.message) for r in outcome.refused] == [
        (
            "vf001",
            "device 'vf001' has 35 attributes and capacities; a ResourceSlice device holds at most 32",
        ),
        ("vf002", f"device 'vf002' attribute {DRIVER}/description is 65 characters; at most 64"),
    ]
    assert [d["name"] for d in api.slices()[0]["spec"]["devices"]] == ["vf000"]


def test_devices_published_twice_are_refused_before_any_request(
    api: FakeAPIServer, publisher: SlicePublisher
) -> None:
    with pytest.raises(InvalidArgument, match=r"devices published twice: \['vf000'\]"):
        publisher.publish([vf(0), vf(0)])
    assert api.requests == ()


def test_an_unavailable_api_server_is_retryable(
    api: FakeAPIServer, publisher: SlicePublisher
) -> None:
    api.set_unavailable(True)
    with pytest.raises(ApiUnavailable, match="503"):
        publisher.publish([vf(0)])
    api.set_unavailable(False)
    assert publisher.publish([vf(0)]).written


def test_what_is_published_reads_back_through_lightkube(
    client: Client, publisher: SlicePublisher
) -> None:
    publisher.publish([vf(0)])
    [found] = client.list(ResourceSlice, fields={"spec.nodeName": NODE})
    assert found.spec.devices is not None
    attributes = found.spec.devices[0].attributes or {}
    assert attributes[PCI_BUS_ID] == {"string": "0000:03:10.0"}
