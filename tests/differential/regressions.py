"""Regression scenarios shrunk from generated differential runs (generated_shrink).

Each one is a minimal sequence of generated steps after which the fake and a real
kernel diverged, kept in the corpus with the divergence's signature (what
test_generated_session matches a new divergence against) and, in its docstring, the
kernel release and seed it came from. They declare "device" (they came from the VM
lab and may use its PFs), so they run in the vm tier, like the corpus's SR-IOV
scenarios; one the model still gets wrong is listed in known_divergences.py.
"""

from __future__ import annotations

from collections.abc import Callable

from plugins.kernel import LinkKind

from .generated import Signature, replay
from .scenarios import Run, scenario
from .world import World

# regression scenario name -> the divergences it reproduces
REGRESSIONS: dict[str, tuple[Signature, ...]] = {}


def regression(
    signature: Signature | tuple[Signature, ...], *kinds: LinkKind
) -> Callable[[Run], Run]:
    """Register the scenario in the corpus, with the divergence(s) it reproduces."""
    signatures = signature if isinstance(signature, tuple) else (signature,)

    def register(fn: Run) -> Run:
        REGRESSIONS[fn.__name__] = signatures
        return scenario(*kinds)(fn)

    return register


@regression(Signature("set_vf spoofchk", "outcome", ("fake EINVAL", "linux EOPNOTSUPP")), "device")
def generated_61_set_vf_spoofchk_without_vfs(w: World) -> None:
    """Spoof checking set on a VF of a PF that has none: EOPNOTSUPP, not EINVAL.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 30).
    """
    replay(w, [{"op": "set_vf", "pf": "enp1s0", "vf": 0, "changes": {"spoofchk": False}}])


@regression(Signature("create ipvlan (name)", "state", ("perm_mac",)), "device", "ipvlan")
def generated_61_ipvlan_has_its_parents_permanent_address(w: World) -> None:
    """An ipvlan reports a permanent address, its parent's address when it was made
    (ipvlan_init copies the address and leaves addr_assign_type NET_ADDR_PERM, so
    register_netdevice copies it to perm_addr); the model reports none.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 1).
    """
    replay(
        w,
        [
            {
                "op": "create",
                "ns": "host",
                "kind": "ipvlan",
                "name": "ipv0",
                "parent": "enp1s0",
                "mode": "l2",
            },
        ],
    )


@regression(
    (
        Signature("set_vf max_tx_rate", "outcome", ("fake EINVAL", "linux ok")),
        Signature("set_vf min_tx_rate", "outcome", ("fake EINVAL", "linux ok")),
    ),
    "device",
)
def generated_61_vf_rate_with_the_pf_down(w: World) -> None:
    """igb sets a VF rate while its PF is down: it asks for the port's link status
    (STATUS.LU), which QEMU's igb keeps from the PF's first link to the end of the boot
    (the VM lab opens each PF once at boot: vm-igb.yaml's ``link_kept``), and a max rate
    of at most the link speed it saw, none while down (igb_down zeroes link_speed): so
    0 is taken and 100 refused. The model refused any rate while the PF was down.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 1): `set_vf min_tx_rate 0` and
    `max_tx_rate 0` on a down PF, EINVAL in the fake.
    """
    replay(
        w,
        [
            {"op": "numvfs", "pf": "enp1s0", "count": 2},
            {"op": "set_vf", "pf": "enp1s0", "vf": 0, "changes": {"max_tx_rate": 0}},
            {"op": "set_vf", "pf": "enp1s0", "vf": 1, "changes": {"min_tx_rate": 0}},
            {"op": "set_vf", "pf": "enp1s0", "vf": 0, "changes": {"max_tx_rate": 100}},
            {"op": "set_vf", "pf": "enp1s0", "vf": 0, "changes": {"min_tx_rate": 10}},
        ],
    )


@regression(
    Signature("set master", "outcome", ("fake EADDRNOTAVAIL", "linux EPERM")), "device", "bond"
)
def generated_61_the_hosts_lo_is_up(w: World) -> None:
    """The guest's root namespace has its ``lo`` up (virtme-ng's init opens it), so
    enslaving it is refused for being up (EPERM) before lo's address is looked at; the
    model's lo was down (EADDRNOTAVAIL). vm-igb.yaml's ``host_loopback_up``.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 30).
    """
    replay(
        w,
        [
            {
                "op": "create",
                "ns": "host",
                "kind": "bond",
                "name": "bond0",
                "bond_mode": "balance-rr",
                "miimon": 100,
            },
            {"op": "set", "ns": "host", "link": "lo", "changes": {"master": "bond0"}},
        ],
    )


@regression(Signature("options bond bond_mode", "state", ("bond.miimon_ms",)), "device", "bond")
def generated_61_bond_mode_change_turns_the_mii_monitor_on(w: World) -> None:
    """A bond without MII monitoring switched to a mode that has no ARP monitoring
    (802.3ad, balance-tlb, balance-alb) gets miimon 100 (bond_option_mode_set:
    BOND_DEFAULT_MIIMON); the model kept 0.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 30).
    """
    replay(
        w,
        [
            {
                "op": "create",
                "ns": "host",
                "kind": "bond",
                "name": "bond0",
                "bond_mode": "active-backup",
                "miimon": 100,
            },
            {"op": "options", "ns": "host", "link": "bond0", "kind": "bond", "miimon_ms": 0},
            {
                "op": "options",
                "ns": "host",
                "link": "bond0",
                "kind": "bond",
                "bond_mode": "802.3ad",
            },
            {"op": "options", "ns": "host", "link": "bond0", "kind": "bond", "miimon_ms": 0},
            {
                "op": "options",
                "ns": "host",
                "link": "bond0",
                "kind": "bond",
                "bond_mode": "balance-rr",
            },
        ],
    )


@regression(
    Signature("set master", "outcome", ("fake EADDRNOTAVAIL", "linux ok")), "device", "bond"
)
def generated_61_a_vf_keeps_its_own_address_while_its_pf_is_down(w: World) -> None:
    """A VF whose PF set its address may still take another one while the PF is down:
    igb reads the VFs' mailboxes in its interrupt, so the request goes unanswered and
    igbvf keeps the address it asked for (only an answered NACK refuses it,
    e1000_rar_set_vf). An active-backup bond sets its second slave's address; the
    model refused it (EADDRNOTAVAIL) whatever the PF's state.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 30).
    """
    replay(
        w,
        [
            {"op": "numvfs", "pf": "enp1s0", "count": 2},
            {
                "op": "create",
                "ns": "host",
                "kind": "bond",
                "name": "bond0",
                "bond_mode": "active-backup",
                "miimon": 100,
                "mac": "02:00:00:00:0b:01",
            },
            {"op": "set", "ns": "host", "link": "enp1s0v0", "changes": {"master": "bond0"}},
            {"op": "set_vf", "pf": "enp1s0", "vf": 1, "changes": {"mac": "02:00:00:00:01:01"}},
            {"op": "set", "ns": "host", "link": "enp1s0v1", "changes": {"master": "bond0"}},
        ],
    )


@regression(
    Signature("create veth (name)", "outcome", ("fake EEXIST", "linux EINVAL")), "device", "veth"
)
def generated_61_veth_checks_its_mtu_before_the_name(w: World) -> None:
    """A veth asked for with a taken name and an MTU above 65535 is EINVAL: veth's
    ops->validate checks the MTU before rtnl_newlink finds the name taken (NLM_F_EXCL:
    EEXIST). Only once the veth module is loaded: before, there is no validate and the
    answer is EEXIST, so the guest's agent loads the link modules at boot
    (``labs._guest.load_link_modules``) and the model has them loaded.

    Shrunk from a generated run on 6.12.118+deb12-amd64 (seed 30); seen on 6.1 too.
    """
    replay(
        w,
        [
            {
                "op": "create",
                "ns": "host",
                "kind": "veth",
                "name": "enp1s0",
                "peer": "vp0",
                "mtu": 65536,
            },
            {
                "op": "create",
                "ns": "host",
                "kind": "veth",
                "name": "enp1s0",
                "peer": "vp0",
                "mtu": 1500,
            },
        ],
    )


@regression(
    Signature("set master", "outcome", ("fake EADDRNOTAVAIL", "linux ok")), "device", "bond"
)
def generated_612_lo_into_an_empty_bond(w: World) -> None:
    """A namespace's ``lo`` (down) enslaved into an empty bond: 6.1 refuses its all-zero
    address (EADDRNOTAVAIL), 6.12 enslaves it (the bond takes lo's type). The model
    follows 6.1; listed for 6.12 in known_divergences.py.

    Shrunk from a generated run on 6.12.118+deb12-amd64 (seed 30).
    """
    replay(
        w,
        [
            {"op": "ns_add", "ns": "b"},
            {
                "op": "create",
                "ns": "b",
                "kind": "bond",
                "name": "bond0",
                "bond_mode": "active-backup",
                "miimon": 100,
            },
            {"op": "set", "ns": "b", "link": "lo", "changes": {"master": "bond0"}},
        ],
    )


@regression(
    Signature("set master", "state", ("bond.active_slave", "device.perm_mac", "perm_mac")),
    "device",
    "bond",
)
def generated_61_a_pf_enslaved_into_a_down_bond_has_no_link_yet(w: World) -> None:
    """A PF enslaved into a down active-backup bond with MII monitoring is not its active
    slave: the enslave opens it, its port autonegotiates (QEMU's igb: 500 ms) so it has
    no carrier at enslave, and a down bond's monitor does not run. The model gave the PF
    link at once (profile ``port_link_after_open``). (The permanent-address classes of
    the run were udev's address for a bond made in the node, which this scenario avoids
    by giving the bond one.)

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 1).
    """
    replay(
        w,
        [
            {
                "op": "create",
                "ns": "host",
                "kind": "bond",
                "name": "bond0",
                "bond_mode": "active-backup",
                "miimon": 100,
                "mac": "02:00:00:00:0b:03",
            },
            {"op": "set", "ns": "host", "link": "enp1s0", "changes": {"master": "bond0"}},
        ],
    )


# -- from runs against the mutants of the model (mutants.py): each behaviour of issue 30's
# list, found and shrunk by a generated session against the model as it was before.


@regression(
    Signature("create dummy (no name)", "outcome", ("fake EINVAL", "linux ok")), "device", "dummy"
)
def generated_61_a_link_without_a_name_gets_one(w: World) -> None:
    """A dummy created with no name: rtnl_newlink_create names it "dummy%d", and the
    smallest free number wins (dummy0); the model refused (EINVAL).

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 1, against the model's mutant kernel_chosen_names).
    """
    replay(w, [{"op": "create", "ns": "host", "kind": "dummy", "name": "", "mtu": 68}])


@regression(
    Signature("create bond (template)", "outcome", ("fake EINVAL", "linux ok")), "device", "bond"
)
def generated_61_a_name_template_takes_the_next_free_number(w: World) -> None:
    """A bond created as "bond%d" is bond0 (__dev_alloc_name); the model refused. (Its
    address is given here, as in the other scenarios that make a bond in the node:
    udev gives one an address of its name when it comes to it.)

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 1, against the model's mutant kernel_chosen_names).
    """
    replay(
        w,
        [
            {
                "op": "create",
                "ns": "host",
                "kind": "bond",
                "name": "bond%d",
                "bond_mode": "active-backup",
                "miimon": 100,
                "mac": "02:00:00:00:0b:04",
            }
        ],
    )


@regression(
    Signature("create vlan (no name)", "outcome", ("fake EINVAL", "linux ok")), "device", "vlan"
)
def generated_61_a_vlan_without_a_name_is_vlan0(w: World) -> None:
    """A VLAN created with no name on a PF: vlan0 (the kind's template), not
    "<parent>.<id>" (that name is iproute2's, not the kernel's); the model refused.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 1, against the model's mutant kernel_chosen_names).
    """
    replay(
        w,
        [
            {
                "op": "create",
                "ns": "host",
                "kind": "vlan",
                "name": "",
                "parent": "enp2s0",
                "vlan_id": 4094,
            }
        ],
    )


@regression(Signature("move", "outcome", ("fake EINVAL", "linux ok")), "device")
def generated_61_a_move_to_a_template_is_named_in_its_new_namespace(w: World) -> None:
    """A VF moved into another namespace under "mv%d" is mv0 there (the template is
    resolved in the target, dev_change_net_namespace); the model refused.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 1, against the model's mutant kernel_chosen_names).
    """
    replay(
        w,
        [
            {"op": "numvfs", "pf": "enp1s0", "count": 3},
            {"op": "ns_add", "ns": "b"},
            {"op": "move", "ns": "host", "link": "enp1s0v1", "to": "b", "new_name": "mv%d"},
        ],
    )


@regression(Signature("set name", "outcome", ("fake EINVAL", "linux ok")), "device")
def generated_61_a_rename_to_a_template_takes_the_next_free_number(w: World) -> None:
    """A VF renamed to "dum%d" becomes dum0 (dev_change_name allocates it); the model
    refused.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 1, against the model's mutant kernel_chosen_names).
    """
    replay(
        w,
        [
            {"op": "numvfs", "pf": "enp1s0", "count": 3},
            {"op": "set", "ns": "host", "link": "enp1s0v0", "changes": {"name": "dum%d"}},
        ],
    )


@regression(
    Signature("create ipvlan (name)", "outcome", ("fake EEXIST", "linux EINVAL")),
    "device",
    "ipvlan",
)
def generated_61_a_create_at_an_index_checks_the_kind_before_the_name(w: World) -> None:
    """An ipvlan named "lo" over lo, asked at an ifindex: EINVAL (ipvlan refuses lo as its
    lower). With an ifindex, rtnl_newlink looks the link up by that index alone, so the
    taken name is found only by register_netdevice, after the kind's own checks; the
    model looked the name up first (EEXIST), as Linux does when no index is asked.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 14, against the model's mutant
    loopback_enslave; the divergence is not the mutant's).
    """
    replay(
        w,
        [
            {"op": "ns_add", "ns": "b"},
            {
                "op": "create",
                "ns": "b",
                "kind": "ipvlan",
                "name": "lo",
                "parent": "lo",
                "mode": "l2",
                "ipvlan_flag": "vepa",
                "ifindex": 1000000,
            },
        ],
    )


@regression(
    Signature("set master", "outcome", ("fake EADDRNOTAVAIL", "linux EINVAL")),
    "device",
    "bond",
    "dummy",
)
def generated_61_lo_into_a_bond_with_slaves_is_another_type(w: World) -> None:
    """A namespace's lo (down) into a bond that has a slave: EINVAL, lo's device type
    (ARPHRD_LOOPBACK) differs from the slaves' (bond_enslave); the model answered
    EADDRNOTAVAIL, as for an empty bond.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 14, against the model's mutant loopback_enslave).
    """
    replay(
        w,
        [
            {"op": "ns_add", "ns": "b"},
            {
                "op": "create",
                "ns": "b",
                "kind": "bond",
                "name": "bond0",
                "bond_mode": "balance-xor",
                "miimon": 100,
            },
            {"op": "create", "ns": "b", "kind": "dummy", "name": "d1"},
            {"op": "set", "ns": "b", "link": "d1", "changes": {"master": "bond0"}},
            {"op": "set", "ns": "b", "link": "lo", "changes": {"master": "bond0"}},
        ],
    )


@regression(
    Signature("set master", "outcome", ("fake EADDRNOTAVAIL", "linux EINVAL")), "device", "bond"
)
def generated_61_lo_into_an_empty_8023ad_bond(w: World) -> None:
    """A namespace's lo into an empty 802.3ad bond: EINVAL ("8023AD mode requires
    Ethernet devices": bond_enslave refuses a first slave of another type in 802.3ad
    before the bond takes its type, so the bond keeps its max MTU); the model answered
    EADDRNOTAVAIL, as for an empty bond of another mode. Measured on the guest with lo
    at MTU 67 and 65536, miimon 100 and 0: the same.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 30, CI's session: 48 steps,
    by hand to these).
    """
    replay(
        w,
        [
            {"op": "ns_add", "ns": "b"},
            {
                "op": "create",
                "ns": "b",
                "kind": "bond",
                "name": "",
                "bond_mode": "802.3ad",
                "miimon": 100,
            },
            {"op": "set", "ns": "b", "link": "lo", "changes": {"master": "bond0"}},
        ],
    )


@regression(
    Signature("create vlan (template)", "outcome", ("fake ok", "linux EINVAL")), "device", "vlan"
)
def generated_61_a_vlan_on_a_vf_its_pf_does_not_answer(w: World) -> None:
    """A VLAN on a new VF whose PF is down: EINVAL. igbvf asks its PF for the VLAN
    filter through the mailbox (igbvf_vlan_rx_add_vid), and a PF that is down, or has
    not answered the VF since it was made, does not answer; the model without the
    mailbox created the VLAN.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 2, against the model's mutant no_vf_mailbox).
    """
    replay(
        w,
        [
            {"op": "numvfs", "pf": "enp2s0", "count": 2},
            {
                "op": "create",
                "ns": "host",
                "kind": "vlan",
                "name": "vlan%d",
                "parent": "enp2s0v0",
                "vlan_id": 5,
            },
        ],
    )


@regression(Signature("set master", "outcome", ("fake ok", "linux EINVAL")), "device", "bridge")
def generated_612_a_vf_into_a_bridge_its_pf_does_not_answer(w: World) -> None:
    """A new VF whose PF has not answered it, made a bridge port: EINVAL. br_add_if
    gives every port the bridge's default PVID (nbp_vlan_init: VLAN 1), which reaches
    igbvf's VLAN filter through the mailbox as a VLAN on the VF does
    (``generated_61_a_vlan_on_a_vf_its_pf_does_not_answer``); the model enslaved it.

    Shrunk from a generated run on 6.12.118+deb12-amd64 by hand (seed 2, step 1,642 of
    the 20,000-step session, 28 steps after a reset: the VF made, a bridge made, the VF
    made its port). Replayed on a fresh guest with the fixed model, the 28 steps agree.
    """
    replay(
        w,
        [
            {"op": "numvfs", "pf": "enp2s0", "count": 2},
            {"op": "create", "ns": "host", "kind": "bridge", "name": "br0"},
            {"op": "set", "ns": "host", "link": "enp2s0v0", "changes": {"master": "br0"}},
        ],
    )


@regression(Signature("set mac", "outcome", ("fake EADDRNOTAVAIL", "linux ok")), "device", "bond")
def generated_612_an_active_backup_bond_with_fail_over_mac_keeps_its_address(w: World) -> None:
    """An address set on an active-backup bond with fail_over_mac: success, and nothing
    changes, even for an address no device may have (bond_set_mac_address returns 0
    before looking at it, so that ifenslave does not fail); the model refused the
    multicast address (EADDRNOTAVAIL).

    Shrunk from a generated run on 6.12.118+deb12-amd64 (seed 2, step 9,202 of the
    20,000-step session: 22 steps to 3).
    """
    replay(
        w,
        [
            {
                "op": "create",
                "ns": "host",
                "kind": "bond",
                "name": "bond%d",
                "bond_mode": "active-backup",
                "miimon": 100,
            },
            {
                "op": "options",
                "ns": "host",
                "link": "bond0",
                "kind": "bond",
                "fail_over_mac": "follow",
            },
            {"op": "set", "ns": "host", "link": "bond0", "changes": {"mac": "03:00:00:00:00:01"}},
        ],
    )


@regression(
    Signature("create vlan (no name)", "outcome", ("fake ok", "linux EINVAL")), "device", "macvlan"
)
def generated_612_a_vlan_on_a_macvlan_over_a_vf_its_pf_does_not_answer(w: World) -> None:
    """A VLAN on a macvlan whose lower device is a new VF its PF has not answered:
    EINVAL. The macvlan passes the VLAN id to its lower device
    (macvlan_vlan_rx_add_vid), and igbvf asks its PF through the mailbox; the model
    looked at the macvlan alone and created it.

    Shrunk from a generated run on 6.12.118+deb12-amd64 by hand (seed 2, step 17,324 of
    the 20,000-step session, 43 steps after a reset). Replayed on a fresh guest with the
    fixed model, the 43 steps agree.
    """
    replay(
        w,
        [
            {"op": "numvfs", "pf": "enp1s0", "count": 2},
            {
                "op": "create",
                "ns": "host",
                "kind": "macvlan",
                "name": "mv0",
                "parent": "enp1s0v0",
                "mode": "bridge",
            },
            {
                "op": "create",
                "ns": "host",
                "kind": "vlan",
                "name": "",
                "parent": "mv0",
                "vlan_id": 5,
            },
        ],
    )


@regression(Signature("set master", "outcome", ("fake EINVAL", "linux ok")), "device", "bond")
def generated_612_a_bond_that_went_up_with_a_refusing_slave_has_no_vlan_0(w: World) -> None:
    """A VF its PF has not answered, enslaved into an up bond whose VLAN 0 never got in:
    accepted. 8021q adds VLAN 0 as the bond goes up, which fails when a slave (a VF
    without its PF's answer) refuses it, so the bond has no VLAN ids for the new slave
    to refuse (vlan_vids_add_by_dev); the model gave every up bond VLAN 0 and refused
    the VF (EINVAL). ``BondState.vid0`` now remembers whether the add went in.

    Shrunk from a generated run on 6.12.118+deb12-amd64 (seed 2, step 11,548 of the
    20,000-step session: 31 steps to 12).
    """
    replay(
        w,
        [
            {"op": "numvfs", "pf": "enp1s0", "count": 2},
            {"op": "set", "ns": "host", "link": "lo", "changes": {"master": ""}},
            {"op": "set_vf", "pf": "enp1s0", "vf": 7, "changes": {"link_state": "auto"}},
            {
                "op": "create",
                "ns": "host",
                "kind": "bond",
                "name": "bond%d",
                "bond_mode": "802.3ad",
                "miimon": 100,
            },
            {"op": "set", "ns": "host", "link": "enp1s0v1", "changes": {"master": "bond0"}},
            {
                "op": "options",
                "ns": "host",
                "link": "bond0",
                "kind": "bond",
                "fail_over_mac": "follow",
            },
            {
                "op": "options",
                "ns": "host",
                "link": "bond0",
                "kind": "bond",
                "bond_mode": "balance-xor",
            },
            {"op": "numvfs", "pf": "enp2s0", "count": 3},
            {"op": "set", "ns": "host", "link": "ren0", "changes": {"up": False}},
            {"op": "set", "ns": "host", "link": "bond0", "changes": {"up": True}},
            {"op": "set_vf", "pf": "enp1s0", "vf": 0, "changes": {"qos": 3}},
            {"op": "set", "ns": "host", "link": "enp2s0v2", "changes": {"master": "bond0"}},
        ],
    )


@regression(
    Signature("create macvlan (name)", "outcome", ("fake ok", "linux EINVAL")),
    "device",
    "bond",
    "ipvlan",
    "macvlan",
)
def generated_61_a_macvlan_on_an_ipvlan_is_refused(w: World) -> None:
    """A macvlan on an ipvlan: EINVAL. An ipvlan is IFF_NO_RX_HANDLER, so
    macvlan_port_create's netdev_rx_handler_register refuses it; the model made the
    macvlan.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 1, the 20,000-step session of
    2026-12-06: 33 steps to 3).
    """
    replay(
        w,
        [
            {
                "op": "create",
                "ns": "host",
                "kind": "bond",
                "name": "d1",
                "bond_mode": "802.3ad",
                "miimon": 0,
                "fail_over_mac": "none",
            },
            {
                "op": "create",
                "ns": "host",
                "kind": "ipvlan",
                "name": "ipv1",
                "parent": "d1",
                "mode": "l2",
                "ipvlan_flag": "vepa",
            },
            {
                "op": "create",
                "ns": "host",
                "kind": "macvlan",
                "name": "mv1",
                "parent": "ipv1",
                "mode": "passthru",
            },
        ],
    )


@regression(
    Signature("options bond active_slave", "outcome", ("fake ok", "linux EINVAL")), "device", "bond"
)
def generated_61_an_active_slave_needs_one_before_it(w: World) -> None:
    """The active slave of a down active-backup bond set to its only slave: EINVAL.
    bond_option_active_slave_set changes the active slave only from another one, to a
    slave whose link the bond sees up and which is running with carrier; a down bond
    has none. The model took any slave that was up.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 1, the 20,000-step session of
    2026-12-06: 45 steps to 6).
    """
    replay(
        w,
        [
            {
                "op": "create",
                "ns": "host",
                "kind": "bond",
                "name": "",
                "bond_mode": "active-backup",
                "miimon": 100,
            },
            {"op": "numvfs", "pf": "enp2s0", "count": 3},
            {"op": "set", "ns": "host", "link": "enp2s0v0", "changes": {"master": "bond0"}},
            {"op": "set", "ns": "a", "link": "lo", "changes": {"up": True}},
            {"op": "set_vf", "pf": "enp2s0", "vf": 1, "changes": {"qos": 3}},
            {
                "op": "options",
                "ns": "host",
                "link": "bond0",
                "kind": "bond",
                "active_slave": "enp2s0v0",
            },
        ],
    )
