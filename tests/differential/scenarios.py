"""The differential corpus: scenarios run unchanged on the fake kernel and on real Linux.

Each scenario declares the link kinds it creates (``veth``, ``macvlan`` and
``bridge`` exist on every kernel we run on; ``bond``, ``vlan``, ``ipvlan`` and
``dummy`` need modules some hosts lack). Scenarios look links up by name
(``world.ifindex``), never by an ifindex a backend returned, so one backend
failing a call shows up as a different log, not as a crash.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from plugins.kernel import BondInfo, LinkKind, LinkOptions, LinkSpec, NsRef

from .world import MISSING_IFINDEX, World

Run = Callable[[World], None]


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Run
    kinds: frozenset[LinkKind]

    def __str__(self) -> str:
        return self.name


SCENARIOS: list[Scenario] = []


def scenario(*kinds: LinkKind) -> Callable[[Run], Run]:
    def register(fn: Run) -> Run:
        SCENARIOS.append(Scenario(fn.__name__, fn, frozenset(kinds)))
        return fn

    return register


def veth(name: str, peer: str | None = None, peer_ns: NsRef | None = None, **kw: Any) -> LinkSpec:
    return LinkSpec(kind="veth", name=name, peer_name=peer, peer_ns=peer_ns, **kw)


def macvlan(
    w: World, ns: NsRef, name: str, parent: str, parent_ns: NsRef | None = None, **kw: Any
) -> None:
    """A macvlan in ``ns`` on the link named ``parent`` (in ``parent_ns``, default ``ns``)."""
    index = w.ifindex(parent_ns or ns, parent)
    spec = LinkSpec(kind="macvlan", name=name, parent=index, parent_ns=parent_ns, **kw)
    w.create(ns, spec)


def stacked(
    w: World,
    kind: LinkKind,
    ns: NsRef,
    name: str,
    parent: str,
    parent_ns: NsRef | None = None,
    **kw: Any,
) -> None:
    index = w.ifindex(parent_ns or ns, parent)
    spec = LinkSpec(kind=kind, name=name, parent=index, parent_ns=parent_ns, **kw)
    w.create(ns, spec)


# -- veth ------------------------------------------------------------------------------


@scenario("veth")
def veth_pair_in_one_namespace(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("va", "vb"))
    w.create(a, veth("vc"))  # no peer name: the kernel names it veth%d
    w.attempt(lambda: w.kernel.get_link(a, name="vb"), "get a:vb")
    w.attempt(lambda: w.kernel.list_links(a), "list a")


@scenario("veth")
def veth_peer_in_another_namespace(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("va", "vb", peer_ns=b))
    w.create(w.host, veth("h0", "p0", peer_ns=a))
    # the same names on both sides of a namespace boundary do not clash
    w.create(b, veth("va", "vb", peer_ns=a))


@scenario("veth")
def veth_mtu_applies_to_the_first_end_only(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("va", "vb", mtu=9000))
    w.create(a, veth("wa", "wb", peer_ns=b, mtu=1280))
    w.set(b, "wb", mtu=1280)


@scenario("veth")
def veth_deleting_one_end_deletes_both(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("va", "vb", peer_ns=b))
    w.create(a, veth("wa", "wb"))
    w.delete(b, "vb")
    w.delete(a, "wa")
    w.delete(a, "va")  # already gone with its peer


@scenario("veth")
def veth_up_down_and_mac(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("va", "vb"))
    w.set(a, "va", up=True)
    w.set(a, "va", up=True)  # no change
    w.set(a, "va", mac="02:11:22:33:44:55")  # a veth takes a new address while up
    w.set(a, "vb", mac="02:11:22:33:44:55")  # the same address on another link is fine
    w.set(a, "vb", mac="01:00:5e:00:00:01")  # multicast
    w.set(a, "vb", mac="00:00:00:00:00:00")
    w.set(a, "vb", up=True)
    w.set(a, "va", up=False)
    w.create(a, veth("vc", "vd", mac="02:00:00:00:00:0c"))
    w.create(a, veth("ve", "vf", mac="03:00:00:00:00:0e"))


# -- names -----------------------------------------------------------------------------


@scenario("veth")
def rename_down_link(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("va", "vb"))
    w.set(a, "va", name="eth0")
    w.set(a, "eth0", name="eth0")  # same name: nothing to do
    w.set(a, "eth0", name="vb")  # taken
    w.set(a, "vb", name="np%d")  # a pattern: the kernel picks np0
    w.set(a, "eth0", name="np%d")  # np0 is taken: np1


@scenario("veth")
def rename_up_link(w: World) -> None:
    """EBUSY before Linux 6.2; since then allowed (the fake world matches the kernel)."""
    a = w.ns("a")
    w.create(a, veth("va", "vb"))
    w.set(a, "va", up=True)
    w.set(a, "va", name="eth0")
    w.set(a, "va", name="va")  # under whichever name it has now
    w.set(a, "eth0", name="eth0")
    w.set(a, "vb", up=True, name="eth1")  # rename runs before the flags in one message


@scenario("veth")
def bad_names(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("a" * 16, "ok0"))  # 16 bytes: ERANGE
    w.create(a, veth("a" * 15, "b" * 15))  # 15 bytes is the limit
    w.create(a, veth("\u00fc" * 8, "ok1"))  # 8 characters, 16 bytes
    w.create(a, veth("ok2", "c" * 16))  # the peer's name too
    w.create(a, veth("bad/name", "ok3"))
    w.create(a, veth("bad name", "ok4"))
    w.create(a, veth("bad:name", "ok5"))
    w.create(a, veth(".", "ok6"))
    w.create(a, veth("..", "ok7"))
    w.create(a, veth("ok8", "bad/peer"))
    w.create(a, veth("", "ok9"))  # an empty name
    w.create(a, veth("va", "vb"))
    w.set(a, "va", name="x" * 16)
    w.set(a, "va", name="x/y")
    w.set(a, "va", name="..")
    w.set(a, "va", name="va\tx")


@scenario("veth")
def duplicate_names(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("va", "vb"))
    w.create(a, veth("va", "vx"))  # the link's name is taken
    w.create(a, veth("vy", "vb"))  # the peer's name is taken: nothing is created
    w.create(a, veth("vz", "vz"))  # both ends want one name
    w.create(b, veth("vq", "va", peer_ns=a))  # taken in the peer's namespace
    w.create(b, veth("va", "vb"))  # free in b
    w.set(b, "va", name="vb")


# -- MTU -------------------------------------------------------------------------------


@scenario("veth")
def mtu_bounds(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("lo0", "lo1", mtu=67))  # below ETH_MIN_MTU
    w.create(a, veth("hi0", "hi1", mtu=65536))  # above ETH_MAX_MTU
    w.create(a, veth("va", "vb", mtu=68))
    w.set(a, "va", mtu=65535)
    w.set(a, "va", mtu=65536)
    w.set(a, "va", mtu=67)
    w.set(a, "va", mtu=0)
    w.set(a, "va", mtu=-1)
    w.set(a, "vb", mtu=9000)
    w.set(a, "vb", mtu=9000)


# -- moving between namespaces ---------------------------------------------------------


@scenario("veth")
def move_to_another_namespace(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("va", "vb"))
    w.set(a, "va", up=True, alias="moving", mtu=1400)
    w.move(a, "va", b)  # it arrives down, keeps MTU and alias
    w.move(b, "va", a, new_name="back")
    w.move(a, "back", a, new_name="same")  # the same namespace: only a rename
    w.move(a, "same", w.host)


@scenario("veth")
def move_onto_a_taken_name(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("va", "vb"))
    w.create(b, veth("va", "vx"))
    w.move(a, "va", b)  # EEXIST: no new name
    w.move(a, "va", b, new_name="vx")  # both the old and the new name are taken
    w.move(a, "va", b, new_name="vy")  # the new name is free
    w.move(a, "vb", b, new_name="vx")  # old name free: moved, then the rename fails
    w.move(a, "vz", b)  # no such link
    w.move(b, "vy", a, new_name="q" * 16)  # a bad name is refused before the move


@scenario("veth")
def move_with_an_alias(w: World) -> None:
    """IFLA_IFALIAS in the move's RTM_SETLINK: applied after the move and the rename."""
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("va", "vb"))
    w.set(a, "va", up=True, alias="home")
    w.move(a, "va", b, new_name="eth0", alias="dranp:0123abcd:marker")  # down, renamed, ours
    w.checkpoint("moved in")
    w.move(b, "eth0", a, new_name="va", alias="")  # home, "" clears the alias
    w.move(a, "vb", b, alias="only an alias")  # no rename
    w.move(b, "vb", b, new_name="vb2", alias="")  # the same namespace: rename and alias
    w.move(a, "va", b, new_name="eth1", alias="a" * 256)  # ERANGE: nothing moves
    w.create(a, veth("vx", "vy"))
    w.move(b, "vb2", a, new_name="vx", alias="never")  # moved, the rename fails: no alias


# -- macvlan ---------------------------------------------------------------------------


@scenario("veth", "macvlan")
def macvlan_on_a_veth_in_the_same_namespace(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp", mtu=9000))
    macvlan(w, a, "mv0", "pv")  # default mode (vepa), inherits the parent's MTU
    macvlan(w, a, "mv1", "pv", mode="bridge", mtu=1500)
    macvlan(w, a, "mv2", "mv0", mode="private")  # on a macvlan: stacked on its lower
    macvlan(w, a, "mv3", "nosuch")
    w.create(a, LinkSpec(kind="macvlan", name="mv4"))  # no parent


@scenario("veth", "macvlan")
def macvlan_created_directly_in_another_namespace(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("pv", "pp"))
    macvlan(w, b, "mvb", "pv", parent_ns=a, mode="bridge")
    macvlan(w, w.host, "mvh", "pv", parent_ns=a)
    macvlan(w, b, "mvx", "pv", parent_ns=a, mtu=9000)  # above the parent's
    w.set(b, "mvb", up=True)
    w.move(b, "mvb", w.host, new_name="mvb2")  # the parent stays in a


@scenario("veth", "macvlan")
def macvlan_mtu_bounded_by_its_parent(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp"))
    macvlan(w, a, "big", "pv", mtu=1501)  # EINVAL at create
    macvlan(w, a, "mv", "pv", mtu=1400)
    w.set(a, "mv", mtu=1600)  # EINVAL at set
    w.set(a, "pv", mtu=9000)
    w.set(a, "mv", mtu=9000)
    w.set(a, "pv", mtu=2000)  # the child no longer fits: clamped
    w.set(a, "mv", mtu=67)


@scenario("veth", "macvlan")
def macvlan_modes_on_one_parent(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp"))
    macvlan(w, a, "m1", "pv", mode="bridge")
    macvlan(w, a, "m2", "pv", mode="private")
    macvlan(w, a, "m3", "pv", mode="vepa")
    macvlan(w, a, "m4", "pv", mode="passthru")  # EINVAL: the parent has other macvlans
    macvlan(w, a, "m5", "pv", mode="nonsense")
    w.set(a, "m1", up=True)
    w.set(a, "m2", up=True)


@scenario("veth", "macvlan")
def macvlan_passthru_takes_the_parent_address(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp", mac="02:00:00:00:01:01"))
    macvlan(w, a, "pt", "pv", mode="passthru")
    macvlan(w, a, "pt2", "pv", mode="passthru")  # only one passthru
    macvlan(w, a, "m1", "pv", mode="bridge")
    w.checkpoint("passthru made")
    w.set(a, "pt", mac="02:00:00:00:01:0f")  # a passthru macvlan sets its lower's address
    w.checkpoint("passthru address set")
    w.set(a, "pv", mac="02:00:00:00:01:0e")  # and follows the lower's
    w.checkpoint("lower address set")
    w.delete(a, "pt")  # the lower gets back the address it had when the port was made


@scenario("veth", "macvlan")
def macvlan_passthru_gives_the_address_back(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp", mac="02:00:00:00:01:01"))
    macvlan(w, a, "pt", "pv", mode="passthru")
    w.checkpoint("passthru made")
    w.set(a, "pt", mac="02:00:00:00:01:0f")
    w.checkpoint("passthru address set")
    w.delete(a, "pt")


@scenario("veth", "macvlan")
def deleting_the_parent_deletes_its_children(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("pv", "pp"))
    w.create(a, veth("qv", "qp"))
    macvlan(w, a, "m1", "pv")
    macvlan(w, b, "m2", "pv", parent_ns=a)  # in another namespace
    macvlan(w, w.host, "m3", "pv", parent_ns=a)
    macvlan(w, a, "n1", "qv")
    w.delete(a, "pv")  # pp, m1, m2 and m3 go with it
    w.delete(a, "n1")  # deleting a child leaves the parent


@scenario("veth", "macvlan")
def macvlan_addresses(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp", mac="02:00:00:00:01:01"))
    macvlan(w, a, "m1", "pv", mode="bridge", mac="02:00:00:00:01:02")
    macvlan(w, a, "m2", "pv", mode="bridge", mac="02:00:00:00:01:02")  # the same, both down
    w.set(a, "m1", up=True)
    w.set(a, "m2", up=True)  # EADDRINUSE: m1 has it, up
    w.set(a, "m2", mac="02:00:00:00:01:01")  # the parent's address
    w.set(a, "m2", mac="02:00:00:00:01:03")
    w.set(a, "m2", up=True)
    w.set(a, "m1", mac="02:00:00:00:01:03")  # in use by m2, up
    w.set(a, "m1", mac="02:00:00:00:01:04")


@scenario("veth", "macvlan")
def moving_a_macvlan_parent_keeps_its_children(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("pv", "pp"))
    w.set(a, "pv", up=True)
    macvlan(w, a, "mv", "pv")
    w.set(a, "mv", up=True)
    w.move(a, "pv", b)  # the lower moves (and goes down); its child stays, up
    w.checkpoint("parent moved")
    w.set(a, "mv", mtu=1400)
    w.delete(b, "pv")  # the child still dies with it


@scenario("veth", "macvlan")
def dead_namespace_refs(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("pv", "pp"))
    w.create(b, veth("qv", "qp"))
    w.kill_ns("b")
    w.create(a, veth("va", "vb", peer_ns=b))  # the peer's namespace is gone
    macvlan(w, b, "mv", "pv", parent_ns=a)
    w.move(a, "pv", b)
    w.set(b, "qv", up=True)
    w.attempt(lambda: w.kernel.get_link(b, name="qv"), "get b:qv")


@scenario("veth", "bridge")
def setlink_is_not_atomic(w: World) -> None:
    """do_setlink applies address, MTU, name, alias, master, flags in order; an error
    keeps what was already applied."""
    a = w.ns("a")
    w.create(a, veth("va", "vb"))
    w.create(a, LinkSpec(kind="bridge", name="br0"))
    w.set(a, "va", mtu=9000, name="vb")  # EEXIST at the rename: the MTU stays
    w.set(a, "va", alias="kept", mac="01:00:00:00:00:01")  # EADDRNOTAVAIL first: no alias
    w.set(a, "va", name="v1", alias="x" * 256)  # ERANGE: checked before anything is done
    w.set(a, "va", name="v2", up=True, master="br0")
    w.set(a, "v2", mtu=1400, master=MISSING_IFINDEX)  # EINVAL at the master: MTU kept
    w.set(a, "v2", up=False, master=0)


# -- namespace death -------------------------------------------------------------------


@scenario("veth")
def namespace_death_takes_both_veth_ends(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("va", "vb", peer_ns=b))
    w.create(w.host, veth("h0", "h1", peer_ns=b))
    w.create(a, veth("keep0", "keep1"))
    w.kill_ns("b")
    w.attempt(lambda: w.kernel.list_links(b), "list dead b")


@scenario("veth", "macvlan")
def namespace_death_takes_a_macvlan_child(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("pv", "pp"))
    macvlan(w, b, "mvb", "pv", parent_ns=a)
    macvlan(w, a, "mva", "pv")
    w.create(w.host, veth("hv", "hp"))
    macvlan(w, b, "mvh", "hv", parent_ns=w.host)
    w.kill_ns("b")  # the children die, their parents stay


@scenario("veth", "macvlan")
def namespace_death_of_the_parent_takes_children_elsewhere(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("pv", "pp"))
    macvlan(w, b, "mvb", "pv", parent_ns=a)
    w.create(b, veth("stay0", "stay1"))
    w.kill_ns("a")


@scenario("veth")
def open_namespace_estale_and_enoent(w: World) -> None:
    a = w.ns("a")
    w.ns("b")
    good = w.handle("a")
    wrong_inode = type(good)(good.path, good.device, good.inode + 1000, good.boot_id)
    other_boot = type(good)(good.path, good.device, good.inode, "f" * 8 + good.boot_id[8:])
    w.attempt(lambda: w.kernel.open_namespace(good), "open a")
    w.attempt(lambda: w.kernel.open_namespace(wrong_inode), "open a, wrong inode")
    w.attempt(lambda: w.kernel.open_namespace(other_boot), "open a, other boot")
    w.attempt(lambda: w.kernel.open_namespace(w.handle("b")), "open b")
    w.kill_ns("a")
    w.attempt(lambda: w.kernel.open_namespace(good), "open a after its death")
    w.attempt(lambda: w.kernel.list_links(a), "list a after its death")
    w.create(a, veth("va", "vb"))
    w.ns("a")  # a new namespace at the same path
    w.attempt(lambda: w.kernel.open_namespace(good), "open the old a")
    w.create(a, veth("va", "vb"))  # the old ref names what the path no longer does


@scenario("veth")
def list_namespaces_follows_namespace_life(w: World) -> None:
    w.attempt(w.kernel.list_namespaces, "list: the host alone")
    b = w.ns("b")
    a = w.ns("a")
    w.create(b, veth("vb", "va", peer_ns=a))
    listed = w.attempt(w.kernel.list_namespaces, "list: the host, then by name")
    for ref in listed[1] if listed[0] == "ok" else []:
        if not w.hidden(ref):  # each listed ref is usable as it is
            w.attempt(functools.partial(w.kernel.list_links, ref), f"links of {w.label_of(ref)}")
    w.kill_ns("a")
    w.attempt(w.kernel.list_namespaces, "list: a is gone")
    w.ns("a")  # a new namespace at the same path
    w.attempt(w.kernel.list_namespaces, "list: the new a")


# -- alias and unknown links -----------------------------------------------------------


@scenario("veth")
def alias_set_clear_and_too_long(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("va", "vb", alias="created with it"))
    w.set(a, "vb", alias="x" * 255)
    w.set(a, "va", alias="y" * 256)  # ERANGE
    w.set(a, "va", alias="")  # clears
    w.set(a, "va", alias="")
    w.set(a, "vb", alias="\u00e9" * 128)  # 256 bytes
    w.create(a, veth("vc", "vd", alias="z" * 256))  # nothing is left behind


@scenario("veth")
def unknown_ifindex(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("va", "vb"))
    w.attempt(lambda: w.kernel.delete_link(a, MISSING_IFINDEX), "delete unknown")
    w.set(a, "nosuch", up=True)
    w.set(a, "nosuch", name="x")
    w.move(a, "nosuch", w.host, new_name="x")
    w.attempt(lambda: w.kernel.get_link(a, ifindex=MISSING_IFINDEX), "get unknown ifindex")
    w.attempt(lambda: w.kernel.get_link(a, name="nosuch"), "get unknown name")


# -- bridge ----------------------------------------------------------------------------


@scenario("veth", "bridge")
def bridge_enslave_and_release_a_veth(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="bridge", name="br0"))
    w.create(a, veth("va", "vb", mac="02:00:00:00:00:0a"))
    w.set(a, "va", up=True)
    w.set(a, "va", master="br0")  # a bridge port may be up
    w.set(a, "va", master="br0")  # already its master
    w.set(a, "vb", master="va")  # a veth is no master: EOPNOTSUPP
    w.set(a, "br0", master="br0")  # ELOOP
    w.set(a, "vb", master=MISSING_IFINDEX)  # EINVAL
    macvlan(w, a, "mv", "va")  # the port's rx_handler is taken: EBUSY
    w.set(a, "va", master=0)


@scenario("veth", "bridge")
def bridge_address_and_mtu_follow_its_ports(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="bridge", name="br0"))
    w.create(a, veth("va", "vb", mac="02:00:00:00:00:0a", mtu=9000))
    w.create(a, veth("wa", "wb", mac="02:00:00:00:00:0b", mtu=4000))
    w.set(a, "va", master="br0")
    w.checkpoint("one port")
    w.set(a, "wa", master="br0")
    w.checkpoint("two ports")
    w.set(a, "wa", mtu=2000)
    w.checkpoint("a port's MTU lowered")
    w.set(a, "va", mac="02:00:00:00:00:0c")  # the bridge takes the lowest port address
    w.checkpoint("a port's address changed")
    w.set(a, "wa", master=0)
    w.checkpoint("one port left")
    w.set(a, "va", master=0)


@scenario("veth", "bridge")
def bridge_with_user_set_mtu_and_address(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="bridge", name="br0", mac="02:00:00:00:00:b0"))
    w.set(a, "br0", mtu=1400)
    w.create(a, veth("va", "vb", mac="02:00:00:00:00:0a"))
    w.set(a, "va", master="br0")
    w.checkpoint("enslaved")
    w.set(a, "va", master=0)
    w.create(a, LinkSpec(kind="bridge", name="br1", mtu=9000))  # not a user-set MTU
    w.set(a, "va", master="br1")
    w.checkpoint("br1 follows its port")
    w.set(a, "br1", up=True)


@scenario("veth", "bridge")
def bridge_cannot_move(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, LinkSpec(kind="bridge", name="br0"))
    w.move(a, "br0", b)
    w.move(a, "br0", b, new_name="br1")
    w.create(a, veth("va", "vb"))
    w.set(a, "va", master="br0")
    w.kill_ns("a")  # the bridge and its port die with the namespace


@scenario("veth", "bridge")
def bridge_port_changes_bridge(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="bridge", name="br0"))
    w.create(a, LinkSpec(kind="bridge", name="br1"))
    w.create(a, veth("va", "vb"))
    w.set(a, "va", master="br0")
    w.set(a, "va", master="br1")  # leaves br0 first
    w.set(a, "br0", master="br1")  # a bridge cannot be a port of a bridge
    w.delete(a, "br1")  # its port is released
    w.delete(a, "vb")


# -- dummy -----------------------------------------------------------------------------


@scenario("dummy")
def dummy_create_and_move(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.create(a, LinkSpec(kind="dummy", name="d1", mtu=65536))  # no maximum
    w.set(a, "d0", mtu=9000, up=True)
    w.move(a, "d0", b, new_name="dummy0")
    w.create(a, LinkSpec(kind="dummy", name="d1"))


# -- bond ------------------------------------------------------------------------------


def bond(name: str, mode: str = "active-backup", **kw: Any) -> LinkSpec:
    return LinkSpec(kind="bond", name=name, bond=BondInfo(mode=mode, miimon_ms=100), **kw)


@scenario("bond", "veth")
def bond_enslave_rules(w: World) -> None:
    a = w.ns("a")
    w.create(a, bond("bond0"))
    w.create(a, veth("va", "vb", mac="02:00:00:00:00:0a"))
    w.create(a, veth("wa", "wb", mac="02:00:00:00:00:0b"))
    w.set(a, "va", up=True)
    w.set(a, "va", master="bond0")  # EPERM: up
    w.set(a, "va", up=False, master="bond0")  # down first, in the same message
    w.set(a, "wa", master="bond0")
    w.set(a, "bond0", master="bond0")
    w.move(a, "bond0", w.host)  # EINVAL: a bond stays in its namespace


@scenario("bond", "veth")
def bond_induced_changes_and_their_restoration(w: World) -> None:
    a = w.ns("a")
    w.create(a, bond("bond0", mtu=9000))
    w.create(a, veth("va", "vb", mac="02:00:00:00:00:0a", mtu=1500))
    w.create(a, veth("wa", "wb", mac="02:00:00:00:00:0b", mtu=1400))
    w.set(a, "va", master="bond0")  # va: bond's MTU, opened; bond takes va's address
    w.checkpoint("one slave")
    w.set(a, "wa", master="bond0")  # wa takes the bond's address
    w.checkpoint("two slaves")
    w.set(a, "bond0", mtu=4000)  # every slave follows
    w.checkpoint("bond MTU changed")
    w.set(a, "wa", master=0)  # wa: its own MTU and address back
    w.checkpoint("wa released")
    w.set(a, "va", master=0)  # the bond gets a new random address


@scenario("bond", "veth", "macvlan")
def bond_refuses_a_busy_port(w: World) -> None:
    a = w.ns("a")
    w.create(a, bond("bond0"))
    w.create(a, veth("va", "vb"))
    macvlan(w, a, "mv", "va")
    w.set(a, "va", master="bond0")  # EBUSY: the macvlan owns va's rx_handler
    w.delete(a, "mv")
    w.set(a, "va", master="bond0")
    w.delete(a, "bond0")  # its slave survives, released


# -- vlan ------------------------------------------------------------------------------


def vlan(w: World, ns: NsRef, name: str, parent: str, vid: int, **kw: Any) -> None:
    stacked(w, "vlan", ns, name, parent, vlan_id=vid, **kw)


@scenario("vlan", "veth")
def vlan_on_a_parent(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("pv", "pp", mtu=9000))
    vlan(w, a, "pv.100", "pv", 100)
    vlan(w, a, "dup", "pv", 100)  # EEXIST
    vlan(w, a, "pv.100ad", "pv", 100, vlan_protocol="802.1ad")
    vlan(w, a, "pv.4095", "pv", 4095)  # ERANGE
    stacked(w, "vlan", b, "bv.7", "pv", parent_ns=a, vlan_id=7)
    w.set(a, "pv", up=True)
    w.set(a, "pv.100", up=True)


@scenario("vlan", "veth")
def vlan_mtu_bounded_by_its_parent(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp"))
    vlan(w, a, "big", "pv", 5, mtu=1501)  # EINVAL at create
    vlan(w, a, "v5", "pv", 5)
    w.set(a, "v5", mtu=1501)  # ERANGE at set
    w.set(a, "pv", mtu=1400)  # the vlan is clamped
    w.delete(a, "pv")


# -- ipvlan ----------------------------------------------------------------------------


@scenario("ipvlan", "veth")
def ipvlan_l2_on_a_parent(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("pv", "pp", mac="02:00:00:00:00:0a"))
    stacked(w, "ipvlan", a, "ip0", "pv", mode="l2")
    stacked(w, "ipvlan", b, "ip1", "pv", parent_ns=a, mode="l2")
    w.set(a, "ip0", mac="02:00:00:00:00:0c")  # an ipvlan shares its parent's address
    w.set(a, "pv", mtu=1400)  # ipvlans follow their parent's MTU


@scenario("ipvlan", "veth")
def ipvlan_mode_belongs_to_the_port(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp"))
    stacked(w, "ipvlan", a, "ip0", "pv", mode="l2")
    stacked(w, "ipvlan", a, "ip1", "pv", mode="l3")  # every ipvlan on pv switches to l3
    stacked(w, "ipvlan", a, "ip2", "ip0")  # on an ipvlan: joins the same port


@scenario("ipvlan", "macvlan", "veth")
def macvlan_and_ipvlan_exclude_each_other(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp"))
    w.create(a, veth("qv", "qp"))
    macvlan(w, a, "mv", "pv")
    stacked(w, "ipvlan", a, "ipv", "pv")  # EBUSY
    stacked(w, "ipvlan", a, "ipq", "qv")
    macvlan(w, a, "mq", "qv")  # EBUSY


@scenario("ipvlan", "vlan", "veth")
def vlan_refuses_an_ipvlan_parent(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp"))
    stacked(w, "ipvlan", a, "ipv", "pv")
    vlan(w, a, "ipv.5", "ipv", 5)  # EOPNOTSUPP: ipvlan is VLAN challenged


# -- the loopback device --------------------------------------------------------------


@scenario("veth")
def loopback_is_in_every_namespace(w: World) -> None:
    a = w.ns("a")
    w.get(a, "lo")  # ifindex 1, down in a new namespace, MTU 65536
    w.create(a, veth("lo", "lp"))  # EEXIST: lo is taken
    w.set(a, "lo", up=True)
    w.get(a, "lo")
    w.set(a, "lo", mtu=1500)


@scenario("veth")
def loopback_cannot_leave_or_die(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.move(a, "lo", b)  # NETIF_F_NETNS_LOCAL
    w.move(a, "lo", b, new_name="lo2")
    w.delete(a, "lo")  # no rtnl_link_ops: no dellink
    w.set(a, "lo", mac="02:00:00:00:00:01")
    w.set(a, "lo", name="lo1")
    w.get(a, "lo1")
    w.set(a, "lo1", name="lo")


@scenario("veth", "macvlan", "bridge")
def loopback_as_a_lower_or_port(w: World) -> None:
    a = w.ns("a")
    macvlan(w, a, "mv", "lo")  # not an Ethernet device
    w.create(a, LinkSpec(kind="bridge", name="br0"))
    w.set(a, "lo", master="br0")


@scenario("vlan", "ipvlan", "bond")
def loopback_under_vlan_ipvlan_and_bond(w: World) -> None:
    a = w.ns("a")
    vlan(w, a, "lo.5", "lo", 5)
    stacked(w, "ipvlan", a, "ipl", "lo")
    w.create(a, LinkSpec(kind="bond", name="bond0"))
    w.set(a, "lo", master="bond0")


# -- defaults of options left unset ----------------------------------------------------


@scenario("bond")
def bond_created_without_options(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="bond", name="bond0"))  # the module's defaults
    w.create(a, LinkSpec(kind="bond", name="bond1", mtu=9000, mac="02:00:00:00:00:b1"))
    w.get(a, "bond0")


@scenario("bond")
def bond_delays_rounded_to_miimon(w: World) -> None:
    a = w.ns("a")
    info = BondInfo(mode="active-backup", miimon_ms=100, updelay_ms=250, downdelay_ms=120)
    w.create(a, LinkSpec(kind="bond", name="bond0", bond=info))
    info = BondInfo(mode="active-backup", miimon_ms=0, updelay_ms=200)
    w.create(a, LinkSpec(kind="bond", name="bond1", bond=info))  # no MII monitor
    w.create(a, LinkSpec(kind="bond", name="bond2", bond=BondInfo("802.3ad", 100)))
    w.create(a, LinkSpec(kind="bond", name="bond3", bond=BondInfo("nonsense", 100)))


@scenario("dummy", "bridge", "veth")
def defaults_of_plain_links(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.create(a, LinkSpec(kind="bridge", name="br0"))
    w.create(a, veth("va"))
    w.create(a, LinkSpec(kind="dummy", name="d%d"))


@scenario("vlan", "ipvlan", "macvlan", "dummy")
def defaults_of_stacked_links(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="dummy", name="d0", mtu=9000, mac="02:00:00:00:00:d0"))
    w.create(a, LinkSpec(kind="dummy", name="d1", mac="02:00:00:00:00:d1"))
    vlan(w, a, "d0.7", "d0", 7)  # 802.1Q, the lower's MTU and address
    stacked(w, "ipvlan", a, "ip0", "d0")  # l3
    macvlan(w, a, "mv0", "d1")  # vepa, a random address


# -- options of existing links ---------------------------------------------------------


def ab_bond(name: str, miimon: int = 100, mac: str | None = None) -> LinkSpec:
    return LinkSpec(kind="bond", name=name, bond=BondInfo("active-backup", miimon), mac=mac)


# A bond in the VM lab's node (its root namespace, which udev watches) gets an address
# of its name from udev (MACAddressPolicy=persistent applies to random addresses), some
# time after it is made: before that it takes its first slave's address, after it keeps
# its own. A bond given an address never changes it, whenever udev comes.
NODE_BOND_MAC = "02:00:00:00:0b:00"


@scenario("bond", "dummy")
def bond_mode_changed(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="bond", name="bond0"))
    w.change(a, "bond0", "bond.mode", "active-backup")  # down, no slaves
    w.change(a, "bond0", "bond.mode", "nonsense")
    w.set(a, "bond0", up=True)
    w.change(a, "bond0", "bond.mode", "balance-xor")  # up
    w.change(a, "bond0", "bond.mode", "active-backup")  # the mode it has
    w.set(a, "bond0", up=False)
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.set(a, "d0", master="bond0")
    w.change(a, "bond0", "bond.mode", "broadcast")  # with a slave


@scenario("bond", "dummy")
def bond_miimon_changed(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="bond", name="bond0"))
    w.change(a, "bond0", "bond.miimon", 250)
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.set(a, "d0", master="bond0")
    w.set(a, "bond0", up=True)
    w.change(a, "bond0", "bond.miimon", 0)  # up, with a slave
    w.change(a, "bond0", "bond.miimon", -1)


@scenario("bond", "dummy")
def bond_active_slave_chosen(w: World) -> None:
    a = w.ns("a")
    w.create(a, ab_bond("bond0"))
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.create(a, LinkSpec(kind="dummy", name="d1"))
    w.create(a, LinkSpec(kind="dummy", name="d2"))
    w.set(a, "d0", master="bond0")
    w.set(a, "d1", master="bond0")
    w.set(a, "bond0", up=True)
    w.checkpoint("two slaves, up")
    w.change(a, "bond0", "bond.active_slave", "d1")
    w.checkpoint("d1 made active")
    w.change(a, "bond0", "bond.active_slave", "d2")  # not a slave
    w.change(a, "bond0", "bond.active_slave", "nosuch")
    w.change(a, "bond0", "bond.active_slave", "")  # none


@scenario("bond", "dummy")
def bond_active_slave_of_a_down_bond(w: World) -> None:
    a = w.ns("a")
    w.create(a, ab_bond("bond0"))
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.create(a, LinkSpec(kind="dummy", name="d1"))
    w.set(a, "d0", master="bond0")  # the bond is down
    w.set(a, "d1", master="bond0")
    w.checkpoint("enslaved into a down bond")
    w.change(a, "bond0", "bond.active_slave", "d1")
    w.set(a, "bond0", up=True)
    w.checkpoint("bond up")


@scenario("bond", "dummy")
def bond_active_slave_in_a_mode_without_one(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="bond", name="bond0", bond=BondInfo("balance-rr", 100)))
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.set(a, "d0", master="bond0")
    w.set(a, "bond0", up=True)
    w.change(a, "bond0", "bond.active_slave", "d0")


@scenario("bond", "dummy")
def bond_active_slave_set_down(w: World) -> None:
    a = w.ns("a")
    w.create(a, ab_bond("bond0"))
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.create(a, LinkSpec(kind="dummy", name="d1"))
    w.set(a, "d0", master="bond0")
    w.set(a, "d1", master="bond0")
    w.set(a, "bond0", up=True)
    w.set(a, "d1", up=False)
    w.change(a, "bond0", "bond.active_slave", "d1")  # a slave that is down


@scenario("bond", "dummy")
def bond_failover_when_the_active_slave_goes_down(w: World) -> None:
    a = w.ns("a")
    w.create(a, ab_bond("bond0"))
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.create(a, LinkSpec(kind="dummy", name="d1"))
    w.set(a, "d0", master="bond0")
    w.set(a, "d1", master="bond0")
    w.set(a, "bond0", up=True)
    w.set(a, "d0", up=False)  # the active slave
    w.await_active(a, "bond0", "d0")
    w.checkpoint("failed over")
    w.set(a, "d0", up=True)
    w.await_active(a, "bond0", "")


@scenario("bond", "dummy")
def bond_active_slave_released_or_deleted(w: World) -> None:
    a = w.ns("a")
    w.create(a, ab_bond("bond0"))
    for name in ("d0", "d1", "d2"):
        w.create(a, LinkSpec(kind="dummy", name=name))
        w.set(a, name, master="bond0")
    w.set(a, "bond0", up=True)
    w.set(a, "d0", master=0)  # the active one leaves
    w.checkpoint("active released")
    w.delete(a, "d1")
    w.checkpoint("the next one deleted")
    w.delete(a, "d2")


@scenario("bond", "veth")
def bond_slave_without_carrier(w: World) -> None:
    a = w.ns("a")
    w.create(a, ab_bond("bond0"))
    w.create(a, veth("va", "vb", mac="02:00:00:00:00:0a"))  # vb down: va has no carrier
    w.create(a, veth("wa", "wb", mac="02:00:00:00:00:0b"))
    w.set(a, "wb", up=True)
    w.set(a, "va", master="bond0")
    w.set(a, "wa", master="bond0")
    w.set(a, "bond0", up=True)
    w.await_active(a, "bond0", "")
    w.checkpoint("bond up")


@scenario("ipvlan", "veth")
def ipvlan_mode_changed(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp"))
    stacked(w, "ipvlan", a, "ip0", "pv", mode="l2")
    stacked(w, "ipvlan", a, "ip1", "pv", mode="l2")
    w.change(a, "ip0", "ipvlan.mode", "l3")  # the port's: ip1 too
    w.checkpoint("l3")
    w.change(a, "ip1", "ipvlan.mode", "l3s")
    w.change(a, "ip1", "ipvlan.mode", "nonsense")
    w.change(a, "pv", "ipvlan.mode", "l2")  # not an ipvlan


@scenario("vlan", "veth")
def vlan_id_changed(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp"))
    vlan(w, a, "v5", "pv", 5)
    vlan(w, a, "v6", "pv", 6)
    w.change(a, "v5", "vlan.id", 7)
    w.change(a, "v5", "vlan.id", 6)  # v6 has it
    w.change(a, "v5", "vlan.id", 4095)
    w.change(a, "pv", "vlan.id", 8)  # not a vlan


@scenario("bond", "dummy")
def option_of_another_kind(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.change(a, "d0", "bond.mode", "active-backup")
    w.change(a, "d0", "bond.miimon", 100)
    w.change(a, "nosuch", "bond.miimon", 100)


# -- more bonds ------------------------------------------------------------------------


@scenario("bond", "dummy")
def bond_with_dummy_slaves_up_and_down(w: World) -> None:
    a = w.ns("a")
    w.create(a, bond("bond0", mtu=9000))
    w.create(a, LinkSpec(kind="dummy", name="d0", mac="02:00:00:00:00:d0"))
    w.create(a, LinkSpec(kind="dummy", name="d1", mac="02:00:00:00:00:d1"))
    w.set(a, "d0", master="bond0")
    w.set(a, "d1", master="bond0")
    w.set(a, "bond0", up=True)
    w.checkpoint("up")
    w.set(a, "bond0", up=False)  # the slaves stay up
    w.checkpoint("bond down")
    w.set(a, "d1", mtu=1400)  # a slave's own MTU may differ
    w.set(a, "bond0", mac="02:00:00:00:00:b0")


@scenario("bond", "dummy", "bridge")
def bonds_and_bridges_nested(w: World) -> None:
    a = w.ns("a")
    w.create(a, bond("bond0"))
    w.create(a, bond("bond1"))
    w.create(a, LinkSpec(kind="bridge", name="br0"))
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.set(a, "d0", master="bond0")
    w.set(a, "bond0", master="bond1")  # a bond in a bond
    w.set(a, "bond0", master="br0")  # a bond in a bridge
    w.set(a, "br0", master="bond1")  # a bridge in a bond: EPERM
    w.set(a, "bond1", master="bond0")


@scenario("bond", "vlan", "dummy")
def vlan_on_a_bond(w: World) -> None:
    a = w.ns("a")
    w.create(a, bond("bond0", mac="02:00:00:00:00:b0"))
    vlan(w, a, "bond0.10", "bond0", 10)
    w.create(a, LinkSpec(kind="dummy", name="d0", mac="02:00:00:00:00:d0"))
    w.set(a, "d0", master="bond0")
    w.set(a, "bond0", up=True)
    w.set(a, "bond0.10", up=True)
    w.checkpoint("vlan up")
    w.set(a, "d0", master=0)  # the bond gets a new random address


@scenario("bond", "dummy")
def bond_dies_with_its_namespace(w: World) -> None:
    a = w.ns("a")
    w.create(a, bond("bond0"))
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.set(a, "d0", master="bond0")
    w.kill_ns("a")
    w.attempt(w.kernel.list_namespaces, "list: a is gone")


# -- more vlan, ipvlan, macvlan, dummy -------------------------------------------------


@scenario("vlan", "veth")
def vlan_follows_its_parent_up_and_down(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp", mac="02:00:00:00:00:0a"))
    vlan(w, a, "v5", "pv", 5)
    w.set(a, "v5", up=True)  # ENETDOWN: the parent is down
    w.set(a, "pv", up=True)
    w.set(a, "v5", up=True)
    w.set(a, "pv", up=False)
    w.checkpoint("parent down")
    w.set(a, "pv", up=True)
    w.checkpoint("parent up again")
    w.set(a, "pv", mac="02:00:00:00:00:0b")  # an up vlan follows its parent's address


@scenario("vlan", "veth")
def vlan_in_vlan(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("pv", "pp"))
    vlan(w, a, "outer", "pv", 100, vlan_protocol="802.1ad")
    vlan(w, a, "inner", "outer", 200)
    w.move(a, "inner", b)
    w.delete(a, "outer")


@scenario("vlan", "macvlan", "veth")
def vlan_and_macvlan_on_each_other(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp"))
    macvlan(w, a, "mv", "pv")
    vlan(w, a, "mv.5", "mv", 5)
    vlan(w, a, "pv.6", "pv", 6)
    macvlan(w, a, "mv6", "pv.6", mode="bridge")
    w.delete(a, "mv")


@scenario("ipvlan", "dummy")
def ipvlan_on_a_dummy_moved_around(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, LinkSpec(kind="dummy", name="d0", mtu=9000))
    stacked(w, "ipvlan", b, "ip0", "d0", parent_ns=a, mode="l2")
    w.set(b, "ip0", mtu=9001)
    w.set(b, "ip0", mtu=4000)
    w.set(a, "d0", mtu=3000)
    w.move(b, "ip0", w.host)
    w.kill_ns("a")  # the lower dies: the ipvlan with it


@scenario("macvlan", "dummy")
def macvlan_on_a_dummy(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="dummy", name="d0", mac="02:00:00:00:00:d0"))
    macvlan(w, a, "mv0", "d0", mode="passthru")
    w.set(a, "mv0", up=True)
    w.checkpoint("passthru up")
    w.set(a, "d0", up=True)
    w.delete(a, "d0")


@scenario("dummy")
def dummy_addresses_and_mtu(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="dummy", name="d0", mtu=0))
    w.create(a, LinkSpec(kind="dummy", name="d1", mac="01:00:5e:00:00:01"))
    w.create(a, LinkSpec(kind="dummy", name="d2", mac="00:00:00:00:00:00"))
    w.create(a, LinkSpec(kind="dummy", name="d3"))
    w.set(a, "d3", mac="02:00:00:00:00:d3", up=True, mtu=100000)
    w.set(a, "d3", mtu=68)
    w.set(a, "d3", name="d4", alias="renamed")


@scenario("dummy", "bridge")
def bridge_of_dummies(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="bridge", name="br0"))
    w.create(a, LinkSpec(kind="dummy", name="d0", mac="02:00:00:00:00:d0", mtu=9000))
    w.create(a, LinkSpec(kind="dummy", name="d1", mac="02:00:00:00:00:c1", mtu=1500))
    w.set(a, "d0", master="br0")
    w.set(a, "d1", master="br0")
    w.checkpoint("two ports")
    w.delete(a, "d1")
    w.checkpoint("one port deleted")
    w.move(a, "d0", w.host)  # a port cannot move while enslaved


# -- ifindexes on a move ---------------------------------------------------------------


@scenario("dummy")
def move_keeps_a_free_ifindex(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    for name in ("d0", "d1", "d2"):
        w.create(a, LinkSpec(kind="dummy", name=name))
    w.move_renumbers(a, "d2", b)  # b has only lo: its index is free there
    w.move_renumbers(b, "d2", a)  # and free again at home


@scenario("dummy")
def move_renumbers_on_an_ifindex_collision(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.create(b, LinkSpec(kind="dummy", name="e0"))  # the same ifindex in b
    w.move_renumbers(a, "d0", b)
    w.create(a, LinkSpec(kind="dummy", name="d1"))
    w.move_renumbers(b, "d0", a)  # its old number was given to d1?
    w.move_renumbers(b, "e0", a, new_name="e1")


@scenario("veth")
def move_a_veth_end_back_and_forth(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("va", "vb"))
    w.create(b, veth("x0", "x1"))
    w.move_renumbers(a, "vb", b)
    w.move_renumbers(b, "vb", a)
    w.move_renumbers(a, "va", w.host)
    w.move_renumbers(w.host, "va", b)


# -- more veth, macvlan, bridge --------------------------------------------------------


@scenario("veth")
def veth_ends_renamed_and_moved_apart(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("va", "vb"))
    w.set(a, "vb", name="eth0")
    w.move(a, "eth0", b)
    w.set(b, "eth0", up=True, mtu=9000)
    w.set(a, "va", up=True)
    w.move(b, "eth0", a)  # eth0 is free in a
    w.delete(a, "eth0")


@scenario("veth", "macvlan")
def macvlan_source_mode_and_mode_per_link(w: World) -> None:
    a = w.ns("a")
    w.create(a, veth("pv", "pp"))
    macvlan(w, a, "ms", "pv", mode="source")
    macvlan(w, a, "mb", "pv", mode="bridge")
    macvlan(w, a, "mp", "pv", mode="passthru")  # other macvlans on pv: EINVAL
    w.set(a, "ms", up=True)
    w.set(a, "mb", up=True)


@scenario("veth", "bridge")
def bridge_up_with_and_without_ports(w: World) -> None:
    a = w.ns("a")
    w.create(a, LinkSpec(kind="bridge", name="br0"))
    w.set(a, "br0", up=True)  # no ports: all-zero address, but it opens
    w.create(a, veth("va", "vb", mac="02:00:00:00:00:0a"))
    w.set(a, "va", master="br0", up=True)
    w.checkpoint("port up")
    w.set(a, "br0", up=False)
    w.set(a, "br0", mac="02:00:00:00:00:b0")  # the user's address from now on
    w.set(a, "va", mac="02:00:00:00:00:01")
    w.checkpoint("user address kept")


@scenario("veth", "macvlan")
def macvlan_in_a_namespace_whose_lower_moves_away(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("pv", "pp"))
    macvlan(w, b, "mv", "pv", parent_ns=a)
    w.move(a, "pv", b)  # the lower joins its child
    w.checkpoint("together")
    w.move(b, "pv", w.host, new_name="host-pv")
    w.kill_ns("b")  # the child dies, the lower lives on in the host


@scenario("veth")
def alias_survives_moves_and_renames(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("va", "vb", alias="mine"))
    w.move(a, "va", b, new_name="vz")
    w.set(b, "vz", name="vy")
    w.move(b, "vy", a)
    w.get(a, "vy")


# -- SR-IOV: the emulated igb PFs ------------------------------------------------------


@scenario("device")
def sriov_numvfs_up_and_down(w: World) -> None:
    w.numvfs("enp1s0", 2)
    w.vfs("enp1s0")
    w.checkpoint("two VFs")
    w.numvfs("enp1s0", 2)  # the same count: nothing to do
    w.numvfs("enp1s0", 3)  # EBUSY: through 0 only
    w.numvfs("enp1s0", 0)
    w.vfs("enp1s0")


@scenario("device")
def sriov_numvfs_above_totalvfs(w: World) -> None:
    w.numvfs("enp1s0", 8)  # sriov_totalvfs is 7
    w.numvfs("enp2s0", 1000)
    w.numvfs("enp1s0", 1)
    w.numvfs("enp1s0", 8)
    w.numvfs("enp1s0", 0)


@scenario("device")
def sriov_numvfs_via_zero_makes_new_vfs(w: World) -> None:
    w.numvfs("enp1s0", 1)
    w.set(w.host, "enp1s0v0", mtu=9000, alias="old", up=True)
    w.set_vf("enp1s0", 0, vlan=7, trust=True)
    w.checkpoint("VF set up")
    w.numvfs("enp1s0", 0)
    w.numvfs("enp1s0", 1)  # a new VF: defaults again
    w.vfs("enp1s0")


@scenario("device")
def sriov_numvfs_on_both_pfs(w: World) -> None:
    w.numvfs("enp1s0", 1)
    w.numvfs("enp2s0", 1)
    w.vfs("enp2s0")
    w.numvfs("enp2s0", 0)
    w.vfs("enp1s0")


@scenario("device", "bond", "macvlan", "vlan")
def sriov_numvfs_zero_with_vfs_in_use(w: World) -> None:
    w.numvfs("enp1s0", 2)
    w.create(w.host, ab_bond("bond0", mac=NODE_BOND_MAC))
    w.set(w.host, "enp1s0v0", master="bond0")
    macvlan(w, w.host, "mv0", "enp1s0v1")
    vlan(w, w.host, "v1.5", "enp1s0v1", 5)
    w.set(w.host, "bond0", up=True)
    w.checkpoint("in use")
    w.numvfs("enp1s0", 0)  # the VFs go: the bond loses its slave, the uppers die


@scenario("device")
def sriov_numvfs_zero_with_vfs_in_other_namespaces(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.numvfs("enp1s0", 3)
    w.move(w.host, "enp1s0v0", a)
    w.move(w.host, "enp1s0v1", b, new_name="eth0")
    w.set(b, "eth0", up=True)
    w.checkpoint("moved")
    w.numvfs("enp1s0", 0)
    w.attempt(lambda: w.kernel.list_links(b), "list b")


@scenario("device")
def sriov_vf_moved_with_a_marker_and_home_with_its_alias(w: World) -> None:
    """The VF plugin's MoveLink: in under a temporary name with our marker, one message
    each way; home under its own name with its own alias."""
    a = w.ns("a")
    w.numvfs("enp1s0", 1)
    w.set(w.host, "enp1s0v0", alias="its own", up=True)
    w.move(w.host, "enp1s0v0", a, new_name="np0123abcd", alias="dranp:0123abcd:vf")
    w.set(a, "np0123abcd", name="net1")
    w.set(a, "net1", up=True)
    w.checkpoint("attached")
    w.set(a, "net1", up=False)
    w.set(a, "net1", name="np0123abcd")
    w.move(a, "np0123abcd", w.host, new_name="enp1s0v0", alias="its own")
    w.checkpoint("home")
    w.numvfs("enp1s0", 0)


@scenario("device")
def sriov_vf_moved_in_under_its_final_name_marked(w: World) -> None:
    """The VF plugin's move since linux/move-link/v2: in under its final name with our
    marker in one message. A final name taken in the sandbox: with the VF's own name free
    there, do_setlink moves it, refuses the rename (EEXIST) and stops before the alias;
    with its own name taken too, the move itself is refused and nothing changes."""
    a = w.ns("a")
    w.numvfs("enp1s0", 3)
    w.set(w.host, "enp1s0v0", alias="its own", up=True)
    w.move(w.host, "enp1s0v0", a, new_name="net1", alias="dranp:0123abcd:vf")
    w.set(a, "net1", up=True)
    w.checkpoint("attached")
    w.create(a, LinkSpec(kind="dummy", name="net2"))
    w.move(w.host, "enp1s0v1", a, new_name="net2", alias="dranp:4567cdef:vf")
    w.checkpoint("moved, not renamed")
    w.create(a, LinkSpec(kind="dummy", name="enp1s0v2"))
    w.move(w.host, "enp1s0v2", a, new_name="net2", alias="dranp:89abcdef:vf")
    w.checkpoint("refused")
    w.move(a, "net1", w.host, new_name="enp1s0v0", alias="its own")
    w.move(a, "enp1s0v1", w.host)
    w.checkpoint("home")
    w.numvfs("enp1s0", 0)


@scenario("device")
def sriov_vf_table_defaults(w: World) -> None:
    w.vfs("enp1s0")  # no VFs: no table
    w.numvfs("enp1s0", 2)
    w.vfs("enp1s0")
    w.attempt(lambda: w.kernel.get_vfs(w.host, w.ifindex(w.host, "enp1s0v0")), "get_vfs of a VF")


@scenario("device")
def sriov_vf_vlan_and_qos(w: World) -> None:
    w.numvfs("enp1s0", 2)
    w.set_vf("enp1s0", 0, vlan=100, qos=3)
    w.set_vf("enp1s0", 1, qos=5)  # a priority without a VLAN
    w.set_vf("enp1s0", 0, vlan=4095)
    w.set_vf("enp1s0", 0, vlan=4096)
    w.set_vf("enp1s0", 0, qos=8)
    w.set_vf("enp1s0", 0, vlan=10, vlan_proto="802.1ad")
    w.vfs("enp1s0")
    w.set_vf("enp1s0", 0, vlan=0, qos=0)
    w.vfs("enp1s0")


@scenario("device")
def sriov_vf_spoofchk_and_trust(w: World) -> None:
    w.numvfs("enp1s0", 2)
    w.set_vf("enp1s0", 0, spoofchk=False)
    w.set_vf("enp1s0", 1, trust=True)
    w.vfs("enp1s0")
    w.set_vf("enp1s0", 0, spoofchk=True, trust=True)
    w.vfs("enp1s0")


@scenario("device")
def sriov_vf_link_state(w: World) -> None:
    w.numvfs("enp1s0", 1)
    w.set_vf("enp1s0", 0, link_state="disable")  # igb has no ndo_set_vf_link_state
    w.set_vf("enp1s0", 0, link_state="auto")
    w.vfs("enp1s0")


@scenario("device")
def sriov_vf_rates(w: World) -> None:
    """igb sets a VF rate only with link, which QEMU's igb gets a moment after its PF
    first opens and keeps for the rest of the boot: a history the corpus cannot set, so
    it makes only the calls refused either way (a minimum rate; above the link speed)."""
    w.numvfs("enp1s0", 1)
    w.set_vf("enp1s0", 0, min_tx_rate=10, max_tx_rate=100)
    w.set_vf("enp1s0", 0, max_tx_rate=100000)
    w.set_vf("enp1s0", 0, min_tx_rate=1)
    w.vfs("enp1s0")


@scenario("device")
def sriov_vf_index_out_of_range(w: World) -> None:
    w.numvfs("enp1s0", 2)
    w.set_vf("enp1s0", 2, mac="02:00:00:00:02:02")
    w.set_vf("enp1s0", 7, vlan=5)
    w.set_vf("enp1s0", 2, spoofchk=False)
    w.set_vf("enp2s0", 0, trust=True)  # enp2s0 has no VFs


@scenario("device")
def sriov_vf_mac_set_through_the_pf(w: World) -> None:
    w.numvfs("enp1s0", 2)
    w.set_vf("enp1s0", 0, mac="02:00:00:00:0f:00")
    w.vfs("enp1s0")
    w.checkpoint("VF table set, VF netdev down")
    w.set(w.host, "enp1s0v0", up=True)
    w.checkpoint("VF up")
    w.set(w.host, "enp1s0v0", up=False)
    w.checkpoint("VF down again")


@scenario("device")
def sriov_vf_mac_set_while_the_vf_is_up(w: World) -> None:
    w.numvfs("enp1s0", 1)
    w.set(w.host, "enp1s0", up=True)
    w.set(w.host, "enp1s0v0", up=True)
    w.set_vf("enp1s0", 0, mac="02:00:00:00:0f:01")
    w.checkpoint("set while up")
    w.set(w.host, "enp1s0v0", up=False)
    w.checkpoint("VF down")
    w.set(w.host, "enp1s0v0", mac="02:00:00:00:0f:02")  # the PF set one: may it change?
    w.checkpoint("VF's own address")


@scenario("device")
def sriov_vf_mac_bad_and_cleared(w: World) -> None:
    w.numvfs("enp1s0", 1)
    w.set_vf("enp1s0", 0, mac="01:00:5e:00:00:01")  # multicast
    w.set_vf("enp1s0", 0, mac="02:00:00:00:0f:03")
    w.set_vf("enp1s0", 0, mac="00:00:00:00:00:00")  # clears the administrative address
    w.vfs("enp1s0")
    w.set(w.host, "enp1s0v0", mac="02:00:00:00:0f:04")
    w.checkpoint("own address after clearing")


@scenario("device")
def sriov_vf_netdev_settings(w: World) -> None:
    w.numvfs("enp1s0", 1)
    w.set(w.host, "enp1s0v0", mtu=9216)
    w.set(w.host, "enp1s0v0", mtu=9217)
    w.set(w.host, "enp1s0v0", mtu=67)
    w.set(w.host, "enp1s0v0", mac="02:00:00:00:0f:05", alias="vf0", name="vf0")
    w.set(w.host, "vf0", up=True)  # the PF is down
    w.delete(w.host, "vf0")  # a device has no dellink
    w.set(w.host, "enp1s0", mtu=9000)
    w.checkpoint("PF MTU")


@scenario("device", "dummy")
def sriov_vf_moves_and_ifindex(w: World) -> None:
    # The guest's node has made many VFs before: their ifindexes are high, where a new
    # namespace has none, so the VFs keep theirs (collisions: the dummy scenarios).
    a = w.ns("a")
    w.numvfs("enp1s0", 2)
    w.create(a, LinkSpec(kind="dummy", name="eth0"))
    w.move_renumbers(w.host, "enp1s0v0", a)
    w.move_renumbers(w.host, "enp1s0v1", a, new_name="net1")
    w.set(a, "enp1s0v0", up=True)
    w.move_renumbers(a, "enp1s0v0", w.host)
    w.kill_ns("a")  # net1 comes home


@scenario("device", "macvlan", "vlan", "ipvlan")
def sriov_vf_as_a_lower(w: World) -> None:
    a = w.ns("a")
    w.numvfs("enp1s0", 2)
    macvlan(w, a, "mv0", "enp1s0v0", parent_ns=w.host, mode="bridge")
    vlan(w, w.host, "enp1s0v1.9", "enp1s0v1", 9)
    stacked(w, "ipvlan", a, "ip0", "enp1s0v1", parent_ns=w.host)
    w.checkpoint("uppers")
    w.set(w.host, "enp1s0v0", mtu=2000)  # igbvf resets: its address is its hardware one


@scenario("device", "bond")
def sriov_vf_enslaved_into_a_down_bond(w: World) -> None:
    w.numvfs("enp1s0", 2)
    w.create(w.host, ab_bond("bond0", mac=NODE_BOND_MAC))
    w.set(w.host, "enp1s0v0", master="bond0")  # the bond is down
    w.set(w.host, "enp1s0v1", master="bond0")
    w.checkpoint("enslaved")
    w.set(w.host, "bond0", up=True)  # the VFs have no carrier: their PF is down
    w.await_active(w.host, "bond0", "")
    w.checkpoint("bond up")


@scenario("device", "bond")
def sriov_vf_bond_failover(w: World) -> None:
    w.numvfs("enp1s0", 1)
    w.numvfs("enp2s0", 1)
    w.create(w.host, ab_bond("bond0", mac=NODE_BOND_MAC))
    w.set(w.host, "enp1s0v0", master="bond0")
    w.set(w.host, "enp2s0v0", master="bond0")
    w.set(w.host, "bond0", up=True)
    w.set(w.host, "enp1s0v0", up=False)  # the first slave
    w.await_active(w.host, "bond0", "enp1s0v0")
    w.checkpoint("after the active slave went down")


@scenario("device")
def sriov_pf_settings(w: World) -> None:
    w.set(w.host, "enp1s0", mtu=9216)
    w.set(w.host, "enp1s0", mtu=9217)
    w.set(w.host, "enp1s0", mac="02:00:00:00:0e:01", alias="pf")
    w.move(w.host, "enp1s0", w.ns("a"))
    w.checkpoint("PF moved")


# -- issue 30: what independent recordings of 6.1 and 6.12 showed -----------------------


def vf_macs(w: World, pf: str) -> None:
    """The MACs of the PF's VF table, each as what it is to the VF's netdev (``<pf>v<i>``
    in the host): "zero", "its address", "its permanent address", or the address itself
    (a literal one a scenario set; a random one never compares equal)."""

    def relate() -> list[str]:
        table = w.kernel.get_vfs(w.host, w.ifindex(w.host, pf))
        out = []
        for entry in table:
            netdev = w.kernel.get_link(w.host, name=f"{pf}v{entry.vf_index}")
            if entry.mac == "00:00:00:00:00:00":
                out.append("zero")
            elif netdev is not None and entry.mac == netdev.mac:
                out.append("its address")
            elif netdev is not None and entry.mac == netdev.perm_mac:
                out.append("its permanent address")
            else:
                out.append(str(entry.mac))
        return out

    w.attempt(relate, f"VF table MACs of {pf}")


@scenario("dummy", "veth", "vlan")
def kernel_chosen_names(w: World) -> None:
    """Templates and no name at all: the kernel picks the smallest free number."""
    a, b = w.ns("a"), w.ns("b")
    w.create(a, LinkSpec(kind="dummy", name="dum%d"))
    w.create(a, LinkSpec(kind="dummy", name="dum%d"))
    w.create(a, LinkSpec(kind="dummy", name=""))  # dummy0
    w.create(a, LinkSpec(kind="dummy", name="", alias="unnamed"))  # dummy1
    w.create(a, LinkSpec(kind="veth", name=""))  # the peer is registered first: veth0
    w.create(a, veth("", "vp"))
    w.create(a, veth("vq", ""))
    stacked(w, "vlan", a, "", "dum0", vlan_id=5)  # vlan0
    w.create(a, LinkSpec(kind="dummy", name="d%d%d"))  # one %d only
    w.create(a, LinkSpec(kind="dummy", name="d%s"))
    w.create(b, LinkSpec(kind="dummy", name="dum0"))
    w.checkpoint("named by the kernel")
    w.set(a, "dum1", name="eth%d")  # eth0
    w.set(a, "eth0", name="eth%d")  # its own name is in use too: eth1
    w.set(a, "dummy1", name="")  # an empty name renames nothing
    w.move(a, "dummy0", b, new_name="dum%d")  # dum1: dum0 is taken in b
    w.move(a, "dum0", b, new_name="eth%d")  # dum0 is taken in b: the template, twice?
    w.move(a, "dummy1", b, new_name="")


@scenario("veth")
def veth_kernel_chosen_names(w: World) -> None:
    """The same with veth alone, so that every kernel runs it (the netns tier too)."""
    a, b = w.ns("a"), w.ns("b")
    w.create(a, LinkSpec(kind="veth", name=""))  # veth1, its peer veth0
    w.create(a, veth("x%d", "y%d"))
    w.create(a, veth("vq", ""))  # an empty peer name is a name: EINVAL
    w.create(b, veth("x0", "y0"))
    w.set(a, "x0", name="x%d")  # x1: x0 is its own name, still in use
    w.move(a, "veth0", b, new_name="x%d")  # x1 in b
    w.move(a, "y0", b, new_name="y%d")  # y0 is taken in b: y1, then the template again


@scenario("device", "vlan")
def sriov_vf_vlan_depends_on_the_vf_state(w: World) -> None:
    w.numvfs("enp1s0", 1)
    vlan(w, w.host, "vf.5", "enp1s0v0", 5)  # never up
    w.set(w.host, "enp1s0v0", up=True)  # its PF is down
    vlan(w, w.host, "vf.6", "enp1s0v0", 6)
    w.set(w.host, "enp1s0v0", up=False)
    vlan(w, w.host, "vf.7", "enp1s0v0", 7)
    w.checkpoint("PF down")
    w.set(w.host, "enp1s0", up=True)
    vlan(w, w.host, "vf.8", "enp1s0v0", 8)
    w.set(w.host, "enp1s0v0", up=True)
    vlan(w, w.host, "vf.9", "enp1s0v0", 9)


@scenario("device", "vlan")
def sriov_vf_vlan_with_its_pf_up(w: World) -> None:
    w.set(w.host, "enp1s0", up=True)
    w.numvfs("enp1s0", 2)
    vlan(w, w.host, "vf.5", "enp1s0v0", 5)  # never up
    w.set(w.host, "enp1s0v0", up=True)
    vlan(w, w.host, "vf.6", "enp1s0v0", 6)
    w.set(w.host, "enp1s0v1", mtu=1400)  # a reset, never up
    vlan(w, w.host, "vf1.7", "enp1s0v1", 7)
    w.checkpoint("vlans")
    vf_macs(w, "enp1s0")


@scenario("device", "bond")
def sriov_vf_enslaved_into_an_up_bond(w: World) -> None:
    w.set(w.host, "enp1s0", up=True)
    w.numvfs("enp1s0", 2)
    w.create(w.host, ab_bond("bond0", mac=NODE_BOND_MAC))
    w.set(w.host, "bond0", up=True)
    w.set(w.host, "enp1s0v0", master="bond0")  # down, never up
    w.await_active(w.host, "bond0", "")  # a carrier comes with igbvf's watchdog
    w.set(w.host, "enp1s0v1", up=True)
    w.set(w.host, "enp1s0v1", up=False)
    w.set(w.host, "enp1s0v1", master="bond0")  # down, up before
    w.await_active(w.host, "bond0", "")
    w.checkpoint("enslaved")
    vf_macs(w, "enp1s0")


@scenario("device", "bond")
def sriov_vf_enslaved_into_an_up_bond_pf_down(w: World) -> None:
    w.numvfs("enp1s0", 1)
    w.create(w.host, ab_bond("bond0", mac=NODE_BOND_MAC))
    w.set(w.host, "bond0", up=True)
    w.checkpoint("before")
    w.set(w.host, "enp1s0v0", master="bond0")  # refused: the unwind resets the VF
    w.checkpoint("enslaved")


@scenario("device")
def sriov_vf_addresses_at_probe_and_reset(w: World) -> None:
    w.numvfs("enp1s0", 2)
    w.checkpoint("probed, PF down")
    w.set(w.host, "enp1s0v0", mtu=1400)  # a reset
    w.set(w.host, "enp1s0v1", up=True)
    w.checkpoint("reset")
    w.numvfs("enp1s0", 0)
    w.numvfs("enp1s0", 2)
    w.checkpoint("made again")
    vf_macs(w, "enp1s0")


@scenario("device")
def sriov_vf_addresses_with_the_pf_up(w: World) -> None:
    w.set(w.host, "enp1s0", up=True)
    w.numvfs("enp1s0", 2)
    w.checkpoint("probed, PF up")
    vf_macs(w, "enp1s0")
    w.set_vf("enp1s0", 1, mac="02:00:00:00:0f:11")
    w.set(w.host, "enp1s0v1", mtu=1400)  # the reset takes the PF's address
    w.checkpoint("reset")
    w.numvfs("enp1s0", 0)
    w.numvfs("enp1s0", 2)
    w.checkpoint("made again")
    vf_macs(w, "enp1s0")


@scenario("device", "bond")
def sriov_vf_table_follows_the_vf_driver(w: World) -> None:
    """What the PF's VF table reports as a VF's MAC when the VF driver programs one."""
    w.set(w.host, "enp1s0", up=True)
    w.numvfs("enp1s0", 2)
    w.set(w.host, "enp1s0v0", up=True)  # open
    vf_macs(w, "enp1s0")
    w.set(w.host, "enp1s0v1", mtu=1400)  # a reset while down
    vf_macs(w, "enp1s0")
    w.set(w.host, "enp1s0v0", mac="02:00:00:00:0f:21")  # while up
    vf_macs(w, "enp1s0")
    w.set(w.host, "enp1s0v0", up=False)
    # its address given at creation: one set afterwards races udev's (NODE_BOND_MAC)
    w.create(w.host, ab_bond("bond0", miimon=0, mac="02:00:00:00:0f:b0"))
    w.set(w.host, "enp1s0v0", master="bond0")  # enslave: the bond's address
    vf_macs(w, "enp1s0")
    w.set(w.host, "enp1s0v0", master=0)  # release: its address back
    vf_macs(w, "enp1s0")
    w.checkpoint("released")


@scenario("device", "bond")
def sriov_vf_table_with_the_pf_down(w: World) -> None:
    w.numvfs("enp1s0", 1)
    w.set(w.host, "enp1s0v0", up=True)
    w.set(w.host, "enp1s0v0", mac="02:00:00:00:0f:31")
    vf_macs(w, "enp1s0")
    w.set(w.host, "enp1s0", up=True)  # the PF comes up with the VF up
    w.set(w.host, "enp1s0v0", mtu=1400)
    vf_macs(w, "enp1s0")


@scenario("device", "bond")
def sriov_vf_enslaved_into_a_down_bond_with_its_pf_up(w: World) -> None:
    w.set(w.host, "enp1s0", up=True)
    w.numvfs("enp1s0", 2)
    w.create(w.host, ab_bond("bond0", mac=NODE_BOND_MAC))
    w.set(w.host, "enp1s0v0", master="bond0")
    w.set(w.host, "enp1s0v1", master="bond0")
    w.checkpoint("enslaved into a down bond")
    w.set(w.host, "bond0", up=True)
    w.await_active(w.host, "bond0", "")


@scenario("bond", "dummy", "vlan")
def loopback_into_a_bond_with_slaves(w: World) -> None:
    a = w.ns("a")
    w.create(a, ab_bond("bond0"))
    w.create(a, LinkSpec(kind="dummy", name="d0"))
    w.set(a, "d0", master="bond0")
    w.set(a, "lo", master="bond0")  # another type than the bond's slaves
    w.create(a, ab_bond("bond1"))
    vlan(w, a, "bond1.5", "bond1", 5)
    w.set(a, "lo", master="bond1")  # lo is VLAN challenged, bond1 has a vlan
    w.create(a, ab_bond("bond2"))
    w.set(a, "lo", up=True)
    w.set(a, "lo", master="bond2")  # up
    w.set(a, "lo", master="bond0")


# -- what issue 30 added to the protocol: an ifindex asked for, fail_over_mac, ipvlan flags


def _options(w: World, ns: NsRef, name: str, **options: Any) -> None:
    """set_link_options on ``name``; the log holds the options the link shows after."""
    index = w.ifindex(ns, name)
    kind = options.pop("kind")

    def change() -> object:
        link = w.kernel.set_link_options(ns, index, LinkOptions(kind=kind, **options))
        bond = link.bond
        return [link.mode, link.ipvlan_flag, None if bond is None else bond.fail_over_mac]

    w.attempt(change, f"options {w.label_of(ns)}:{name} {options}")


def _shown(w: World, ns: NsRef, name: str) -> None:
    """What a dump shows of the added fields (and whether the ifindex is the asked one)."""

    def look() -> object:
        link = w.kernel.get_link(ns, name=name)
        if link is None:
            return None
        bond = link.bond
        asked = link.ifindex if link.ifindex >= ASKED_IFINDEX else "chosen by the kernel"
        return [link.ipvlan_flag, None if bond is None else bond.fail_over_mac, asked]

    w.attempt(look, f"look {w.label_of(ns)}:{name}")


ASKED_IFINDEX = 4000
"""The scenarios ask for ifindexes from here on; below, the kernel chose (and the model
numbers a veth's two ends in another order than Linux, which registers the peer first)."""


@scenario("veth", "macvlan")
def link_created_at_an_ifindex(w: World) -> None:
    a, b = w.ns("a"), w.ns("b")
    w.create(a, veth("v0", "v1", ifindex=4000))
    _shown(w, a, "v0")
    w.create(a, veth("v2", "v3", ifindex=4000))  # EEXIST: the namespace has it
    w.create(b, veth("b0", "b1", ifindex=4000))  # another namespace's own 4000
    _shown(w, b, "b0")
    macvlan(w, a, "m0", "v1", mode="bridge", ifindex=4001)
    _shown(w, a, "m0")
    w.create(a, veth("v4", "v5"))  # the next free index, whatever was asked before


@scenario("device", "veth", "macvlan")
def macvlan_at_an_ifindex_across_namespaces(w: World) -> None:
    """A macvlan sent in the PF's namespace and registered in the pod's: 6.1 and 6.12
    look an asked index up in the namespace the message went to (the PF's: EEXIST if it
    has the index), then find it taken only when registering in the pod's (EBUSY).
    Linux 6.14 and later look it up in the target namespace (the host's 6.18 does): not
    modelled, and kept off the netns tier by the PF (docs/fake-kernel-fidelity.md)."""
    pod = w.ns("pod")
    host_index = w.ifindex(w.host, "enp1s0")
    w.create(pod, macvlan_spec("m2", host_index, parent_ns=w.host, ifindex=host_index))
    w.create(pod, veth("t0", "t1", ifindex=5000))
    w.create(pod, macvlan_spec("m0", w.ifindex(w.host, "enp1s0"), parent_ns=w.host, ifindex=5000))
    w.create(pod, macvlan_spec("m1", w.ifindex(w.host, "enp1s0"), parent_ns=w.host, ifindex=5001))
    _shown(w, pod, "m1")


@scenario("veth", "bond")
def bond_fail_over_mac(w: World) -> None:
    # in a namespace of its own: udev, which gives a bond in the VM lab's node an
    # address of its own some time after it is made, watches only the node's
    a = w.ns("a")
    for policy in ("active", "follow"):
        bond = f"fom-{policy}"
        w.create(a, LinkSpec(kind="bond", name=bond, bond=ab_info(policy)))
        _shown(w, a, bond)
        for i in (0, 1):
            w.create(a, veth(f"{policy[:3]}{i}", f"{policy[:3]}{i}p"))
            w.set(a, f"{policy[:3]}{i}p", up=True)
            w.set(a, f"{policy[:3]}{i}", master=bond)
        _options(w, a, bond, kind="bond", fail_over_mac="none")  # ENOTEMPTY
        w.set(a, bond, up=True)
        w.await_active(a, bond, "")
        w.checkpoint(f"{policy}: enslaved, up")
        w.set(a, f"{policy[:3]}0p", up=False)  # the active slave loses its link
        w.await_active(a, bond, f"{policy[:3]}0")
        w.checkpoint(f"{policy}: failed over")
        w.set(a, f"{policy[:3]}1", master=0)
        w.checkpoint(f"{policy}: released")
    w.create(a, LinkSpec(kind="bond", name="fom-x", bond=ab_info("everything")))
    w.create(a, LinkSpec(kind="bond", name="fom-n", bond=ab_info("none")))
    _options(w, a, "fom-n", kind="bond", fail_over_mac="follow")
    _options(w, a, "fom-n", kind="bond", fail_over_mac="sideways")


@scenario("veth", "ipvlan")
def ipvlan_flags_are_the_ports(w: World) -> None:
    w.create(w.host, veth("low0", "low1"))
    low = w.ifindex(w.host, "low0")
    w.create(
        w.host, LinkSpec(kind="ipvlan", name="i0", parent=low, mode="l2", ipvlan_flag="private")
    )
    _shown(w, w.host, "i0")
    w.create(w.host, LinkSpec(kind="ipvlan", name="i1", parent=low, mode="l3", ipvlan_flag="vepa"))
    _shown(w, w.host, "i0")
    _options(w, w.host, "i0", kind="ipvlan", ipvlan_flag="bridge")
    _options(w, w.host, "i1", kind="ipvlan", mode="l2", ipvlan_flag="private")
    _options(w, w.host, "i1", kind="ipvlan", ipvlan_flag="both")
    w.create(w.host, LinkSpec(kind="ipvlan", name="i2", parent=low, ipvlan_flag="nope"))
    w.delete(w.host, "i0")
    w.delete(w.host, "i1")
    w.create(w.host, LinkSpec(kind="ipvlan", name="i3", parent=low))
    _shown(w, w.host, "i3")  # a new port: bridge again


def ab_info(policy: str) -> BondInfo:
    return BondInfo("active-backup", 100, fail_over_mac=policy)


def macvlan_spec(name: str, parent: int, parent_ns: NsRef, ifindex: int) -> LinkSpec:
    return LinkSpec(
        kind="macvlan",
        name=name,
        parent=parent,
        parent_ns=parent_ns,
        mode="bridge",
        ifindex=ifindex,
    )


def by_name(name: str) -> Scenario:
    return next(s for s in SCENARIOS if s.name == name)


def names() -> list[str]:
    return [s.name for s in SCENARIOS]


__all__ = ["SCENARIOS", "Scenario", "by_name", "names"]
