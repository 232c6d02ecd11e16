"""DeviceInventory files: the JSON Schema names each bad field's path and rule, and the
reader adds what a schema cannot say (unique device names)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from plugins.coordinator import ManifestError, YAMLLoadError, load_inventory, parse_inventory
from plugins.coordinator._inventory import INVENTORY_SCHEMA
from plugins.sdk import DocumentSchema

GOOD = """\
kind: DeviceInventory
pool: node-1
devices:
- name: enp3s0f0v0
  attributes:
    dra.networking: {type: vf, pfName: enp3s0f0, vfIndex: 0, trusted: false}
- name: enp3s0f2
  attributes:
    dra.networking: {type: pf, ifName: enp3s0f2}
  capacity:
    dra.networking: {macvlans: "64", ipvlans: 8}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    return path


def test_the_schema_is_packaged_as_a_2020_12_schema() -> None:
    schema = DocumentSchema.packaged("plugins.coordinator", INVENTORY_SCHEMA)
    assert schema.schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    text = resources.files("plugins.coordinator").joinpath("schemas", INVENTORY_SCHEMA)
    assert json.loads(text.read_text()) == schema.schema


def test_a_good_inventory_loads_with_whole_number_capacity(tmp_path: Path) -> None:
    inventory = load_inventory(write(tmp_path, GOOD))
    assert (inventory.pool, inventory.driver) == ("node-1", "dra.networking")
    first, parent = inventory.devices
    assert dict(first.networking) == {
        "type": "vf",
        "pfName": "enp3s0f0",
        "vfIndex": 0,
        "trusted": False,
    }
    assert {d: dict(c) for d, c in parent.capacity.items()} == {
        "dra.networking": {"macvlans": 64, "ipvlans": 8}
    }


# (replace this, with that) in GOOD -> the one problem it causes: (path, rule)
BAD = [
    ("kind: DeviceInventory", "kind: DeviceInventroy", ("kind", "enum")),
    ("pool: node-1\n", "", ("pool", "required")),
    ("pool: node-1", "pool: Node_1", ("pool", "pattern")),
    ("pool: node-1", "pool: node-1\nowner: me", ("owner", "unknown-key")),
    ("pool: node-1", "pool: node-1\ndriver: DRA", ("driver", "pattern")),
    ("- name: enp3s0f0v0", "- name: enp3s0f0.v0", ("devices[0].name", "pattern")),
    ("- name: enp3s0f2\n", "- name: enp3s0f2\n  owner: me\n", ("devices[1].owner", "unknown-key")),
    (
        "    dra.networking: {type: pf, ifName: enp3s0f2}\n",
        "    dra.networking: {type: pf, ifName: enp3s0f2}\n    Example.Com: {x: 1}\n",
        ('devices[1].attributes["Example.Com"]', "pattern"),
    ),
    (
        "type: vf, pfName",
        "type: vf, pf-name",
        ('devices[0].attributes["dra.networking"]["pf-name"]', "pattern"),
    ),
    (
        "vfIndex: 0,",
        "vfIndex: [0],",
        ('devices[0].attributes["dra.networking"].vfIndex', "type"),
    ),
    (
        "vfIndex: 0,",
        "vfIndex: 0.5,",
        ('devices[0].attributes["dra.networking"].vfIndex', "type"),
    ),
    ("{type: vf, ", "{", ('devices[0].attributes["dra.networking"].type', "required")),
    ("{type: vf, ", "{type: 7, ", ('devices[0].attributes["dra.networking"].type', "type")),
    (
        'macvlans: "64"',
        'macvlans: "1k"',
        ('devices[1].capacity["dra.networking"].macvlans', "pattern"),
    ),
    ("ipvlans: 8", "ipvlans: -8", ('devices[1].capacity["dra.networking"].ipvlans', "range")),
    ("ipvlans: 8", "IPVlans: 8", ('devices[1].capacity["dra.networking"].IPVlans', "pattern")),
]


@pytest.mark.parametrize(
    ("this", "that", "problem"), BAD, ids=[p[2][0] + " " + p[2][1] for p in BAD]
)
def test_a_bad_inventory_names_the_file_path_and_rule(
    tmp_path: Path, this: str, that: str, problem: tuple[str, str]
) -> None:
    assert this in GOOD
    path = write(tmp_path, GOOD.replace(this, that, 1))
    with pytest.raises(ManifestError) as info:
        load_inventory(path)
    assert info.value.source == str(path)
    assert [(p.path, p.rule) for p in info.value.problems] == [problem]
    assert str(info.value).startswith(f"{path}: {problem[0]}: ")
    assert str(info.value).endswith(f" [{problem[1]}]")


def test_every_shape_problem_is_reported_in_one_error_before_the_readers_checks() -> None:
    doc = {
        "kind": "DeviceInventory",
        "pool": "p",
        "devices": [
            {"name": "a", "attributes": {"dra.networking": {"type": "vf", "x": [1]}}},
            {"name": "a", "attributes": {"dra.networking": {"pfName": "p"}}, "owner": "me"},
        ],
    }
    with pytest.raises(ManifestError) as info:
        parse_inventory(doc, "inventory.yaml")
    # The repeated name "a" is the reader's check: reported once the shape is right.
    assert [str(p) for p in info.value.problems] == [
        "devices[1].owner: unknown key 'owner' [unknown-key]",
        "devices[1].attributes[\"dra.networking\"].type: missing required field 'type' [required]",
        'devices[0].attributes["dra.networking"].x: must be of type string or integer or boolean,'
        " got array [type]",
    ]


def test_devices_must_be_a_non_empty_list(tmp_path: Path) -> None:
    path = write(tmp_path, "kind: DeviceInventory\npool: p\ndevices: []\n")
    with pytest.raises(ManifestError) as info:
        load_inventory(path)
    assert str(info.value) == f"{path}: devices: must have at least 1 items, got 0 [size]"


def test_device_names_are_unique_in_an_inventory(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("- name: enp3s0f2", "- name: enp3s0f0v0"))
    with pytest.raises(ManifestError) as info:
        load_inventory(path)
    (problem,) = info.value.problems
    assert (problem.path, problem.rule) == ("devices[1].name", "")
    assert str(info.value) == f"{path}: devices[1].name: duplicate device 'enp3s0f0v0'"


def test_an_inventory_file_holds_exactly_one_document(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "---\n" + GOOD)
    with pytest.raises(ManifestError, match="expected exactly one DeviceInventory document"):
        load_inventory(path)


def test_a_repeated_key_is_refused_by_the_loader_with_its_place(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("pool: node-1", "pool: node-1\npool: node-2"))
    with pytest.raises(YAMLLoadError) as info:
        load_inventory(path)
    assert (info.value.source, info.value.line) == (str(path), 3)
