"""Pieces of the random-schedule rig: an armable crash primitive, a node that always
uses it, and the two attachments of the schedules as replayable step lists.

Every identity (operation, scope, attachment) is derived from the attachment's
*incarnation*: once an incarnation is fully removed its scopes are fenced forever,
so attaching again is a new incarnation with new ids, as a coordinator would do.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from plugins.effects.linux._common import temp_name
from plugins.sdk import (
    AllocationBinding,
    CleanupRequest,
    CleanupResponse,
    ConnectRequest,
    Grant,
    Hook,
    PreparedState,
    PrepareRequest,
    ResourceHandle,
)
from plugins.sdk.runner import (
    CrashPoint,
    CrashPoints,
    EffectContext,
    Phase,
    PhaseKind,
    SimulatedCrash,
)
from tests.effects.node import (
    BOND_CONFIG,
    VF0,
    VF1,
    VF_CONFIG,
    VLAN_CONFIG,
    FakeNode,
    envelope,
)

SHARE_CONFIG = {"mode": "bridge", "mtu": 1500}


@dataclass(frozen=True)
class AtPhase:
    """Which points an arming counts: a side of a commit (``boundary``), a side of the
    ``call``-th kernel call of an effect, or (no ``kind``) any point at all."""

    kind: PhaseKind | None = None
    boundary: str = ""
    call: int = 0

    def matches(self, point: CrashPoint) -> bool:
        phase = point.phase
        if self.kind is None:
            return True
        if phase.kind is not self.kind:
            return False
        if phase.kind.is_kernel_call:
            return phase.call == self.call
        return phase.boundary == self.boundary


ANY_POINT = AtPhase()


class ArmableCrashPoints(CrashPoints):
    """CrashPoints that can be armed by the kind of point and an occurrence count.

    ``arm(AtPhase(PhaseKind.AFTER_COMMIT, Commit.ADVANCE), 2)`` crashes at the second
    point reached from now on at that phase; then it disarms itself (one crash per arming).
    """

    def __init__(self) -> None:
        super().__init__()
        self.pattern: AtPhase | None = None
        self.remaining = 0
        self.fired: CrashPoint | None = None

    def arm(self, pattern: AtPhase, occurrence: int) -> None:
        self.pattern, self.remaining, self.fired = pattern, occurrence, None

    def hit(self, phase: Phase | str) -> None:
        super().hit(phase)
        if self.pattern is None:
            return
        point = self.reached[-1]
        if self.pattern.matches(point):
            self.remaining -= 1
            if self.remaining <= 0:
                self.pattern, self.fired = None, point
                raise SimulatedCrash(str(point))


class RigNode(FakeNode):
    """A FakeNode whose every incarnation (after ``crash()`` too) has armable crash points."""

    def crash_plan(self) -> ArmableCrashPoints:
        return ArmableCrashPoints()

    @property
    def crash_points(self) -> ArmableCrashPoints:
        points = self.services.crash_points
        assert isinstance(points, ArmableCrashPoints)
        return points


def owned_names(partition: str, operation_id: str, effect_id: str, scope: str) -> tuple[str, str]:
    """(ifalias marker, temporary name) a link created by that effect carries: the
    ownership evidence of ``plugins.effects.linux`` (the marker starts with the scope's
    evidence prefix, so the scope is part of it)."""
    ctx = EffectContext(partition, operation_id, effect_id, scope, "", {})
    return ctx.marker, temp_name(ctx)


@dataclass
class Step:
    name: str
    create: bool
    undoes: str  # for a cleanup step, the create step it removes; for a create, itself
    call: Callable[[], Any]
    ready: Callable[[], bool] = lambda: True  # can the request be built (inputs known)?


@dataclass
class VfSpec:
    root: str
    attributes: dict[str, str]
    ifname: str


VFS = (VfSpec("vf0", VF0, "net1"), VfSpec("vf1", VF1, "net2"))


@dataclass
class Attachment:
    """One incarnation's progress through its step list, and what the kernel may show."""

    label: str
    node: FakeNode
    gen: int
    steps: list[Step] = field(default_factory=list)
    pos: int = 0
    results: dict[str, Any] = field(default_factory=dict)
    attempted: set[str] = field(default_factory=set)  # create steps ever started
    succeeded: set[str] = field(default_factory=set)  # create steps that returned
    cleanup_attempted: set[str] = field(default_factory=set)  # removal requested (maybe fenced)
    cleaned: set[str] = field(default_factory=set)  # create steps whose cleanup said CLEANED
    # marker -> create step, and temporary name -> create step, for links this incarnation owns
    owned: dict[str, str] = field(default_factory=dict)
    vfs: dict[str, str] = field(default_factory=dict)  # VF PCI address -> its connect step
    # VF PCI address -> the names it has in the sandbox: temporary, then assigned
    vf_sandbox_names: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def creates(self) -> int:
        return sum(1 for s in self.steps if s.create)

    @property
    def forward(self) -> bool:
        return self.pos < self.creates

    @property
    def started(self) -> bool:
        return self.pos > 0 or bool(self.attempted)

    @property
    def done(self) -> bool:
        return self.pos >= len(self.steps)

    def live(self, create_step: str) -> bool:
        """Possibly present in the kernel: started, and not yet confirmed removed."""
        return create_step in self.attempted and create_step not in self.cleaned

    def step_named(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)


def chain(node: FakeNode, gen: int) -> Attachment:
    """(A) blueprint 10.1: two VFs, a bond over them and a VLAN on the bond."""
    a = Attachment("A", node, gen)
    att = f"att-A{gen}"
    r = a.results

    def claim(v: VfSpec) -> str:
        """Preparation scope and allocation root id: ``<claim>.<step>``, as the coordinator."""
        return f"claim-A{gen}.{v.root}"

    def allocation(v: VfSpec) -> AllocationBinding:
        return dataclasses.replace(node.allocation(claim(v), v.attributes), device=v.root)

    def prepare(v: VfSpec) -> PreparedState:
        req = PrepareRequest(
            envelope(Hook.NODE_PREPARE, f"prep-{claim(v)}", claim(v), v.root),
            allocation(v),
            json.dumps(VF_CONFIG),
        )
        return node.endpoints["sriov"].node_prepare(req).prepared_state

    def connect(v: VfSpec) -> ResourceHandle:
        req = ConnectRequest(
            envelope(Hook.CONNECT_NETWORK, f"conn-{v.root}-{att}", att, v.root),
            node.pod,
            json.dumps(VF_CONFIG),
            interface_names={"interface": v.ifname},
            prepared=r[f"prepare-{v.root}"],
            allocation=allocation(v),
        )
        (handle,) = node.endpoints["sriov"].connect_network(req).outputs["interface"]
        return handle

    def bond() -> ResourceHandle:
        members = (r["connect-vf0"], r["connect-vf1"])
        req = ConnectRequest(
            envelope(Hook.CONNECT_NETWORK, f"conn-bond0-{att}", att, "bond0"),
            node.pod,
            json.dumps(BOND_CONFIG),
            inputs={"members": members},
            interface_names={"interface": "bond0"},
            grants=tuple(Grant("linux/attach-member/v1", m.id) for m in members),
        )
        (handle,) = node.endpoints["bond"].connect_network(req).outputs["interface"]
        return handle

    def vlan() -> ResourceHandle:
        req = ConnectRequest(
            envelope(Hook.CONNECT_NETWORK, f"conn-vlan-{att}", att, "data-vlan"),
            node.pod,
            json.dumps(VLAN_CONFIG),
            inputs={"parent": (r["connect-bond"],)},
            interface_names={"interface": "data0"},
            grants=(Grant("linux/create-vlan/v1", r["connect-bond"].id),),
        )
        (handle,) = node.endpoints["vlan"].connect_network(req).outputs["interface"]
        return handle

    def remove(plugin: str, step: str) -> Callable[[], CleanupResponse]:
        req = CleanupRequest(envelope(Hook.REMOVE_NETWORK, f"remove-{att}-{step}", att, step))
        return lambda: node.endpoints[plugin].remove_network(req)

    def unprepare(v: VfSpec) -> Callable[[], CleanupResponse]:
        req = CleanupRequest(envelope(Hook.NODE_UNPREPARE, f"unprep-{claim(v)}", claim(v), v.root))
        return lambda: node.endpoints["sriov"].node_unprepare(req)

    vf0, vf1 = VFS
    a.steps = [
        Step("prepare-vf0", True, "prepare-vf0", lambda: prepare(vf0)),
        Step("prepare-vf1", True, "prepare-vf1", lambda: prepare(vf1)),
        Step("connect-vf0", True, "connect-vf0", lambda: connect(vf0), lambda: "prepare-vf0" in r),
        Step("connect-vf1", True, "connect-vf1", lambda: connect(vf1), lambda: "prepare-vf1" in r),
        Step(
            "connect-bond",
            True,
            "connect-bond",
            bond,
            lambda: "connect-vf0" in r and "connect-vf1" in r,
        ),
        Step("connect-vlan", True, "connect-vlan", vlan, lambda: "connect-bond" in r),
        Step("remove-vlan", False, "connect-vlan", remove("vlan", "data-vlan")),
        Step("remove-bond", False, "connect-bond", remove("bond", "bond0")),
        Step("remove-vf1", False, "connect-vf1", remove("sriov", "vf1")),
        Step("remove-vf0", False, "connect-vf0", remove("sriov", "vf0")),
        Step("unprepare-vf1", False, "prepare-vf1", unprepare(vf1)),
        Step("unprepare-vf0", False, "prepare-vf0", unprepare(vf0)),
    ]
    for partition, op, effect, step in (
        ("bond/v1alpha1", f"conn-bond0-{att}", "create-bond", "connect-bond"),
        ("vlan/v1alpha1", f"conn-vlan-{att}", "create-child", "connect-vlan"),
    ):
        for evidence in owned_names(partition, op, effect, att):
            a.owned[evidence] = step
    for v in VFS:
        pci = v.attributes["pciAddress"]
        a.vfs[pci] = f"connect-{v.root}"
        temp = owned_names("sriov/v1alpha1", f"conn-{v.root}-{att}", "move-vf.move", att)[1]
        a.vf_sandbox_names[pci] = (temp, v.ifname)
    return a


def share(node: FakeNode, gen: int) -> Attachment:
    """(B) a macvlan child of the shared parent enp3s0f2, in its own attachment."""
    b = Attachment("B", node, gen)
    att, root = f"att-B{gen}", "mv0"
    claim = f"claim-B{gen}.{root}"  # preparation scope and root id, as the coordinator
    r = b.results

    def prepare() -> PreparedState:
        req = PrepareRequest(
            envelope(Hook.NODE_PREPARE, f"prep-{claim}", claim, root),
            node.share("macvlan", claim),
            json.dumps(SHARE_CONFIG),
        )
        return node.endpoints["macvlan"].node_prepare(req).prepared_state

    def connect() -> ResourceHandle:
        req = ConnectRequest(
            envelope(Hook.CONNECT_NETWORK, f"conn-{root}-{att}", att, root),
            node.pod,
            json.dumps(SHARE_CONFIG),
            interface_names={"interface": "sec0"},
            prepared=r["prepare-mv0"],
            allocation=node.share("macvlan", claim),
        )
        (handle,) = node.endpoints["macvlan"].connect_network(req).outputs["interface"]
        return handle

    remove_req = CleanupRequest(envelope(Hook.REMOVE_NETWORK, f"remove-{att}-{root}", att, root))
    unprep_req = CleanupRequest(envelope(Hook.NODE_UNPREPARE, f"unprep-{claim}", claim, root))
    b.steps = [
        Step("prepare-mv0", True, "prepare-mv0", prepare),
        Step("connect-mv0", True, "connect-mv0", connect, lambda: "prepare-mv0" in r),
        Step(
            "remove-mv0",
            False,
            "connect-mv0",
            lambda: node.endpoints["macvlan"].remove_network(remove_req),
        ),
        Step(
            "unprepare-mv0",
            False,
            "prepare-mv0",
            lambda: node.endpoints["macvlan"].node_unprepare(unprep_req),
        ),
    ]
    for evidence in owned_names("macvlan/v1alpha1", f"conn-{root}-{att}", "create-child", att):
        b.owned[evidence] = "connect-mv0"
    return b
