"""The runner enforces grants: an effect may consume a request input only if granted.

A plugin that forgets to ask for a grant cannot make its effects act on an input: the
runner refuses the plan (InvalidArgument naming the effect, its kind and the handle)
before anything is journaled or touches the kernel.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from plugins.sdk import (
    BundleStore,
    ConnectCall,
    Endpoint,
    Grant,
    InvalidArgument,
    Plan,
    Registry,
    ResourceHandle,
    effect,
    new_plan,
)
from plugins.sdk.runner import Runner

from . import node as n
from .toy import CONTRACTS, CREATE, SETTING, ToyKernel, ToyPlugin, toy_effects

PARENT = ResourceHandle(
    "rh-parent-0123456789abcdef", "KernelInterface/v1", "att-0", "s", "att-0", "boot-1", "r", "{}"
)


class ConsumesItsInput(ToyPlugin):
    """Names its input handle in an effect's payload, and never asks for a grant itself."""

    def connect_network(self, call: ConnectCall) -> Plan:
        (parent,) = call.inputs["parent"]
        plan = new_plan()
        obj = plan.add(
            "create-object",
            effect(CREATE, {"name": "child", "value": {"parent": parent.id}}, outputs=["object"]),
        )
        plan.export("interface", obj.output("object"))
        return plan.build()


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[tuple[Runner, ToyKernel]]:
    registry = Registry(BundleStore(CONTRACTS))
    registry.register(Endpoint("toy.sock", "toy/v1alpha1", ConsumesItsInput()))
    toy = ToyKernel(tmp_path / "toy.json")
    runner = Runner.open(
        tmp_path / "state",
        registry,
        toy_effects(toy),
        artifact_digest="sha256:grants",
        boot_id="boot-1",
    )
    runner.recover()
    yield runner, toy
    runner.close()


def operations(runner: Runner) -> int:
    assert runner.store is not None
    return len(runner.store.read(lambda r: r.operations("toy/v1alpha1")))


@pytest.mark.parametrize(
    "grants",
    [(), (Grant(SETTING, PARENT.id),)],
    ids=["no-grant", "grant-for-another-kind"],
)
def test_an_ungranted_consumed_input_is_refused_before_anything_is_journaled(
    runner: tuple[Runner, ToyKernel], grants: tuple[Grant, ...]
) -> None:
    r, toy = runner
    request = n.connect(inputs={"parent": (PARENT,)}, grants=grants)
    with pytest.raises(InvalidArgument) as info:
        r.endpoint("toy.sock").connect_network(request)
    for named in ("create-object", CREATE, PARENT.id):
        assert named in str(info.value)
    assert info.value.details == {"effect": "create-object", "kind": CREATE, "handle": PARENT.id}
    assert operations(r) == 0
    assert toy.mutations() == {}
    assert toy.observable() == {"objects": {}, "settings": {}}


def test_a_granted_consumed_input_is_accepted(runner: tuple[Runner, ToyKernel]) -> None:
    r, toy = runner
    request = n.connect(inputs={"parent": (PARENT,)}, grants=(Grant(CREATE, PARENT.id),))
    response = r.endpoint("toy.sock").connect_network(request)
    assert response.outputs["interface"][0].attachment_id == "att-1"
    assert operations(r) == 1
    assert toy.mutations() == {"create:object:child": 1}
