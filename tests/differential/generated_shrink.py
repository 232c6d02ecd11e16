"""Shrinking a generated divergence to a minimal sequence, and writing it as a
regression scenario.

``shrink`` is ddmin (Zeller's delta debugging) over the steps since the last reset:
a candidate subsequence is replayed on a fresh fake and the guest put back to its
baseline, both observed after each step, until the first divergence; it reproduces
when that divergence has the target's signature (``Signature.matched_by``). Each
replay costs a reset and its steps in the guest, so the search stops at a deadline
and returns the smallest reproducing sequence found so far.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

from .generated import (
    Signature,
    Step,
    kinds_of,
    resolve_from_last_observation,
    run_step,
    signature_of,
)
from .world import World


def first_divergence(
    make_fake: Callable[[], World], make_real: Callable[[], World], steps: list[Step]
) -> tuple[int, Signature] | None:
    """Where replaying ``steps`` on fresh worlds first diverges, and how."""
    fake, real = make_fake(), make_real()
    try:
        fake.observe(full=True)
        real.observe(full=True)
        for i, step in enumerate(steps):
            outcomes = (
                run_step(fake, step, resolve_from_last_observation),
                run_step(real, step, resolve_from_last_observation),
            )
            sig = signature_of(step, outcomes, (fake.observe(full=True), real.observe(full=True)))
            if sig is not None:
                return i, sig
        return None
    finally:
        fake.close()
        real.close()


def shrink(
    make_fake: Callable[[], World],
    make_real: Callable[[], World],
    steps: list[Step],
    target: Signature,
    seconds: float,
) -> list[Step]:
    """A short sequence that still diverges as ``target`` does (ddmin, at most
    ``seconds``), cut after its diverging step; ``steps`` itself if none is found."""
    deadline = time.monotonic() + seconds

    def reproduces(candidate: list[Step]) -> list[Step] | None:
        found = first_divergence(make_fake, make_real, candidate)
        if found is None or not found[1].matched_by(target):
            return None
        return candidate[: found[0] + 1]

    best = reproduces(steps) or steps
    n = 2
    while len(best) >= 2 and time.monotonic() < deadline:
        chunk = max(1, len(best) // n)
        parts = [best[i : i + chunk] for i in range(0, len(best), chunk)]
        reduced = False
        for i in range(len(parts)):
            if time.monotonic() >= deadline:
                break
            # the complement of one part first (removing steps), then the part alone
            complement = [s for j, part in enumerate(parts) if j != i for s in part]
            for candidate in (complement, parts[i]):
                shorter = reproduces(candidate) if candidate else None
                if shorter is not None and len(shorter) < len(best):
                    best, reduced = shorter, True
                    break
            if reduced:
                break
        if reduced:
            n = max(n - 1, 2)
        elif chunk == 1:
            break
        else:
            n = min(len(best), n * 2)
    return best


def regression_source(
    signature: Signature,
    steps: list[Step],
    release: str,
    seed: int,
    number: int,
    mutant: str | None = None,
) -> str:
    """A regression scenario for tests/differential/regressions.py (``mutant``: the
    mutant of the model the run was against, tests/differential/mutants.py)."""
    against = "" if mutant is None else f", against the model's mutant {mutant}"
    series = "".join(re.findall(r"\d+", release)[:2])
    slug = re.sub(r"[^a-z0-9]+", "_", f"{signature.op} {signature.aspect}".lower()).strip("_")
    name = f"generated_{series}_{slug}"[:70] + f"_{number}"
    kinds = ", ".join(json.dumps(k) for k in kinds_of(steps))
    body = "\n".join(f"            {s!r}," for s in steps)
    return (
        f"@regression({signature!r}, {kinds})\n"
        f"def {name}(w: World) -> None:\n"
        f'    """{signature}.\n\n'
        f"    Shrunk from a generated run on {release} (seed {seed}{against}).\n"
        f'    """\n'
        f"    replay(\n"
        f"        w,\n"
        f"        [\n{body}\n        ],\n"
        f"    )\n"
    )
