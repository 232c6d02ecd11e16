"""``set_link_options`` on real Linux and on the model, step for step: the same calls
on a fresh namespace of each, with the same outcome (the link's options, or the errno).
The netns tier here has macvlan; bond and ipvlan run where their modules are (the VM
lab's kernels) and skip with one line elsewhere."""

from __future__ import annotations

import errno
from collections.abc import Callable

import pytest

from fakekernel import FakeKernelModel
from plugins.kernel import Kernel, KernelError, Link, LinkKind, LinkOptions, LinkSpec, NsRef
from plugins.kernel.linux import LinuxKernel

from .conftest import MakeNamespace

Step = tuple[str, LinkOptions]


def outcome(kernel: Kernel, ns: NsRef, name: str, options: LinkOptions) -> object:
    """What a step answers: the options the link shows afterwards, or the errno."""
    link = kernel.get_link(ns, name=name)
    assert link is not None
    try:
        after = kernel.set_link_options(ns, link.ifindex, options)
    except KernelError as exc:
        return errno.errorcode[exc.code]
    return _options(after)


def _options(link: Link) -> object:
    bond = link.bond
    return (link.kind, link.mode) if bond is None else (bond.mode, bond.miimon_ms)


def run_on_both(
    kernel: LinuxKernel,
    make_ns: MakeNamespace,
    scene: Callable[[Kernel, NsRef], None],
    steps: list[Step],
) -> None:
    model = FakeKernelModel()
    real_ns = kernel.open_namespace(make_ns())
    model_ns = model.add_namespace("scene")
    scene(kernel, real_ns)
    scene(model, model_ns)
    for name, options in steps:
        real = outcome(kernel, real_ns, name, options)
        modelled = outcome(model, model_ns, name, options)
        assert modelled == real, f"{name} {options}: Linux {real}, the model {modelled}"


def _stack(kind: LinkKind, mode: str) -> Callable[[Kernel, NsRef], None]:
    def scene(k: Kernel, ns: NsRef) -> None:
        lower = k.create_link(ns, LinkSpec(kind="veth", name="low0", peer_name="low1"))
        k.create_link(ns, LinkSpec(kind=kind, name="up0", parent=lower.ifindex, mode=mode))

    return scene


def test_a_macvlans_mode_changes_but_never_to_or_from_passthru(
    kernel: LinuxKernel, make_ns: MakeNamespace
) -> None:
    macvlan = LinkOptions(kind="macvlan")
    run_on_both(
        kernel,
        make_ns,
        _stack("macvlan", "bridge"),
        [
            ("up0", LinkOptions(kind="macvlan", mode="private")),
            ("up0", LinkOptions(kind="macvlan", mode="vepa")),
            ("up0", LinkOptions(kind="macvlan", mode="passthru")),
            ("up0", LinkOptions(kind="macvlan", mode="no-such-mode")),
            ("up0", macvlan),  # nothing to change
            ("low0", LinkOptions(kind="macvlan", mode="private")),  # a veth: EOPNOTSUPP
            ("low0", macvlan),  # no options: no change, whatever the kind
            ("up0", LinkOptions(kind="macvlan", bond_mode="active-backup")),  # EINVAL
        ],
    )


def test_an_ipvlans_mode_is_its_ports(
    kernel: LinuxKernel, make_ns: MakeNamespace, require_kind: Callable[[LinkKind], None]
) -> None:
    require_kind("ipvlan")
    run_on_both(
        kernel,
        make_ns,
        _stack("ipvlan", "l2"),
        [
            ("up0", LinkOptions(kind="ipvlan", mode="l3")),
            ("up0", LinkOptions(kind="ipvlan", mode="l3s")),
            ("up0", LinkOptions(kind="ipvlan", mode="l4")),
            ("up0", LinkOptions(kind="macvlan", mode="l2")),
        ],
    )


def test_a_bonds_mode_changes_only_down_and_empty(
    kernel: LinuxKernel, make_ns: MakeNamespace, require_kind: Callable[[LinkKind], None]
) -> None:
    require_kind("bond")

    def scene(k: Kernel, ns: NsRef) -> None:
        k.create_link(ns, LinkSpec(kind="bond", name="bond0"))
        k.create_link(ns, LinkSpec(kind="veth", name="s0", peer_name="s0p"))

    run_on_both(
        kernel,
        make_ns,
        scene,
        [
            ("bond0", LinkOptions(kind="bond", bond_mode="active-backup", miimon_ms=100)),
            ("bond0", LinkOptions(kind="bond", miimon_ms=50)),
            ("bond0", LinkOptions(kind="bond", bond_mode="no-such-mode")),
            ("bond0", LinkOptions(kind="bond", active_slave=0)),
            ("s0", LinkOptions(kind="bond", miimon_ms=10)),
        ],
    )


@pytest.mark.parametrize("kind", ["bond", "macvlan", "ipvlan"])
def test_an_option_of_another_kind_is_refused_before_it_is_sent(kind: LinkKind) -> None:
    model = FakeKernelModel()
    ns = model.add_namespace("scene")
    link = model.create_link(ns, LinkSpec(kind="veth", name="v0", peer_name="v1"))
    foreign = {"bond": {"mode": "l2"}}.get(kind, {"miimon_ms": 5})
    with pytest.raises(KernelError) as refused:
        model.set_link_options(ns, link.ifindex, LinkOptions(kind=kind, **foreign))
    assert refused.value.code == errno.EINVAL
