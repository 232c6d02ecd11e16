"""The fake lab in one process, for the rig's crash enumeration: a ``labs.Node`` of the
three services' runners and the coordinator on the kernel model.

The node starts from a random state (every device's admin state, MTU, MAC and VF
settings, foreign links in the host and in the pod), the same for the same seed, so the
reference run and every crash run of a topology start alike, and a restore bug cannot
hide behind the kernel's defaults.
"""

from __future__ import annotations

from pathlib import Path

from labs import DEFAULT_LAB, SANDBOX, FakeModelLab, Node
from plugins.sdk.runner import NO_CRASH, CrashPoints

__all__ = ["DEFAULT_LAB", "SANDBOX", "in_process_node"]


def in_process_node(
    root: Path,
    lab: Path = DEFAULT_LAB,
    crash: CrashPoints | None = None,
    *,
    start_seed: int | None = None,
    coordinator_crash: CrashPoints = NO_CRASH,
) -> Node:
    """``start_seed``: the seed of the starting state (None: the rig's, RIG_SEED);
    ``coordinator_crash``: the coordinator's crash plan (``NO_CRASH``: none)."""
    return Node(
        FakeModelLab(lab, start_seed=start_seed),
        root,
        crash=crash,
        coordinator_crash=coordinator_crash,
    )
