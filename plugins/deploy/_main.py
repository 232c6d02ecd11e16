"""``python -m plugins.deploy``: render the manifests, and the pod's two helpers.

- ``render --out DIR [--chart DIR] [--values FILE] [--validate VERSION]...``: the
  manifests into ``DIR`` (``dra-networkplugins.yaml``, ``examples.yaml``), each object
  first validated against each Kubernetes ``VERSION`` given (``latest``: the newest the
  installed kubernetes-validate carries); a refusal is one line on stderr, exit status
  2, and nothing written.
- ``probe SOCKET...``: exit 0 when every socket's health service says ``SERVING``, else
  1 with one line per socket that does not.
- ``pod-setup --node-name N [--pod-uid UID] --coordinator-config FILE --out-dir DIR``:
  the pod's tokens and the coordinator's config with this node's name (and this pod's UID).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PROG = "python -m plugins.deploy"
EXIT_REFUSED = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.splitlines()[0] if __doc__ else None
    )
    commands = parser.add_subparsers(dest="command", required=True)
    render = commands.add_parser("render", help="render the Kubernetes manifests into a directory")
    render.add_argument("--out", type=Path, required=True, help="the directory to write")
    render.add_argument(
        "--chart", type=Path, default=Path("deploy/kubernetes"), help="templates/ and values.yaml"
    )
    render.add_argument("--values", type=Path, help="your values, over the chart's values.yaml")
    render.add_argument(
        "--validate",
        action="append",
        default=[],
        metavar="VERSION",
        help="validate every object against this Kubernetes version's schema first "
        "(e.g. 1.34; latest: the newest kubernetes-validate has); repeatable",
    )
    probe = commands.add_parser("probe", help="readiness: every socket's health is SERVING")
    probe.add_argument("sockets", nargs="+", help="Unix socket paths")
    probe.add_argument("--timeout", type=float, default=3.0, help="seconds per socket")
    setup = commands.add_parser("pod-setup", help="the pod's tokens and coordinator config")
    setup.add_argument("--node-name", required=True)
    setup.add_argument("--pod-uid", default=None, help="the pod's metadata.uid")
    setup.add_argument("--coordinator-config", type=Path, required=True)
    setup.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    # each command imports what it needs only: the probe runs every few seconds
    if args.command == "render":
        return _render(args)
    if args.command == "probe":
        from ._probe import not_serving

        problems = not_serving(args.sockets, args.timeout)
        for line in problems:
            print(f"not ready: {line}", file=sys.stderr)
        return 1 if problems else 0
    from ._pod_setup import PodSetupError, set_up_pod

    try:
        for path in set_up_pod(args.node_name, args.coordinator_config, args.out_dir, args.pod_uid):
            print(f"wrote {path}")
    except PodSetupError as exc:
        print(f"{PROG} pod-setup: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


def _render(args: argparse.Namespace) -> int:
    from ._render import RenderError, render_manifests, write_manifests
    from ._values import ValuesError

    try:
        rendered = render_manifests(args.chart, args.values)
        problems = _validated(rendered.install + rendered.examples, args.validate)
    except (ValuesError, RenderError, LookupError) as exc:
        print(f"{PROG} render: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if problems:
        print(f"{PROG} render: {problems[0]}", file=sys.stderr)
        return EXIT_REFUSED
    for path in write_manifests(rendered, args.out):
        print(f"wrote {path}")
    return 0


def _validated(objects: Sequence[Mapping[str, Any]], versions: Sequence[str]) -> list[str]:
    """Every object's problem against every version (a kind without a schema there is
    said on stderr, not refused: the library has none to check it with)."""
    from ._validate import SchemaMissing, latest_schema_version, manifest_problem

    problems = []
    for version in versions:
        resolved = latest_schema_version() if version == "latest" else version
        for obj in objects:
            try:
                problem = manifest_problem(obj, resolved)
            except SchemaMissing as exc:
                print(f"{PROG} render: not validated: {exc}", file=sys.stderr)
                continue
            if problem is not None:
                problems.append(problem)
    return problems
