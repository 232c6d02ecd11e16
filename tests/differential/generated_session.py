"""A generated differential session: the fake and a real kernel in lockstep.

``Session`` runs each step on both worlds, observes both whole states after it (one
snapshot of the guest per step), counts agreement, and on a divergence records it
(its signature and the steps since the last reset), puts both worlds back to their
baseline and goes on: a divergence never ends a session. ``run_session`` drives it
with ``GeneratedRun``, a Hypothesis rule-based state machine whose rules draw steps
from the fake's state only, so the same seed gives the same steps as long as the
two kernels behave the same (the seed of each batch of examples derives from the
session's). Hypothesis does not shrink here (a failing example would replay on the
guest for minutes): shrinking is ``generated_shrink``'s bounded ddmin.
"""

from __future__ import annotations

import difflib
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

from plugins.kernel import FAIL_OVER_MAC

from .generated import (
    Signature,
    Step,
    describe,
    field_classes,
    resolve_from_last_observation,
    run_step,
    signature_of,
)
from .world import GUEST_PFS, HOST, World, dumps

# Each batch of examples is one run_state_machine_as_test with its own derived seed.
EXAMPLES_PER_BATCH = 20
STEPS_PER_EXAMPLE = 60
LABELS = ("a", "b")
PFS = ("enp1s0", "enp1s0", "enp2s0")  # twice: most sequences share a PF's VFs
TEMPLATES = {
    "dummy": "dum%d",
    "bond": "bond%d",
    "vlan": "vlan%d",
    "veth": "veth%d",
    "macvlan": "mv%d",
    "ipvlan": "ipv%d",
    "bridge": "br%d",
}
FIXED = {
    "dummy": ("d0", "d1"),
    "bond": ("bond0", "b1"),
    "vlan": ("vl0", "vl1"),
    "veth": ("ve0", "ve1"),
    "macvlan": ("mv0", "mv1"),
    "ipvlan": ("ipv0", "ipv1"),
    "bridge": ("br0", "br1"),
}
# bonds, VLANs and dummies to bond, twice as likely as the rest
KINDS = ("dummy", "dummy", "bond", "bond", "vlan", "vlan", "veth", "macvlan", "ipvlan", "bridge")
MTUS = (68, 67, 1280, 1500, 9000, 9216, 65536)
# A link at an asked ifindex (LinkSpec.ifindex), in the lab's namespaces only: 1 is
# always lo's (EEXIST), the other no counter reaches in a session. The host's ifindexes
# are not comparable (the guest boots with links the model has not, and numbers its
# VFs on from there), so an index there could be free on one side only.
IFINDEXES = (1, 1_000_000)
# what a create gives (None: not given, the kernel's default)
FAIL_OVER_MAC_AT_CREATION = (None, None, "active", "follow", "none")
IPVLAN_FLAG_AT_CREATION = (None, None, "private", "vepa", "bridge")
MACS = ("02:00:00:00:00:01", "02:00:00:00:00:02", "03:00:00:00:00:01", "00:00:00:00:00:00")
VF_CHANGES: dict[str, tuple[Any, ...]] = {
    "mac": ("02:00:00:00:01:01", "02:00:00:00:01:02", "00:00:00:00:00:00", "03:00:00:00:01:01"),
    "vlan": (0, 5, 100, 4095, 4096),
    "qos": (0, 3),
    "spoofchk": (True, False),
    "trust": (True, False),
    "min_tx_rate": (0, 10),
    "max_tx_rate": (0, 100),
    "link_state": ("auto", "enable", "disable"),
}
VF_NAME = re.compile(r"enp\ds0v\d+$")  # a VF as the lab names it (udev: <pf>v<index>)
BOND_MODES = ("active-backup", "balance-rr", "802.3ad", "balance-xor")


@dataclass
class Divergence:
    signature: Signature
    trace: list[Step]  # from the last reset through the step that diverged
    outcomes: tuple[str, str]  # fake, linux
    count: int = 1


@dataclass
class Figures:
    """What a session counted; ``classes`` counts steps whose states differ by class."""

    steps: int = 0
    outcome_agree: int = 0
    state_agree: int = 0
    resets: int = 0
    classes: Counter[str] = field(default_factory=Counter)
    guest_s: float = 0.0  # the steps and their snapshots in the guest
    guest_call_s: float = 0.0  # of which the calls (the rest: the snapshots)
    fake_s: float = 0.0
    reset_s: float = 0.0

    def lines(self, release: str) -> list[str]:
        n = max(self.steps, 1)
        out = [
            f"generated: {release}: {self.steps} steps, outcome agreement "
            f"{100 * self.outcome_agree / n:.2f} % ({self.outcome_agree}), outcome+state "
            f"agreement {100 * self.state_agree / n:.2f} % ({self.state_agree}), "
            f"{self.resets} resets",
            f"generated: guest {1000 * self.guest_s / n:.1f} ms/step (call "
            f"{1000 * self.guest_call_s / n:.1f} + snapshot "
            f"{1000 * (self.guest_s - self.guest_call_s) / n:.1f}; "
            f"{self.steps / max(self.guest_s, 1e-9):.1f} steps/s), fake "
            f"{1000 * self.fake_s / n:.1f} ms/step, resets {self.reset_s:.1f} s in all",
        ]
        if self.classes:
            per = ", ".join(f"{c} {k}" for k, c in self.classes.most_common())
            out.append(f"generated: steps whose state differs, by field class: {per}")
            agree = ", ".join(
                f"{k} {100 * (n - c) / n:.2f} %" for k, c in self.classes.most_common()
            )
            out.append(f"generated: agreement by field class (every other class 100 %): {agree}")
        return out


class Session:
    """Lockstep runs on two worlds made by ``make_fake`` and ``make_real``; ``log``
    gets every step with both outcomes, and every divergence."""

    def __init__(
        self,
        make_fake: Callable[[], World],
        make_real: Callable[[], World],
        *,
        steps: int,
        log: Callable[[str], None],
        seconds: float | None = None,
    ) -> None:
        self.make_fake, self.make_real = make_fake, make_real
        self.budget = steps
        # a wall-clock budget too (a long session that must end by a given time)
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.log = log
        self.figures = Figures()
        self.divergences: dict[Signature, Divergence] = {}
        self.trace: list[Step] = []
        self.error: BaseException | None = None
        self.fake: World | None = None
        self.real: World | None = None

    @property
    def done(self) -> bool:
        if self.deadline is not None and time.monotonic() > self.deadline:
            return True
        return self.error is not None or self.figures.steps >= self.budget

    def start(self) -> None:
        """Both worlds at their baseline (a fresh fake, the guest put back), observed."""
        if self.fake is not None and not self.trace:
            return  # nothing was done since the last reset
        started = time.monotonic()
        self.close()
        self.fake, self.real = self.make_fake(), self.make_real()
        views = self.fake.observe(full=True), self.real.observe(full=True)
        if views[0] != views[1]:
            raise AssertionError(
                f"the baselines differ before any step: {sorted(field_classes(*views))}"
            )
        self.trace = []
        self.figures.resets += 1
        self.figures.reset_s += time.monotonic() - started

    def close(self) -> None:
        for world in (self.fake, self.real):
            if world is not None:
                world.close()
        self.fake = self.real = None

    def step(self, step: Step) -> None:
        """Run ``step`` on both; an error (not a divergence) ends the session."""
        if self.done:
            return
        try:
            self._step(step)
        except BaseException as exc:
            self.error = exc

    def _step(self, step: Step) -> None:
        fake, real = self.fake, self.real
        assert fake is not None
        assert real is not None
        f = self.figures
        t0 = time.monotonic()
        fake_outcome = run_step(fake, step, resolve_from_last_observation)
        fake_view = fake.observe(full=True)
        t1 = time.monotonic()
        real_outcome = run_step(real, step, resolve_from_last_observation)
        t_call = time.monotonic()
        real_view = real.observe(full=True)
        t2 = time.monotonic()
        f.fake_s += t1 - t0
        f.guest_s += t2 - t1
        f.guest_call_s += t_call - t1
        f.steps += 1
        self.trace.append(step)
        outcomes = (fake_outcome, real_outcome)
        f.outcome_agree += fake_outcome == real_outcome
        f.state_agree += fake_outcome == real_outcome and fake_view == real_view
        if fake_view != real_view:
            f.classes.update(field_classes(fake_view, real_view))
        sig = signature_of(step, outcomes, (fake_view, real_view))
        self.log(f"step {f.steps}: {describe(step)} -> fake {fake_outcome}, linux {real_outcome}")
        if sig is None:
            return
        known = self.divergences.get(sig)
        if known is None:
            self.divergences[sig] = Divergence(sig, list(self.trace), outcomes)
            self.log(f"divergence (new): {sig} after {len(self.trace)} steps since a reset")
            self.log(view_diff(fake_view, real_view))
        else:
            known.count += 1
            if len(self.trace) < len(known.trace):
                known.trace = list(self.trace)  # a shorter start for shrinking
        self.start()


def view_diff(fake: dict[str, Any], real: dict[str, Any], limit: int = 60) -> str:
    """The two whole states' difference (- fake, + linux), at most ``limit`` lines."""
    lines = list(
        difflib.unified_diff(
            dumps(fake).splitlines(), dumps(real).splitlines(), "fake", "linux", lineterm="", n=8
        )
    )
    more = [f"... {len(lines) - limit} more lines"] if len(lines) > limit else []
    return "\n".join(lines[:limit] + more)


def batch_seed(seed: int, batch: int) -> int:
    return random.Random(f"{seed}/{batch}").getrandbits(64)


def run_session(session: Session, seed: int) -> None:
    """Batches of Hypothesis examples until the session's step budget is spent; each
    example starts from the baseline. Raises what ended the session early, if anything."""
    batch = 0
    try:
        while not session.done:
            machine = machine_class(session)
            hypothesis.seed(batch_seed(seed, batch))(machine)
            run_state_machine_as_test(machine, settings=BATCH_SETTINGS)
            batch += 1
    finally:
        session.close()
    if session.error is not None:
        raise session.error


BATCH_SETTINGS = settings(
    max_examples=EXAMPLES_PER_BATCH,
    stateful_step_count=STEPS_PER_EXAMPLE,
    deadline=None,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
    derandomize=False,
    print_blob=False,
)


# Every rule draws the same fixed list of numbers whatever the state, and reads its
# choices from them (modulo the options the fake's state offers): Hypothesis demands
# that the same choices draw the same way in every run, and a step's options depend
# on the state, which depends on the guest (a divergence resets both worlds).
CHOICES = st.lists(st.integers(0, 1 << 16), min_size=12, max_size=12)


class Picks:
    """Choices read in order from one rule's numbers."""

    def __init__(self, numbers: list[int]) -> None:
        self._numbers = numbers
        self._next = 0

    def index(self, n: int) -> int:
        value = self._numbers[self._next % len(self._numbers)]
        self._next += 1
        # Hypothesis favours small numbers and bounds; a multiplicative hash spreads
        # them over the options (0 stays 0: the simplest choice stays the first option).
        return ((value * 0x9E3779B1) >> 11) % n

    def pick(self, options: Any) -> Any:
        options = list(options)
        return options[self.index(len(options))]

    def flip(self) -> bool:
        return self.index(2) == 1


@dataclass
class _Examples:
    """Hypothesis's first example of a batch is its simplest (every number 0: one step
    repeated); it is left out."""

    seen: int = 0

    @property
    def first(self) -> bool:
        return self.seen == 1


def machine_class(session: Session) -> type[RuleBasedStateMachine]:
    """The rule-based state machine bound to ``session`` (a class per session: no state
    shared between sessions)."""
    examples = _Examples()

    class GeneratedRun(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            examples.seen += 1
            if not session.done and not examples.first:
                try:
                    session.start()
                except BaseException as exc:
                    session.error = exc

        # -- what the fake has now (the guest agrees, or the last step reset both) -------

        def _links(self, label: str) -> dict[str, str]:
            fake = session.fake
            return {} if fake is None else fake.last_kind.get(label, {})

        def _labels(self) -> list[str]:
            return [] if session.fake is None else session.fake.labels()

        def _pick(self, data: Picks, options: Any) -> Any:
            return data.pick(options)

        def _some_link(
            self, data: Picks, label: str, vf_bias: bool = True, keep: tuple[str, ...] = ()
        ) -> str:
            """A link of ``label``, VFs twice as likely; none of ``keep`` in the host (the
            guest's reset puts back neither a renamed or moved PF nor the host's lo)."""
            links = self._links(label)
            names = sorted(n for n in links if label != HOST or n not in keep) or ["gone0"]
            vfs = [n for n, k in links.items() if k == "device" and VF_NAME.match(n)]
            return str(self._pick(data, names + (vfs * 2 if vf_bias else [])))

        def _label(self, data: Picks) -> str:
            labels = self._labels()
            return str(self._pick(data, [HOST, HOST, *labels[1:]]))

        # -- the rules ----------------------------------------------------------------------

        @initialize(c=CHOICES)
        def vfs(self, c: list[int]) -> None:
            """Most sequences start with VFs on enp1s0 (the interactions issue 30 found
            sit there); the sriov rule adds, removes and sets them later."""
            data = Picks(c)
            if session.done or examples.first:
                return
            count = self._pick(data, (2, 2, 3, 0))
            if count:
                session.step({"op": "numvfs", "pf": "enp1s0", "count": count})

        @rule(c=CHOICES)
        def namespace(self, c: list[int]) -> None:
            data = Picks(c)
            if session.done or examples.first:
                return
            live = self._labels()
            absent = [label for label in LABELS if label not in live]
            if absent and (len(absent) == len(LABELS) or data.flip()):
                session.step({"op": "ns_add", "ns": self._pick(data, absent)})
            else:
                session.step({"op": "ns_del", "ns": self._pick(data, live[1:])})

        @rule(c=CHOICES)
        def create(self, c: list[int]) -> None:
            data = Picks(c)
            if session.done or examples.first:
                return
            label = self._label(data)
            kind = str(self._pick(data, KINDS))
            taken = sorted(self._links(label))[:3]
            name = self._pick(data, ["", TEMPLATES[kind], *FIXED[kind], *taken])
            step: Step = {"op": "create", "ns": label, "kind": kind, "name": name}
            if kind in ("vlan", "macvlan", "ipvlan"):
                step["parent"] = self._some_link(data, label)
            if kind == "vlan":
                step["vlan_id"] = self._pick(data, (5, 5, 100, 4094, 4095, 0))
            elif kind == "macvlan":
                step["mode"] = self._pick(data, ("bridge", "private", "vepa", "passthru"))
            elif kind == "ipvlan":
                step["mode"] = self._pick(data, ("l2", "l3", "l3s"))
                flag = self._pick(data, IPVLAN_FLAG_AT_CREATION)
                if flag is not None:
                    step["ipvlan_flag"] = flag
            elif kind == "bond":
                step["bond_mode"] = self._pick(data, BOND_MODES)
                step["miimon"] = self._pick(data, (100, 0))
                policy = self._pick(data, FAIL_OVER_MAC_AT_CREATION)
                if policy is not None:
                    step["fail_over_mac"] = policy
            elif kind == "veth":
                peer = self._pick(data, (None, "", "vp0", "veth%d"))
                if peer is not None:
                    step["peer"] = peer
                others = [x for x in self._labels() if x != label]
                if others and data.flip():
                    step["peer_ns"] = self._pick(data, others)
            if data.index(8) == 0:
                step["mtu"] = self._pick(data, MTUS)
            if label != HOST and data.index(4) == 0:
                step["ifindex"] = self._pick(data, IFINDEXES)
            session.step(step)

        @rule(c=CHOICES)
        def set_link(self, c: list[int]) -> None:
            data = Picks(c)
            if session.done or examples.first:
                return
            label = self._label(data)
            what = self._pick(data, ("up", "up", "down", "mtu", "mac", "name", "alias"))
            keep = ("lo", *GUEST_PFS) if what == "name" else ("lo",)
            link = self._some_link(data, label, keep=keep)
            value: Any
            if what in ("up", "down"):
                what, value = "up", what == "up"
            elif what == "mtu":
                value = self._pick(data, MTUS)
            elif what == "mac":
                value = self._pick(data, MACS)
            elif what == "name":
                value = self._pick(data, ("r0", "ren%d", "dum%d", "lo", "x%d%d"))
            else:
                value = self._pick(data, ("alias", ""))
            session.step({"op": "set", "ns": label, "link": link, "changes": {what: value}})

        @rule(c=CHOICES)
        def enslave(self, c: list[int]) -> None:
            data = Picks(c)
            if session.done or examples.first:
                return
            label = self._label(data)
            links = self._links(label)
            slave = self._some_link(data, label)
            if label != HOST and data.index(6) == 0:
                slave = "lo"  # lo's enslave errors (issue 30's list): a namespace's lo is down
            masters = [n for n, k in links.items() if k in ("bond", "bridge")]
            master = self._pick(data, ["", *sorted(masters) * 2, "lo"])
            session.step({"op": "set", "ns": label, "link": slave, "changes": {"master": master}})

        @rule(c=CHOICES)
        def remove(self, c: list[int]) -> None:
            data = Picks(c)
            if session.done or examples.first:
                return
            label = self._label(data)
            link = self._some_link(data, label, vf_bias=False, keep=("lo", *GUEST_PFS))
            others = [x for x in self._labels() if x != label]
            if not others or data.flip():
                session.step({"op": "delete", "ns": label, "link": link})
                return
            step: Step = {"op": "move", "ns": label, "link": link, "to": self._pick(data, others)}
            new_name = self._pick(data, (None, "m0", "mv%d"))
            if new_name is not None:
                step["new_name"] = new_name
            session.step(step)

        @rule(c=CHOICES)
        def options(self, c: list[int]) -> None:
            data = Picks(c)
            if session.done or examples.first:
                return
            label = self._label(data)
            links = self._links(label)
            step: Step
            choices = [n for n, k in links.items() if k in ("bond", "macvlan", "ipvlan")]
            if not choices:  # nothing to change options of: a bond to change them of later
                name = self._pick(data, ("", "bond%d", "bond0"))
                mode = self._pick(data, BOND_MODES)
                step = {"op": "create", "ns": label, "kind": "bond", "name": name}
                session.step({**step, "bond_mode": mode, "miimon": 100})
                return
            link = self._pick(data, sorted(choices))
            kind = links[link]
            step = {"op": "options", "ns": label, "link": link, "kind": kind}
            if kind == "macvlan":
                step["mode"] = self._pick(data, ("bridge", "private", "vepa", "passthru"))
            elif kind == "ipvlan":
                if data.flip():
                    step["mode"] = self._pick(data, ("l2", "l3", "l3s"))
                else:
                    step["ipvlan_flag"] = self._pick(data, ("private", "vepa", "bridge"))
            else:
                step["kind"] = "bond"
                what = self._pick(data, ("bond_mode", "miimon_ms", "active_slave", "fail_over_mac"))
                if what == "bond_mode":
                    step[what] = self._pick(data, BOND_MODES)
                elif what == "miimon_ms":
                    step[what] = self._pick(data, (0, 100))
                elif what == "fail_over_mac":
                    step[what] = self._pick(data, FAIL_OVER_MAC)
                else:
                    slaves = sorted(n for n in links if n != link)
                    step[what] = self._pick(data, ["", *slaves[:4]])
            session.step(step)

        @rule(c=CHOICES)
        def sriov(self, c: list[int]) -> None:
            data = Picks(c)
            if session.done or examples.first:
                return
            pf = str(self._pick(data, PFS))
            if data.index(3) == 0:
                session.step({"op": "numvfs", "pf": pf, "count": self._pick(data, (0, 1, 2, 3))})
                return
            what = str(self._pick(data, sorted(VF_CHANGES)))
            changes = {what: self._pick(data, VF_CHANGES[what])}
            vf = self._pick(data, (0, 0, 1, 2, 7))
            session.step({"op": "set_vf", "pf": pf, "vf": vf, "changes": changes})

    return GeneratedRun
