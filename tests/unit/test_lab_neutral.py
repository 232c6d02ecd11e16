"""A retry on one real-kernel lab is compared with the reference run on another as data
(``harness.crash.lab_neutral``): what only says which lab it ran on is made neutral,
everything else still counts."""

from __future__ import annotations

import json
from typing import Any

from harness.crash import lab_neutral
from plugins.sdk import ResourceHandle


def lab(host_inode: int, pod_path: str, vf_mac: str) -> dict[str, Any]:
    return {
        "namespaces": [
            {"path": "/proc/1/ns/net", "inode": host_inode},
            {"path": pod_path, "inode": host_inode + 1},
        ],
        "links": [{"name": "enp3s0f0v0", "mac": vf_mac}, {"name": "lo", "mac": ""}],
    }


def interface(before: dict[str, Any], mac: str, mtu: int = 1500) -> dict[str, Any]:
    pod = before["namespaces"][1]
    description = {
        "ifName": "net1",
        "mac": mac,
        "mtu": mtu,
        "netns": {"inode": pod["inode"], "path": pod["path"]},
    }
    handle = ResourceHandle(
        id="rh-1",
        type="KernelInterface/v1",
        owner_scope="att-1",
        owner_step="vf0",
        attachment_id="att-1",
        boot_id="boot",
        root_provenance="claim-1.vf0",
        description_json=json.dumps(description),
    )
    return {"vf0": {"interface": (handle,)}}


ONE = lab(4026531840, "/run/netns/pod-a", "1a:d3:ab:45:10:9c")
OTHER = lab(4026532001, "/run/netns/dranp-lab-x/pod-a", "56:81:c7:f3:08:6b")


def test_namespaces_and_macs_of_the_lab_are_neutral() -> None:
    mine = interface(ONE, ONE["links"][0]["mac"])
    theirs = interface(OTHER, OTHER["links"][0]["mac"])
    assert mine != theirs
    assert lab_neutral(mine, ONE) == lab_neutral(theirs, OTHER)


def test_a_mac_the_kernel_chose_is_neutral_too() -> None:
    mine = interface(ONE, "02:00:00:00:00:01")
    theirs = interface(OTHER, "02:00:00:00:00:02")
    assert lab_neutral(mine, ONE) == lab_neutral(theirs, OTHER)


def test_anything_else_still_differs() -> None:
    mine = interface(ONE, ONE["links"][0]["mac"], mtu=1500)
    theirs = interface(OTHER, OTHER["links"][0]["mac"], mtu=9000)
    assert lab_neutral(mine, ONE) != lab_neutral(theirs, OTHER)
    # A MAC of one of the lab's links is not a MAC the kernel chose.
    chosen = interface(OTHER, "02:00:00:00:00:02")
    assert lab_neutral(interface(ONE, ONE["links"][0]["mac"]), ONE) != lab_neutral(chosen, OTHER)
