"""The NIC labs' crash samples, their full mode, and SIGKILL runs of services on a host.

Under TCG a crash run costs seconds, so the vm and sriov tiers crash a seeded sample of
the enumerated points (every k-th from an offset the seed draws: another seed, another
sample). ``RIG_CRASH_FULL=1`` crashes every enumerated point instead, on every path
(in-process and SIGKILL): hours of TCG, for a run outside CI.

On a host that runs the rig's services itself (``labs.OnHost``: the sriov tier), the
SIGKILL runs kill the real service process on the host in the middle of its own netlink
calls; they are counted as ``remote_sigkill_runs`` (also in ``crash_runs_sigkill``), and
those killed at a VF's move between namespaces (the sriov plugin's ``move_link``: into
the pod on ConnectNetwork, home on RemoveNetwork) as ``remote_vf_move_runs``. The
sample of a topology with VF moves always holds one at the move into the pod.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Sequence

from labs import PROJECT_SERVICES
from plugins.sdk.runner import CrashPoint

from .crash import every_kth
from .crash_log import CrashLog
from .process_rig import ProcessRig, service_of_point, sigkill_runs

__all__ = [
    "FULL_ENV",
    "SHARE",
    "full_mode",
    "moves_a_vf",
    "on_host_sigkill_runs",
    "sample_size",
    "seeded_sample",
]

FULL_ENV = "RIG_CRASH_FULL"
SHARE = 0.10  # what a seeded sample covers at least of a topology's points, on each path
VF_SERVICE = next(s.name for s in PROJECT_SERVICES if "sriov" in s.plugins)


def full_mode() -> bool:
    """``RIG_CRASH_FULL`` set (not empty, not 0): every point, on every path."""
    return os.environ.get(FULL_ENV, "") not in ("", "0")


def sample_size(total: int, wanted: int) -> int:
    """How many of ``total`` points a sample crashes: all in full mode, else ``wanted``
    and at least ``SHARE`` of them."""
    if full_mode():
        return total
    return min(total, max(wanted, math.ceil(total * SHARE)))


def moves_a_vf(topology: str, point: CrashPoint) -> bool:
    """At a VF's move between namespaces (either side of the sriov plugin's ``move_link``)."""
    return point.phase.boundary == "move_link" and service_of_point(topology, point) == VF_SERVICE


def seeded_sample(
    topology: str, points: Sequence[CrashPoint], wanted: int, seed: str
) -> list[CrashPoint]:
    """``sample_size`` of ``points``: every k-th from an offset ``seed`` draws; a
    topology with VF moves keeps one at a move into the pod (the seed picks which,
    replacing the sample's nearest point), in the points' order."""
    rng = random.Random(seed)
    size = sample_size(len(points), wanted)
    picked = every_kth(list(points), size, rng.randrange(len(points) or 1))
    moves_in = [p for p in points if p.hook == "ConnectNetwork" and moves_a_vf(topology, p)]
    if moves_in and not any(p in moves_in for p in picked):
        move = rng.choice(moves_in)
        at = points.index(move)
        nearest = min(picked, key=lambda p: abs(points.index(p) - at))
        picked = sorted({*picked, move} - {nearest}, key=points.index)
    return picked


def on_host_sigkill_runs(
    rig: ProcessRig,
    topology: str,
    points: list[CrashPoint],
    log: CrashLog,
    reference: list[CrashPoint],
) -> list[str]:
    """``sigkill_runs`` on a rig whose services run on the lab's host, counted as such."""
    failures = sigkill_runs(rig, topology, points, log, reference)
    log.add("remote_sigkill_runs", len(points))
    log.add("remote_vf_move_runs", sum(moves_a_vf(topology, p) for p in points))
    return failures
