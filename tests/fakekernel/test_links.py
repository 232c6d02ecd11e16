"""Names, ifindexes, veth pairs, aliases, renames, addresses and do_setlink's order."""

from __future__ import annotations

import errno

import pytest

from fakekernel import FakeKernelModel
from plugins.kernel import LinkChanges, NsRef, VFChanges

from .helpers import hardware, kernel_error, link, mk


def test_names_are_unique_per_namespace(m: FakeKernelModel, host: NsRef, pod: NsRef) -> None:
    mk(m, host, "dummy", "d0")
    with kernel_error(errno.EEXIST):
        mk(m, host, "dummy", "d0")
    assert mk(m, pod, "dummy", "d0").ns == pod


# (no name at all is not invalid: the kernel names it <kind>%d)
@pytest.mark.parametrize("name", [".", "..", "a/b", "a:b", "a b", "a\tb", "a\nb"])
def test_invalid_names_are_einval(m: FakeKernelModel, host: NsRef, name: str) -> None:
    with kernel_error(errno.EINVAL):
        mk(m, host, "dummy", name)


def test_names_longer_than_15_bytes_fail_netlink_policy(m: FakeKernelModel, host: NsRef) -> None:
    assert mk(m, host, "dummy", "a" * 15).name == "a" * 15
    with kernel_error(errno.ERANGE):
        mk(m, host, "dummy", "b" * 16)
    with kernel_error(errno.ERANGE):  # bytes count, not characters
        mk(m, host, "dummy", "é" * 8)


def test_name_patterns_take_the_smallest_free_number(m: FakeKernelModel, host: NsRef) -> None:
    """Templates and no name at creation, a rename to a template (its own name counts as
    taken), an empty rename that renames nothing; a veth's peer is named first."""
    assert mk(m, host, "dummy", "dum%d").name == "dum0"
    assert mk(m, host, "dummy", "").name == "dummy0"
    with kernel_error(errno.EINVAL):
        mk(m, host, "dummy", "dum%d%d")
    d = mk(m, host, "dummy", "d")
    e = mk(m, host, "dummy", "e")
    assert m.set_link(host, d.ifindex, LinkChanges(name="dum%d")).name == "dum1"
    assert m.set_link(host, d.ifindex, LinkChanges(name="dum%d")).name == "dum2"
    assert m.set_link(host, e.ifindex, LinkChanges(name="")).name == "e"
    with kernel_error(errno.EINVAL):
        m.set_link(host, e.ifindex, LinkChanges(name="dum%s"))
    v = mk(m, host, "veth", "")
    assert (v.name, m.get_link(host, ifindex=v.peer or 0)) == ("veth1", link(m, host, "veth0"))


def test_ifindexes_grow_and_are_never_reused(m: FakeKernelModel, host: NsRef) -> None:
    first = mk(m, host, "dummy", "d0")
    m.delete_link(host, first.ifindex)
    second = mk(m, host, "dummy", "d0")
    assert second.ifindex > first.ifindex


def test_absent_links_are_none_and_unknown_ifindexes_enodev(
    m: FakeKernelModel, host: NsRef
) -> None:
    assert m.get_link(host, name="nope") is None
    assert m.get_link(host, ifindex=999) is None
    for call in (
        lambda: m.set_link(host, 999, LinkChanges(up=True)),
        lambda: m.delete_link(host, 999),
        lambda: m.move_link(host, 999, host),
        lambda: m.get_vfs(host, 999),
        lambda: m.set_vf(host, 999, 0, VFChanges(trust=True)),
    ):
        with kernel_error(errno.ENODEV):
            call()
    with kernel_error(errno.EINVAL):
        m.get_link(host, name="eth9", ifindex=2)


def test_ifindexes_are_per_namespace(m: FakeKernelModel, host: NsRef, pod: NsRef) -> None:
    first = mk(m, pod, "dummy", "d0")
    assert first.ifindex == 2  # each namespace counts from 2; 1 is its loopback
    assert link(m, host, "enp3s0f0").ifindex == 2  # the same number names another link
    assert m.get_link(pod, ifindex=2) == first
    v0 = link(m, host, "enp3s0f0v0")
    assert m.move_link(host, v0.ifindex, pod).ifindex == v0.ifindex  # free there: kept


def test_a_moved_link_whose_ifindex_is_taken_gets_a_new_one(
    m: FakeKernelModel, host: NsRef, pod: NsRef
) -> None:
    d = mk(m, pod, "dummy", "d0")
    pf = link(m, host, "enp3s0f0")
    assert d.ifindex == pf.ifindex
    moved = m.move_link(pod, d.ifindex, host)
    assert moved.ifindex not in (pf.ifindex, 1)
    assert link(m, host, "enp3s0f0") == pf
    assert link(m, host, "d0") == moved


def test_unknown_kind_and_devices_cannot_be_created(m: FakeKernelModel, host: NsRef) -> None:
    with kernel_error(errno.EOPNOTSUPP):
        mk(m, host, "device", "eth5")
    with kernel_error(errno.EOPNOTSUPP):
        mk(m, host, "wireguard", "wg0")


def test_veth_peer_lives_where_asked_and_dies_with_either_end(
    m: FakeKernelModel, host: NsRef, pod: NsRef
) -> None:
    a = mk(m, host, "veth", "a", peer_name="b", peer_ns=pod)
    b = link(m, pod, "b")
    assert (a.peer, b.peer) == (b.ifindex, a.ifindex)
    m.delete_link(pod, b.ifindex)
    assert m.get_link(host, name="a") is None
    c = mk(m, host, "veth", "c")
    assert link(m, host, "veth0").peer == c.ifindex  # unnamed peer: veth%d
    m.delete_link(host, c.ifindex)
    assert m.get_link(host, name="veth0") is None


def test_veth_peer_name_clash_creates_nothing(m: FakeKernelModel, host: NsRef) -> None:
    mk(m, host, "dummy", "b")
    before = m.snapshot()
    with kernel_error(errno.EEXIST):
        mk(m, host, "veth", "a", peer_name="b")
    assert m.snapshot() == before


def test_alias_up_to_255_bytes_and_empty_clears(m: FakeKernelModel, host: NsRef) -> None:
    d = mk(m, host, "dummy", "d0", alias="ours")
    assert d.alias == "ours"
    assert m.set_link(host, d.ifindex, LinkChanges(alias="x" * 255)).alias == "x" * 255
    with kernel_error(errno.ERANGE):  # IFLA_IFALIAS policy .len = IFALIASZ - 1
        m.set_link(host, d.ifindex, LinkChanges(alias="x" * 256))
    assert m.set_link(host, d.ifindex, LinkChanges(alias="")).alias is None


def test_renaming_an_up_link_is_ebusy_on_older_kernels(m: FakeKernelModel, host: NsRef) -> None:
    d = mk(m, host, "dummy", "d0")
    m.set_link(host, d.ifindex, LinkChanges(up=True))
    with kernel_error(errno.EBUSY):
        m.set_link(host, d.ifindex, LinkChanges(name="d1"))
    m.set_link(host, d.ifindex, LinkChanges(up=False))
    assert m.set_link(host, d.ifindex, LinkChanges(name="d1")).name == "d1"


def test_renaming_an_up_link_works_with_live_rename() -> None:
    m = FakeKernelModel(live_rename=True)
    host = m.host_namespace()
    d = mk(m, host, "dummy", "d0")
    m.set_link(host, d.ifindex, LinkChanges(up=True))
    assert m.set_link(host, d.ifindex, LinkChanges(name="d1")).name == "d1"


def test_rename_onto_an_existing_name_is_eexist(m: FakeKernelModel, host: NsRef) -> None:
    d = mk(m, host, "dummy", "d0")
    mk(m, host, "dummy", "d1")
    with kernel_error(errno.EEXIST):
        m.set_link(host, d.ifindex, LinkChanges(name="d1"))


def test_setlink_applies_in_kernel_order_and_keeps_what_it_did(
    m: FakeKernelModel, host: NsRef
) -> None:
    d = mk(m, host, "dummy", "d0")
    mk(m, host, "dummy", "taken")
    with kernel_error(errno.EEXIST):  # address, mtu, then name fails
        m.set_link(host, d.ifindex, LinkChanges(mtu=9000, mac="02:aa:00:00:00:01", name="taken"))
    after = link(m, host, "d0")
    assert (after.mtu, after.mac) == (9000, "02:aa:00:00:00:01")


@pytest.mark.parametrize(
    ("mac", "code"),
    [("01:00:5e:00:00:01", errno.EADDRNOTAVAIL), ("00:00:00:00:00:00", errno.EADDRNOTAVAIL)],
)
def test_link_address_must_be_unicast(m: FakeKernelModel, host: NsRef, mac: str, code: int) -> None:
    d = mk(m, host, "dummy", "d0")
    with kernel_error(code):
        m.set_link(host, d.ifindex, LinkChanges(mac=mac))
    with kernel_error(code):
        mk(m, host, "dummy", "d1", mac=mac)
    with kernel_error(errno.EINVAL):
        m.set_link(host, d.ifindex, LinkChanges(mac="not-a-mac"))


def test_the_model_is_deterministic() -> None:
    def build() -> FakeKernelModel:
        model = FakeKernelModel()
        hardware(model)
        host, pod = model.host_namespace(), model.add_namespace("pod")
        mk(model, host, "veth", "a", peer_name="b", peer_ns=pod)
        mk(model, pod, "bond", "bond0")
        return model

    assert build().snapshot() == build().snapshot()
