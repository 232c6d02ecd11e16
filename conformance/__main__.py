"""python -m conformance --target FILE [--check NAME ...] [--kernel URL]: the wire suite
against one plugin.

Prints one line per check (PASS, FAIL with what the plugin got wrong, SKIP with why it
does not apply), then a summary naming the failed checks. Exit codes: 0 every check
passed or did not apply, 1 a check failed, 2 the target file or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

from labs import SEED_ENV, start_state_seed
from plugins.sdk import DocumentError, YAMLLoadError

from .wire_checks import WIRE_CHECKS, run_check
from .wire_driver import WireLabs
from .wire_target import WireTargetError, load_wire_target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    parser.add_argument("--target", required=True, help="a wire target file (YAML)")
    parser.add_argument(
        "--check", action="append", choices=list(WIRE_CHECKS), help="run only this check"
    )
    parser.add_argument(
        "--kernel",
        choices=("fake://", "linux://"),
        help="observe this kernel instead of the file's (linux://: a netns lab, root)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the suite does")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(name)s: %(message)s",
    )
    try:
        target = load_wire_target(args.target)
    except (WireTargetError, DocumentError, YAMLLoadError) as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        return 2
    if args.kernel is not None and args.kernel != target.kernel_url:
        lab = target.lab if args.kernel == "fake://" else None
        target = dataclasses.replace(target, kernel_url=args.kernel, lab=lab)
    names = args.check or list(WIRE_CHECKS)
    print(f"wire conformance of {target.name} ({target.source}), kernel {target.kernel_url}")
    print(f"lab start-state seed {start_state_seed()} ({SEED_ENV} changes it)")
    failed = []
    with WireLabs(target) as labs:
        for name in names:
            verdict = run_check(target, name, labs)
            print(verdict.line(), flush=True)
            if verdict.failed:
                failed.append(name)
    summary = f"{len(names)} checks, {len(names) - len(failed)} passed or not applicable"
    print(summary + (f", FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
