"""A long generated differential session on the VM lab (``scripts/fidelity-session``).

Boots the guest of ``--kernel``, runs ``--steps`` generated steps in lockstep with the
model of the same lab (``--seed``; printed), prints the agreement figures, and for
each distinct divergence shrinks its steps (ddmin, bounded by ``--shrink-seconds``
in all) and writes it as a regression scenario to ``--regressions`` (to review and
move into tests/differential/regressions.py). Every step goes to ``--log``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labs.vm import KERNELS, VmLab

from .generated import Step, logged_trace, udev_only, vf_address_timing
from .generated_session import Session, run_session
from .generated_shrink import first_divergence, regression_source, shrink
from .mutants import MUTANTS, Mutant
from .world import GUEST_PFS, GuestBaseline, VmWorld


@contextlib.contextmanager
def prepared_guest(lab: VmLab) -> Iterator[GuestBaseline]:
    """The guest with no VFs (as the corpus's ``guest`` fixture has it), put back after."""
    kernel = lab.kernel
    found = {pf: kernel.sriov(pf)["numvfs"] for pf in GUEST_PFS}
    for pf, count in found.items():
        if count:
            kernel.set_sriov_numvfs(pf, 0)
    try:
        yield GuestBaseline(kernel)
    finally:
        for pf, count in found.items():
            if count:
                kernel.set_sriov_numvfs(pf, count)


def make_session(
    lab: VmLab,
    guest: GuestBaseline,
    steps: int,
    log: Callable[[str], None],
    seconds: float | None = None,
    mutant: Mutant | None = None,
) -> Session:
    return Session(
        guest.fake_world if mutant is None else lambda: mutant.world(guest),
        lambda: VmWorld(lab.kernel, guest),
        steps=steps,
        log=log,
        seconds=seconds,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/fidelity-session", description=__doc__)
    parser.add_argument("--kernel", choices=sorted(KERNELS), default="6.1")
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--log", type=Path, default=None, help="every step (default: none)")
    parser.add_argument("--shrink-seconds", type=float, default=900.0)
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="stop stepping after this long (default: no limit)",
    )
    parser.add_argument(
        "--shrink-logged",
        action="append",
        default=[],
        metavar="LOG:STEP",
        help="run no session: replay the steps since the reset before step STEP of a "
        "session's --log (a step that diverged, 'divergence (new)'), and shrink what it "
        "gives on this guest (repeatable)",
    )
    parser.add_argument("--regressions", type=Path, default=None, metavar="FILE")
    parser.add_argument("--json", type=Path, default=None, help="the figures, as JSON")
    parser.add_argument(
        "--cpus",
        type=int,
        default=1,
        help="the guest's vCPUs (default 1: a long session's guest with two stalled under "
        "TCG, one with one ran 20,000 steps; docs/vm-lab.md, 'Guests that stop')",
    )
    parser.add_argument(
        "--mutant",
        action="append",
        default=[],
        metavar="NAME[:SEED]",
        help="run this mutant of the model (tests/differential/mutants.py) against the guest, "
        f"with its own seed if given (repeatable: one session each, one boot); {sorted(MUTANTS)}",
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, not {args.steps}")
    if args.cpus < 1:
        parser.error(f"--cpus must be at least 1, not {args.cpus}")
    seed = random.SystemRandom().getrandbits(32) if args.seed is None else args.seed
    runs = [_mutant(parser, spec, seed) for spec in args.mutant] or [(None, seed)]
    sink = args.log.open("w", buffering=1) if args.log is not None else None
    started = time.monotonic()

    def log(line: str) -> None:
        if sink is not None:
            sink.write(line + "\n")
        if line.startswith("divergence"):
            print(f"  [{time.monotonic() - started:7.0f} s] {line}", flush=True)

    logged = [_logged(parser, spec) for spec in args.shrink_logged]
    lab = VmLab(args.kernel, cpus=args.cpus)
    try:
        with prepared_guest(lab) as guest:
            print(f"generated: guest {guest.release} booted in {lab.boot_seconds:.0f} s")
            if logged:
                fresh = make_session(lab, guest, 0, log, mutant=runs[0][0])
                sources = shrink_logged(fresh, logged, guest.release, seed, runs[0][0], args)
                if args.regressions is not None:
                    args.regressions.write_text("\n\n".join(sources))
                return 0
            results: list[SessionResult] = []
            for mutant, run_seed in runs:
                results.append(one_session(lab, guest, mutant, run_seed, args, log))
                if results[-1].ended is not None:
                    break  # the guest died: the sessions after need it
            if args.regressions is not None:
                args.regressions.write_text("\n\n".join(s for r in results for s in r.sources))
            if args.json is not None:
                figures = [r.figures for r in results]
                args.json.write_text(
                    json.dumps(figures[0] if len(figures) == 1 else figures, indent=1)
                )
            return 0 if all(r.ended is None for r in results) else 1
    finally:
        lab.close()
        if sink is not None:
            sink.close()


@dataclass
class SessionResult:
    sources: list[str]  # regression scenarios, shrunk
    figures: dict[str, Any]  # as --json writes them
    ended: BaseException | None  # why the session ended early (the guest died)


def one_session(
    lab: VmLab,
    guest: GuestBaseline,
    mutant: Mutant | None,
    seed: int,
    args: argparse.Namespace,
    log: Callable[[str], None],
) -> SessionResult:
    """One session on the booted guest: its figures printed, its divergences shrunk
    (those of the lab's timing, counted in the figures, are not: they do not replay)."""
    against = "" if mutant is None else f", against the model's mutant {mutant.name}"
    print(f"generated: seed {seed}, {args.steps} steps, kernel {args.kernel}{against}", flush=True)
    seconds = None if args.minutes is None else 60 * args.minutes
    session = make_session(lab, guest, args.steps, log, seconds, mutant)
    ended: BaseException | None = None
    try:
        run_session(session, seed)
    except Exception as exc:  # the guest died: the figures so far still count
        ended = exc
        print(f"generated: the session ended early: {exc!r}", flush=True)
        for name, text in lab.evidence().items():  # gone with the lab's directory
            print(f"--- {name} (last lines)\n{text[-4000:]}", flush=True)
    print("\n".join(session.figures.lines(guest.release)), flush=True)
    found = sorted(session.divergences.values(), key=lambda d: -d.count)
    for d in found:
        print(f"  {d.count:5d}x {d.signature} (first after {len(d.trace)} steps)")
    sources = []
    # no shrinking on a guest that failed (it needs the guest)
    deadline = time.monotonic() + (0 if ended else args.shrink_seconds)
    name = None if mutant is None else mutant.name
    for i, d in enumerate(found):
        if udev_only(d.signature) or vf_address_timing(d.signature):
            print(f"shrink: {d.signature}: not shrunk (the lab's timing: it does not replay)")
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            print(f"shrink: out of time, {len(found) - i} divergences left unshrunk")
            break
        fresh = make_session(lab, guest, 0, log, mutant=mutant)
        steps = shrink(fresh.make_fake, fresh.make_real, d.trace, d.signature, left)
        print(f"shrink: {d.signature}: {len(d.trace)} -> {len(steps)} steps")
        sources.append(regression_source(d.signature, steps, guest.release, seed, i, name))
    f = session.figures
    figures = {
        "release": guest.release,
        "seed": seed,
        "mutant": name,
        "steps": f.steps,
        "outcome_agree": f.outcome_agree,
        "state_agree": f.state_agree,
        "classes": dict(f.classes),
        "guest_s": f.guest_s,
        "guest_call_s": f.guest_call_s,
        "fake_s": f.fake_s,
        "resets": f.resets,
        "reset_s": f.reset_s,
        "divergences": [{"signature": str(d.signature), "count": d.count} for d in found],
        "ended_early": None if ended is None else repr(ended),
    }
    return SessionResult(sources, figures, ended)


def _mutant(parser: argparse.ArgumentParser, spec: str, seed: int) -> tuple[Mutant | None, int]:
    name, _, own = spec.partition(":")
    if name not in MUTANTS:
        parser.error(f"--mutant {spec}: no mutant {name!r} (have: {sorted(MUTANTS)})")
    try:
        return MUTANTS[name], int(own) if own else seed
    except ValueError:
        parser.error(f"--mutant {spec}: the seed must be a whole number")


def _logged(parser: argparse.ArgumentParser, spec: str) -> tuple[str, list[Step]]:
    path, _, number = spec.rpartition(":")
    try:
        return spec, logged_trace(Path(path).read_text().splitlines(), int(number))
    except (OSError, ValueError) as exc:
        parser.error(f"--shrink-logged {spec}: {exc}")


def shrink_logged(
    session: Session,
    logged: list[tuple[str, list[Step]]],
    release: str,
    seed: int,
    mutant: Mutant | None,
    args: argparse.Namespace,
) -> list[str]:
    """Each logged trace replayed on fresh worlds; what diverges, shrunk (the budget
    shared), as regression sources."""
    sources = []
    deadline = time.monotonic() + args.shrink_seconds
    for number, (spec, trace) in enumerate(logged):
        found = first_divergence(session.make_fake, session.make_real, trace)
        if found is None:
            print(f"shrink: {spec}: {len(trace)} steps replayed, no divergence this time")
            continue
        at, signature = found
        print(f"shrink: {spec}: diverges at step {at + 1} of {len(trace)}: {signature}")
        left = max(deadline - time.monotonic(), 0.0)
        steps = shrink(session.make_fake, session.make_real, trace[: at + 1], signature, left)
        print(f"shrink: {signature}: {len(trace)} -> {len(steps)} steps")
        name = None if mutant is None else mutant.name
        sources.append(regression_source(signature, steps, release, seed, number, name))
    return sources


if __name__ == "__main__":
    sys.exit(main())
