"""The differential corpus: scenarios run unchanged on the fake kernel and on real Linux.

Each scenario declares the link kinds it creates (``veth``, ``macvlan`` and
``bridge`` exist on every kernel we run on; ``bond``, ``vlan``, ``ipvlan`` and
``dummy`` need modules some hosts lack). Scenarios look links up by name
(``world.ifindex``), never by an ifindex a backend returned, so one backend
failing a call shows up as a different log, not as a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from plugins.kernel import BondInfo, LinkKind, LinkSpec, NsRef

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
            w.attempt(lambda ref=ref: w.kernel.list_links(ref), f"links of {w.label_of(ref)}")
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


def by_name(name: str) -> Scenario:
    return next(s for s in SCENARIOS if s.name == name)


def names() -> list[str]:
    return [s.name for s in SCENARIOS]


__all__ = ["SCENARIOS", "Scenario", "by_name", "names"]
