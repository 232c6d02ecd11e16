"""What issue 30 added to the Kernel protocol, on real Linux and on the model step for
step: a link created at an ifindex of the caller's choosing (``LinkSpec.ifindex``), a
bond's ``fail_over_mac`` and an ipvlan's flag (created with, changed by
``set_link_options``, reported). The netns tier here has veth and macvlan; bond and
ipvlan skip with one line where their modules are missing (the VM lab's differential
corpus runs them on Debian's kernels)."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable

import pytest

from fakekernel import FakeKernelModel
from plugins.kernel import (
    BondInfo,
    Kernel,
    KernelError,
    LinkChanges,
    LinkKind,
    LinkOptions,
    LinkSpec,
    NsRef,
)
from plugins.kernel.linux import LinuxKernel

from .conftest import MakeNamespace

Step = Callable[[Kernel, NsRef, NsRef], object]


def attempt(step: Step, kernel: Kernel, a: NsRef, b: NsRef) -> object:
    try:
        return step(kernel, a, b)
    except KernelError as exc:
        return errno.errorcode[exc.code]


def on_both(kernel: LinuxKernel, make_ns: MakeNamespace, steps: list[Step]) -> list[object]:
    """Each step on two fresh namespaces of Linux and of the model; the same outcomes."""
    model = FakeKernelModel()
    real = (kernel.open_namespace(make_ns()), kernel.open_namespace(make_ns()))
    modelled = (model.add_namespace("a"), model.add_namespace("b"))
    outcomes = []
    for i, step in enumerate(steps):
        on_linux = attempt(step, kernel, *real)
        on_model = attempt(step, model, *modelled)
        assert on_model == on_linux, f"step {i}: Linux {on_linux}, the model {on_model}"
        outcomes.append(on_linux)
    return outcomes


def create(kind: LinkKind, name: str, **fields: object) -> Step:
    def step(k: Kernel, a: NsRef, b: NsRef) -> object:
        spec = dict(fields)  # each backend gets its own copy to take names out of
        where = {"a": a, "b": b}
        ns = where[str(spec.pop("ns", "a"))]
        if "parent_name" in spec:
            parent_ns = where[str(spec.pop("parent_in", "a"))]
            parent = k.get_link(parent_ns, name=str(spec.pop("parent_name")))
            assert parent is not None
            spec.update(parent=parent.ifindex, parent_ns=None if parent_ns == ns else parent_ns)
        link = k.create_link(ns, LinkSpec(kind=kind, name=name, **spec))  # type: ignore[arg-type]
        # an index the kernel chose is left out: the model numbers a veth's ends in
        # another order (Linux registers the peer first)
        return (link.name, link.ifindex if "ifindex" in spec else "auto")

    return step


def test_a_link_is_created_at_the_ifindex_asked_for(
    kernel: LinuxKernel, make_ns: MakeNamespace
) -> None:
    outcomes = on_both(
        kernel,
        make_ns,
        [
            create("veth", "v0", peer_name="v1", ifindex=4000),
            create("veth", "v2", peer_name="v3", ifindex=4000),  # taken here: EEXIST
            create("veth", "v4", peer_name="v5", ifindex=0),  # not positive: EINVAL
            create("veth", "v6", peer_name="v7", ifindex=-3),
            create("veth", "v8", peer_name="v9"),  # the next free index: unchanged by 4000
            create("veth", "lb0", peer_name="lb1", ns="b", ifindex=4000),  # b's own index
            # a macvlan sent in a (its parent's namespace) at 4000, which a has: EEXIST
            create("macvlan", "m0", ns="b", parent_name="v1", ifindex=4000),
            create("macvlan", "m1", ns="b", parent_name="v1", ifindex=4001),
        ],
    )
    assert outcomes[0] == ("v0", 4000)
    assert outcomes[1:4] == ["EEXIST", "EINVAL", "EINVAL"]


def test_a_cross_namespace_child_at_an_index_only_its_target_has(
    kernel: LinuxKernel, make_ns: MakeNamespace
) -> None:
    """6.1 and 6.12 (the VM lab's, and the model) find the index taken only when they
    register the child in its target: EBUSY. Linux 6.14 and later look it up in the
    target first: EEXIST. The model follows the lab's kernels; this says which one the
    host runs, and fails on anything else."""
    scene = [
        create("veth", "p0", peer_name="p1"),
        create("veth", "t0", peer_name="t1", ns="b", ifindex=5000),
    ]
    on_both(kernel, make_ns, scene)
    model = FakeKernelModel()
    real = (kernel.open_namespace(make_ns()), kernel.open_namespace(make_ns()))
    modelled = (model.add_namespace("a"), model.add_namespace("b"))
    child = create("macvlan", "m0", ns="b", parent_name="p0", ifindex=5000)
    for step in scene:
        attempt(step, kernel, *real)
        attempt(step, model, *modelled)
    release = tuple(int(p) for p in re.findall(r"\d+", os.uname().release)[:2])
    expected = "EEXIST" if release >= (6, 14) else "EBUSY"
    assert attempt(child, kernel, *real) == expected, os.uname().release
    assert attempt(child, model, *modelled) == "EBUSY"


def _options(k: Kernel, ns: NsRef, name: str, options: LinkOptions) -> object:
    link = k.get_link(ns, name=name)
    assert link is not None
    after = k.set_link_options(ns, link.ifindex, options)
    return (after.bond.fail_over_mac if after.bond else None, after.ipvlan_flag, after.mode)


def test_a_bonds_fail_over_mac_is_set_reported_and_changed_only_while_empty(
    kernel: LinuxKernel, make_ns: MakeNamespace, require_kind: Callable[[LinkKind], None]
) -> None:
    require_kind("bond")
    ab = BondInfo("active-backup", 100, fail_over_mac="active")
    on_both(
        kernel,
        make_ns,
        [
            create("bond", "bond0", bond=ab),
            create("bond", "bond1", bond=BondInfo("active-backup", 100, fail_over_mac="no")),
            lambda k, a, b: _options(k, a, "bond0", LinkOptions("bond", fail_over_mac="follow")),
            lambda k, a, b: _options(k, a, "bond0", LinkOptions("bond", fail_over_mac="x")),
            create("veth", "s0", peer_name="s0p"),
            lambda k, a, b: (
                k.set_link(a, _index(k, a, "s0"), _master(k, a, "bond0")).mac == _mac(k, a, "s0p")
            ),
            lambda k, a, b: _options(k, a, "bond0", LinkOptions("bond", fail_over_mac="none")),
        ],
    )


def test_an_ipvlans_flag_is_its_ports(
    kernel: LinuxKernel, make_ns: MakeNamespace, require_kind: Callable[[LinkKind], None]
) -> None:
    require_kind("ipvlan")
    on_both(
        kernel,
        make_ns,
        [
            create("veth", "low0", peer_name="low1"),
            create("ipvlan", "i0", parent_name="low0", mode="l2", ipvlan_flag="private"),
            create("ipvlan", "i1", parent_name="low0", mode="l2", ipvlan_flag="vepa"),
            lambda k, a, b: k.get_link(a, name="i0").ipvlan_flag,  # type: ignore[union-attr]
            lambda k, a, b: _options(k, a, "i0", LinkOptions("ipvlan", ipvlan_flag="bridge")),
            lambda k, a, b: _options(k, a, "i0", LinkOptions("ipvlan", ipvlan_flag="both")),
            create("ipvlan", "i2", parent_name="low0", ipvlan_flag="nope"),
        ],
    )


def _index(k: Kernel, ns: NsRef, name: str) -> int:
    link = k.get_link(ns, name=name)
    assert link is not None
    return link.ifindex


def _mac(k: Kernel, ns: NsRef, name: str) -> str:
    link = k.get_link(ns, name=name)
    assert link is not None
    return link.mac


def _master(k: Kernel, ns: NsRef, name: str) -> LinkChanges:
    return LinkChanges(master=_index(k, ns, name))


@pytest.mark.parametrize("value", [{"fail_over_mac": "active"}, {"ipvlan_flag": "private"}])
def test_an_option_of_another_kind_is_einval(value: dict[str, str]) -> None:
    model = FakeKernelModel()
    ns = model.add_namespace("scene")
    link = model.create_link(ns, LinkSpec(kind="veth", name="v0", peer_name="v1"))
    with pytest.raises(KernelError) as refused:
        model.set_link_options(ns, link.ifindex, LinkOptions(kind="macvlan", **value))  # type: ignore[arg-type]
    assert refused.value.code == errno.EINVAL
