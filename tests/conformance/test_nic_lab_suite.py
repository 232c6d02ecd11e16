"""The conformance suite on a NIC lab's real kernel: the VM lab's guest (the vm tier; one
guest per session) and each SR-IOV host (the sriov tier), through their kernel agents.

Every check builds each of its hosts on a fresh lab session of the machine
(``AgentLab.session``: a node namespace of its own, in the rig's seeded start state);
sriov, bond and vlan get a session that lends the machine's PFs and VF 0 of each under
the example inventory's names (``AgentLab.lend_vfs``), and the targets take the VFs'
real PCI addresses from the session's inventory. The machine's own namespace and its
PFs' VF tables must end as they began.

Under TCG the full matrix (6 targets x 16 checks, the crash check a session per point)
does not fit the vm tier's budget, so by default a seeded subset runs, printed with its
seed: every check once, on a target it applies to (the least-used first), and the crash
check at a seeded every-k-th sample of the points. ``DRANP_VM_CONFORMANCE=all`` runs the
whole matrix and every crash point, on either tier (docs/conformance.md has the figures).
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance import CHECKS, LabFactory, NotApplicable, Target, project_targets
from conformance.target import example_target
from harness.crash import every_kth
from harness.scenarios import SEED_ENV, start_state_seed
from labs import AgentLab

SEED = start_state_seed()
MATRIX_ENV = "DRANP_VM_CONFORMANCE"
FULL = os.environ.get(MATRIX_ENV) == "all"
TARGETS = {t.name: t for t in [*project_targets(), example_target()]}
# Targets whose host holds VFs: a session lending the machine's PFs and VF 0 of each.
WITH_VFS = {"sriov", "bond", "vlan"}
# The capability a target's connect needs from the NIC: the vlan target's VLAN sits on
# a VF. On a NIC lacking it (igb: docs/vm-lab.md) every check that needs a connect to
# succeed cannot apply; these do not. The seeded subset is drawn before any lab exists,
# so it leaves such pairs out on every lab (the full matrix tries them where the NIC can).
NEEDS = {"vlan": "vlan_on_vf"}
CONNECTLESS = {"getinfo-identity", "authentication", "wrong-step-kind", "config-rejections"}
CRASH_SAMPLE = 3  # points of crash-at-every-boundary per run of it (FULL: every one)
TIMEOUT_S = 900


def applies(target: Target, check: str) -> bool:
    """What the check itself would say NotApplicable to, known without running it, and
    what the NIC cannot do (``NIC_REFUSES``): such pairs are not drawn."""
    if target.name in NEEDS and check not in CONNECTLESS:
        return False
    if check == "wrong-step-kind":
        return target.operation_only
    if check == "external-change":
        return target.tamper is not None
    return True


def seeded_subset(seed: int) -> list[tuple[str, str]]:
    """Every check once, on a seeded choice among the targets it applies to, the
    targets with the fewest checks so far first."""
    rng = random.Random(f"{seed}/vm/conformance")
    checks = list(CHECKS)
    rng.shuffle(checks)
    load: Counter[str] = Counter(dict.fromkeys(TARGETS, 0))
    chosen = []
    for check in checks:
        fits = [n for n, t in TARGETS.items() if applies(t, check)]
        least = min(load[n] for n in fits)
        plugin = rng.choice(sorted(n for n in fits if load[n] == least))
        load[plugin] += 1
        chosen.append((plugin, check))
    return sorted(chosen)


PAIRS = [(p, c) for p in TARGETS for c in CHECKS] if FULL else seeded_subset(SEED)
REPRODUCE = f"seed {SEED} ({SEED_ENV}={SEED}); " + (
    "the full matrix" if FULL else f"a seeded subset ({MATRIX_ENV}=all runs all)"
)


# The checks that leave a lent VF's settings in its PF's VF table on purpose; the PF
# outlives the session on the machine, so the test puts them back.
LEAVES_VF_SETTINGS = {
    "external-change": "the administrator's change is kept (the check proves it)",
    "lost-journal": "a journal that is gone cannot undo what it did: the cleanup is "
    "QUARANTINED and the kernel keeps the plugin's settings",
    "damaged-journal": "a corrupt journal answers nothing: the settings stay until repair",
}


def restore_vf_tables(nic_lab: AgentLab, tables: dict[str, Any]) -> None:
    """Put the PFs' VF tables back as ``tables`` (see ``LEAVES_VF_SETTINGS``)."""
    from plugins.kernel import VFChanges

    k = nic_lab.kernel
    host = k.host_namespace()
    for pf, vfs in tables.items():
        link = k.get_link(host, name=pf)
        assert link is not None
        for vf in vfs:
            changes = VFChanges(vlan=vf.vlan, qos=vf.qos, spoofchk=vf.spoofchk, trust=vf.trust)
            k.set_vf(host, link.ifindex, vf.vf_index, changes)
    # A VLAN set through an up PF resets the VF, which then tells the PF its address.
    nic_lab.unlearn_vf_addresses(tables)


@pytest.fixture(scope="module")
def lend(nic_lab: AgentLab) -> Iterator[dict[str, str]]:
    """The VFs exist before the machine is recorded; it ends as it began."""
    made = nic_lab.lend_vfs(1)
    print(f"\n{nic_lab.tier} conformance: {len(PAIRS)} checks, {REPRODUCE}: {PAIRS}")
    before, tables = nic_lab.kernel.snapshot(), nic_lab.vf_tables()
    yield made
    assert nic_lab.changes_since(before) == [], "the checks changed the machine"
    assert nic_lab.vf_tables() == tables, "the checks left a PF's VF table changed"


def test_the_subset_covers_every_check() -> None:
    assert {c for _, c in seeded_subset(SEED)} == set(CHECKS)
    assert seeded_subset(SEED) == seeded_subset(SEED), "the subset is not a function of the seed"


@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize(("plugin", "check"), PAIRS)
def test_conformance(
    plugin: str, check: str, nic_lab: AgentLab, lend: dict[str, str], tmp_path: Path
) -> None:
    lend_tables = nic_lab.vf_tables()
    target = TARGETS[plugin]
    lacks = nic_lab.lacks(NEEDS.get(plugin, ""))
    if lacks and check not in CONNECTLESS:
        pytest.skip(f"{nic_lab.tier} tier: {check} cannot apply to {plugin}: {lacks}")
    sessions: list[float] = []

    def make_lab() -> Any:
        opened = nic_lab.session(SEED, lend=lend if plugin in WITH_VFS else None)
        sessions.append(opened.open_seconds)
        return opened

    factory: LabFactory = make_lab
    started = time.monotonic()
    try:
        if check == "crash-at-every-boundary":

            def pick(points: list[str]) -> list[str]:
                if FULL:
                    return points
                offset = random.Random(f"{SEED}/vm/conformance/{plugin}").randrange(len(points))
                picked = every_kth(points, CRASH_SAMPLE, offset)
                print(f"\n{plugin}: crash at {len(picked)} of {len(points)} points: {picked}")
                return picked

            CHECKS[check](target, tmp_path, factory, pick=pick)  # type: ignore[call-arg]
        else:
            CHECKS[check](target, tmp_path, factory)
    except NotApplicable as exc:
        pytest.skip(f"{nic_lab.tier} tier: {check} does not apply to {plugin}: {exc}")
    finally:
        if check in LEAVES_VF_SETTINGS:
            restore_vf_tables(nic_lab, lend_tables)
        print(
            f"\n{nic_lab.tier} {plugin} {check}: {time.monotonic() - started:.1f} s, "
            f"{len(sessions)} sessions ({REPRODUCE})"
        )
