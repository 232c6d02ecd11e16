"""The command line: arguments, the commands in order, and errors turned into exit codes.

Every failure a person can cause or meet (a bad argument or node config, a missing or
damaged journal, a service that does not answer, a stale dry-run) is a ``CtlError``:
one line on stderr, ``networkplugin-ctl: <what>``, and its exit code, here and nowhere
else. A read command goes on with the other services after one service's line.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from ._apply import apply
from ._contents import Contents, read_contents
from ._doctor import FAIL, doctor
from ._errors import CtlError, Exit
from ._journal import snapshot
from ._node import DEFAULT_NODE_CONFIG, Service, load_node
from ._output import describe_operation, dump_json, table
from ._reconcile import digest, findings, with_kernel
from ._views import operation_details, operation_rows, quarantine_rows

PROG = "networkplugin-ctl"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, not the usage block: ``networkplugin-ctl: <problem>`` and exit 2."""
        self.exit(Exit.USAGE, f"{PROG}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument(
        "--node",
        type=Path,
        default=argparse.SUPPRESS,
        help=f"node config naming each service's config file (default {DEFAULT_NODE_CONFIG})",
    )
    common.add_argument(
        "-o", "--output", choices=["table", "json"], default=argparse.SUPPRESS, help="format"
    )
    parser = _Parser(
        prog=PROG,
        parents=[common],
        description="Inspect and reconcile the NetworkPlugin services of this node "
        "(docs/operating.md).",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser("ops", parents=[common], help="operations per service")
    show_parser = commands.add_parser("show", parents=[common], help="one operation in full")
    show_parser.add_argument("operation", help="operation id")
    commands.add_parser("quarantine", parents=[common], help="quarantined and pending cleanups")
    reconcile = commands.add_parser(
        "reconcile", parents=[common], help="kernel objects of ours vs the journals"
    )
    mode = reconcile.add_mutually_exclusive_group(required=True)
    mode.add_argument("--dry-run", action="store_true", help="list leaks, orphans and drift")
    mode.add_argument("--apply", action="store_true", help="clean up the leaks of a dry-run")
    reconcile.add_argument("--digest", help="the digest the dry-run printed (needed by --apply)")
    commands.add_parser("doctor", parents=[common], help="sockets, tokens, journals, kernel")
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run one command; returns its exit code (docs/operating.md, "Exit codes")."""
    stdout = out or sys.stdout
    args = _parser().parse_args(argv)
    as_json = getattr(args, "output", "table") == "json"
    node = getattr(args, "node", DEFAULT_NODE_CONFIG)
    errors = _Errors()
    try:
        services = load_node(node)
        command: Callable[..., Exit] = _COMMANDS[args.command]
        code = command(args, services, errors, stdout, as_json)
    except CtlError as exc:
        errors.report(exc)
        code = Exit.OK
    return int(max(code, errors.worst))


class _Errors:
    """One line per error on stderr; the exit code is the worst of them."""

    def __init__(self) -> None:
        self.worst = Exit.OK

    def report(self, exc: CtlError) -> None:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        self.worst = max(self.worst, exc.exit_code)

    @contextlib.contextmanager
    def each(self) -> Iterator[None]:
        try:
            yield
        except CtlError as exc:
            self.report(exc)


def _read_all(services: Sequence[Service], errors: _Errors | None) -> list[Contents]:
    """Every readable journal; with ``errors``, a bad one is reported and skipped, else raised."""
    found = []
    for service in services:
        if errors is None:
            with snapshot(service) as snap:
                found.append(read_contents(snap))
            continue
        with errors.each(), snapshot(service) as snap:
            found.append(read_contents(snap))
    return found


def _ops(
    args: Any, services: Sequence[Service], errors: _Errors, out: TextIO, as_json: bool
) -> Exit:
    rows = operation_rows(_read_all(services, errors))
    if as_json:
        dump_json(out, {"operations": rows})
        return Exit.OK
    columns = [
        ("SERVICE", "service"),
        ("PLUGIN", "plugin"),
        ("SCOPE", "scope"),
        ("STEP", "step"),
        ("OPERATION", "operation"),
        ("HOOK", "hook"),
        ("STATE", "state"),
        ("CLEANUP", "cleanup"),
        ("EFFECTS", "effects"),
        ("AGE", "ageText"),
    ]
    table(out, columns, [{**r, "ageText": f"{r['age']} ops"} for r in rows])
    return Exit.OK


def _show(
    args: Any, services: Sequence[Service], errors: _Errors, out: TextIO, as_json: bool
) -> Exit:
    contents = _read_all(services, errors)
    records = operation_details(contents, args.operation)
    if not records:
        if errors.worst is not Exit.OK:
            return Exit.OK  # a journal could not be read: absence there proves nothing
        raise CtlError(Exit.USAGE, f"operation {args.operation} is in no journal of this node")
    if as_json:
        dump_json(out, {"operations": records})
        return Exit.OK
    for i, record in enumerate(records):
        if i:
            out.write("---\n")
        describe_operation(out, record)
    return Exit.OK


def _quarantine(
    args: Any, services: Sequence[Service], errors: _Errors, out: TextIO, as_json: bool
) -> Exit:
    rows = quarantine_rows(_read_all(services, errors))
    if as_json:
        dump_json(out, {"scopes": rows})
        return Exit.OK
    columns = [
        ("SERVICE", "service"),
        ("PLUGIN", "plugin"),
        ("SCOPE", "scope"),
        ("STEP", "step"),
        ("STATUS", "status"),
        ("OPERATIONS", "operations"),
        ("REASON", "reason"),
    ]
    table(out, columns, rows)
    return Exit.OK


_FINDING_COLUMNS = [
    ("CATEGORY", "category"),
    ("SERVICE", "service"),
    ("PLUGIN", "plugin"),
    ("SCOPE", "scope"),
    ("OPERATION", "operation"),
    ("EFFECT", "effect"),
    ("JOURNAL", "state"),
    ("ACTION", "action"),
    ("OBJECT", "object"),
]


def _kernel_url(services: Sequence[Service]) -> str:
    urls = sorted({s.config.kernel for s in services})
    if len(urls) != 1:
        raise CtlError(Exit.USAGE, f"the services name different kernels ({', '.join(urls)})")
    return urls[0]


def _reconcile(
    args: Any, services: Sequence[Service], errors: _Errors, out: TextIO, as_json: bool
) -> Exit:
    # Every journal is needed: an unreadable one would make its objects look orphaned.
    contents = _read_all(services, None)
    found = with_kernel(_kernel_url(services), lambda kernel: findings(contents, kernel))
    receipt = digest(found)
    if args.dry_run:
        rows = [f.to_json() for f in found]
        if as_json:
            dump_json(out, {"digest": receipt, "findings": rows})
        else:
            if rows:
                table(out, _FINDING_COLUMNS, rows)
            else:
                out.write("nothing to reconcile: the node agrees with the journals\n")
            out.write(f"digest: {receipt}\n")
        return Exit.FINDINGS if found else Exit.OK
    if not args.digest:
        raise CtlError(
            Exit.REFUSED,
            "reconcile --apply needs --digest, the one a dry-run of the same state printed",
        )
    if args.digest != receipt:
        raise CtlError(
            Exit.REFUSED,
            f"the node or its journals changed since that dry-run (its digest {args.digest}, "
            f"now {receipt}); nothing was done: run reconcile --dry-run again",
        )
    cleanups = [c.to_json() for c in apply(found, contents, receipt)]
    after = _read_all(services, None)
    left = with_kernel(_kernel_url(services), lambda kernel: findings(after, kernel))
    left_rows = [f.to_json() for f in left]
    if as_json:
        dump_json(out, {"digest": receipt, "cleanups": cleanups, "remaining": left_rows})
    else:
        if cleanups:
            columns = [
                ("SERVICE", "service"),
                ("PLUGIN", "plugin"),
                ("SCOPE", "scope"),
                ("TARGET", "target"),
                ("CLEANUP", "operation"),
                ("VIA", "via"),
                ("STATUS", "status"),
                ("DETAIL", "detail"),
            ]
            table(out, columns, cleanups)
        else:
            out.write("no leaks to clean up\n")
        if left_rows:
            out.write("remaining:\n")
            table(out, _FINDING_COLUMNS, left_rows)
    unclean = any(c["status"] != "CLEANED" for c in cleanups)
    return Exit.FINDINGS if unclean or left else Exit.OK


def _doctor(
    args: Any, services: Sequence[Service], errors: _Errors, out: TextIO, as_json: bool
) -> Exit:
    rows = doctor(tuple(services))
    if as_json:
        dump_json(out, {"checks": rows})
    else:
        columns = [
            ("SERVICE", "service"),
            ("CHECK", "check"),
            ("SUBJECT", "subject"),
            ("STATUS", "status"),
            ("DETAIL", "detail"),
        ]
        table(out, columns, rows)
    return Exit.FINDINGS if any(r["status"] == FAIL for r in rows) else Exit.OK


_COMMANDS: dict[str, Callable[..., Exit]] = {
    "ops": _ops,
    "show": _show,
    "quarantine": _quarantine,
    "reconcile": _reconcile,
    "doctor": _doctor,
}


def console_main() -> int:
    """The ``networkplugin-ctl`` console script."""
    return main(sys.argv[1:])
