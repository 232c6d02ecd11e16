"""The command line: arguments, the commands in order, and errors turned into exit codes.

Every failure a person can cause or meet (a bad argument or node config, a missing or
damaged journal, a service that does not answer, a stale dry-run) is a ``CtlError``:
one line on stderr, ``networkplugin-ctl: <what>``, and its exit code, here and nowhere
else. A read command goes on with the other services after one service's line.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NoReturn, TextIO

from plugins.sdk import OperationState
from plugins.sdk.service import add_version_option
from plugins.services import SERVICES

from . import _coordinator as coord
from ._apply import apply
from ._contents import Contents, read_contents
from ._doctor import FAIL, doctor
from ._errors import CtlError, Exit
from ._journal import snapshot
from ._node import DEFAULT_NODE_CONFIG, NODE_ENV, NodeConfig, Service, node_config_path
from ._output import FORMATS, Column, Output, describe_fields, describe_operation, table
from ._reconcile import digest, findings, with_kernel
from ._views import (
    effects_summary,
    operation_details,
    operation_rows,
    quarantine_rows,
    select_operations,
)

PROG: Final = "networkplugin-ctl"

_EXIT_CODES = """\
exit codes (the same for every command; when several things go wrong, the highest wins):
  0  done, nothing wrong found
  1  findings: reconcile listed or left something, doctor has a fail row, a cleanup or a
     coordinator removal did not end CLEANED
  2  usage: bad arguments, a bad node, service or coordinator config, an unknown
     operation or application, a token the CLI cannot use
  3  a journal (a service's or the coordinator's) is missing, damaged or rolled back
  4  unreachable: a service or the coordinator does not answer on its socket, or is
     recovering; the kernel cannot be reached
  5  refused: reconcile --apply without the digest of a dry-run of the current state, or
     a service started while apply was about to clean for it
"""

_EXAMPLES: Final = {
    "ops": "  networkplugin-ctl ops --service networkplugin-links --state Failed --limit 20",
    "show": "  networkplugin-ctl show att-1:secondary:ConnectNetwork:g1 -o yaml",
    "quarantine": "  networkplugin-ctl quarantine -o wide",
    "reconcile": "  networkplugin-ctl reconcile --dry-run\n"
    "  networkplugin-ctl reconcile --apply --digest sha256:05b46a...",
    "doctor": "  networkplugin-ctl doctor --no-headers | grep -w fail",
    "coordinator apps": "  networkplugin-ctl coordinator apps -o wide",
    "coordinator show": "  networkplugin-ctl coordinator show att-1",
    "coordinator remove": "  networkplugin-ctl coordinator remove att-1 -o json",
}


def _epilog(*commands: str) -> str:
    examples = "\n".join(_EXAMPLES[c] for c in commands)
    return f"example{'s' if len(commands) > 1 else ''}:\n{examples}\n\n{_EXIT_CODES}"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """One line, not the usage block: ``networkplugin-ctl: <problem>`` and exit 2."""
        self.exit(Exit.USAGE, f"{PROG}: {message} (see {self.prog} --help)\n")


def _state(value: str) -> str:
    for state in OperationState:
        if value.lower() == state.value.lower():
            return state.value
    known = ", ".join(s.value for s in OperationState)
    raise argparse.ArgumentTypeError(f"{value!r} is not an operation state ({known})")


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of 1 or more")
    return number


def _parser() -> argparse.ArgumentParser:
    # Options a person may give before or after the command: SUPPRESS keeps a
    # subcommand's absent option from overwriting the value given before it.
    common = _Parser(add_help=False)
    common.add_argument(
        "--node",
        type=Path,
        metavar="FILE",
        default=argparse.SUPPRESS,
        help=f"node config naming each service's config file (default ${NODE_ENV}, "
        f"else {DEFAULT_NODE_CONFIG})",
    )
    common.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default=argparse.SUPPRESS,
        help="one JSON or YAML document, or a table with more columns (default: a table)",
    )
    common.add_argument(
        "--no-headers",
        action="store_true",
        default=argparse.SUPPRESS,
        help="tables without their header line (and no line saying a table is empty)",
    )
    parser = _Parser(
        prog=PROG,
        parents=[common],
        description="Inspect and reconcile the NetworkPlugin services and the coordinator "
        "of this node (docs/operating.md).",
        epilog=_epilog("ops", "reconcile", "coordinator apps"),
    )
    add_version_option(parser)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, help: str, *, key: str = "", parents: Sequence[Any] = ()) -> Any:
        return commands.add_parser(
            name, parents=[common, *parents], help=help, epilog=_epilog(key or name)
        )

    ops = command("ops", "operations per service")
    ops.add_argument(
        "--service",
        action="append",
        choices=sorted(SERVICES),
        metavar="SERVICE",
        default=argparse.SUPPRESS,
        help="only this service's operations (repeat for several)",
    )
    ops.add_argument(
        "--state",
        action="append",
        type=_state,
        metavar="STATE",
        default=argparse.SUPPRESS,
        help="only operations in this state, e.g. Failed (repeat for several)",
    )
    ops.add_argument(
        "--scope",
        action="append",
        metavar="SCOPE",
        default=argparse.SUPPRESS,
        help="only operations of this scope, e.g. att-1 (repeat for several)",
    )
    ops.add_argument(
        "--limit",
        type=_positive,
        metavar="N",
        default=argparse.SUPPRESS,
        help="at most this many operations, the newest (smallest age)",
    )
    show = command("show", "one operation in full")
    show.add_argument("operation", help="operation id")
    command("quarantine", "quarantined and pending cleanups")
    reconcile = command("reconcile", "kernel objects of ours vs the journals")
    mode = reconcile.add_mutually_exclusive_group(required=True)
    mode.add_argument("--dry-run", action="store_true", help="list leaks, orphans and drift")
    mode.add_argument("--apply", action="store_true", help="clean up the leaks of a dry-run")
    reconcile.add_argument("--digest", help="the digest the dry-run printed (needed by --apply)")
    command("doctor", "sockets, tokens, journals, kernel")

    reach = _Parser(add_help=False)
    reach.add_argument(
        "--coordinator-socket",
        type=Path,
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="the coordinator's socket (default: the one its config names)",
    )
    coordinator = commands.add_parser(
        "coordinator",
        parents=[common, reach],
        help="the coordinator's applications and open calls",
        epilog=_epilog("coordinator apps", "coordinator show", "coordinator remove"),
    )
    actions = coordinator.add_subparsers(dest="action", required=True, parser_class=_Parser)
    for name, help in (
        ("apps", "every application: state, open calls, error"),
        ("show", "one application: its open calls, claims and error"),
        ("remove", "ask the coordinator to remove one application"),
    ):
        action = actions.add_parser(
            name, parents=[common, reach], help=help, epilog=_epilog(f"coordinator {name}")
        )
        if name != "apps":
            action.add_argument("application", help="attachment id, e.g. att-1")
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run one command; returns its exit code (docs/operating.md, "Exit codes")."""
    args = _parser().parse_args(argv)
    output = Output(
        out or sys.stdout, getattr(args, "output", None), not getattr(args, "no_headers", False)
    )
    path, origin = node_config_path(
        getattr(args, "node", None), os.environ if environ is None else environ
    )
    errors = _Errors()
    try:
        node = NodeConfig.load(path, origin=origin)
        if args.command == "coordinator":
            code = _COORDINATOR[args.action](args, node, output)
        else:
            code = _COMMANDS[args.command](args, node.services(), errors, output)
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


_OPS_COLUMNS: Final[list[Column]] = [
    ("SERVICE", "service"),
    ("PLUGIN", "plugin"),
    ("SCOPE", "scope"),
    ("STEP", "step"),
    ("OPERATION", "operation"),
    ("HOOK", "hook"),
    ("STATE", "state"),
    ("CLEANUP", "cleanup"),
    ("EFFECTS", "effectsText"),
    ("AGE", "ageText"),
]
_OPS_WIDE: Final[list[Column]] = [
    *_OPS_COLUMNS[:-1],
    ("PARTITION", "partition"),
    ("GENERATION", "generation"),
    ("EPOCH", "epoch"),
    ("SEQ", "seq"),
    _OPS_COLUMNS[-1],
]


def _ops(args: Any, services: Sequence[Service], errors: _Errors, output: Output) -> Exit:
    wanted = getattr(args, "service", [])
    named = {s.name for s in services}
    for name in wanted:
        if name not in named:
            raise CtlError(Exit.USAGE, f"--service {name}: the node config names no such service")
    rows = select_operations(
        operation_rows(_read_all(services, errors)),
        services=wanted,
        states=getattr(args, "state", []),
        scopes=getattr(args, "scope", []),
        limit=getattr(args, "limit", None),
    )
    if output.structured:
        output.document({"operations": rows})
        return Exit.OK
    shown = [
        {**r, "effectsText": effects_summary(r["effects"]), "ageText": f"{r['age']} ops"}
        for r in rows
    ]
    output.table(_OPS_COLUMNS, shown, wide=_OPS_WIDE, empty="no operations")
    return Exit.OK


def _show(args: Any, services: Sequence[Service], errors: _Errors, output: Output) -> Exit:
    contents = _read_all(services, errors)
    records = operation_details(contents, args.operation)
    if not records:
        if errors.worst is not Exit.OK:
            return Exit.OK  # a journal could not be read: absence there proves nothing
        raise CtlError(Exit.USAGE, f"operation {args.operation} is in no journal of this node")
    if output.structured:
        output.document({"operations": records})
        return Exit.OK
    for i, record in enumerate(records):
        if i:
            output.line("---")
        describe_operation(output.out, record)
    return Exit.OK


def _quarantine(args: Any, services: Sequence[Service], errors: _Errors, output: Output) -> Exit:
    rows = quarantine_rows(_read_all(services, errors))
    if output.structured:
        output.document({"scopes": rows})
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
    output.table(columns, rows, empty="no cleanups pending or quarantined")
    return Exit.OK


_FINDING_COLUMNS: Final[list[Column]] = [
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
_FINDING_WIDE: Final[list[Column]] = [
    *_FINDING_COLUMNS[:-1],
    ("MARKER", "marker"),
    ("WHY", "why"),
    _FINDING_COLUMNS[-1],
]


def _kernel_url(services: Sequence[Service]) -> str:
    urls = sorted({s.config.kernel for s in services})
    if len(urls) != 1:
        raise CtlError(Exit.USAGE, f"the services name different kernels ({', '.join(urls)})")
    return urls[0]


def _reconcile(args: Any, services: Sequence[Service], errors: _Errors, output: Output) -> Exit:
    # Every journal is needed: an unreadable one would make its objects look orphaned.
    contents = _read_all(services, None)
    found = with_kernel(_kernel_url(services), lambda kernel: findings(contents, kernel))
    receipt = digest(found)
    if args.dry_run:
        rows = [f.to_json() for f in found]
        if output.structured:
            output.document({"digest": receipt, "findings": rows})
        else:
            output.table(
                _FINDING_COLUMNS,
                rows,
                wide=_FINDING_WIDE,
                empty="nothing to reconcile: the node agrees with the journals",
            )
            output.line(f"digest: {receipt}")
        return Exit.FINDINGS if found else Exit.OK
    if not args.digest:
        raise CtlError(
            Exit.REFUSED,
            f"reconcile --apply needs the --digest a dry-run printed; nothing was done: run "
            f"'{PROG} reconcile --dry-run' first and review what it lists",
        )
    if args.digest != receipt:
        # No digest of the current state here: it would invite a paste of what nobody
        # reviewed. The dry-run prints it beside the findings it stands for.
        raise CtlError(
            Exit.REFUSED,
            f"the node or its journals changed since that dry-run; nothing was done: run "
            f"'{PROG} reconcile --dry-run' again and review what it lists before --apply",
        )
    cleanups = [c.to_json() for c in apply(found, contents, receipt)]
    after = _read_all(services, None)
    left = with_kernel(_kernel_url(services), lambda kernel: findings(after, kernel))
    left_rows = [f.to_json() for f in left]
    if output.structured:
        output.document({"digest": receipt, "cleanups": cleanups, "remaining": left_rows})
    else:
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
        output.table(columns, cleanups, empty="no leaks to clean up")
        if left_rows:
            output.line("remaining:")
            output.table(_FINDING_COLUMNS, left_rows, wide=_FINDING_WIDE)
    unclean = any(c["status"] != "CLEANED" for c in cleanups)
    return Exit.FINDINGS if unclean or left else Exit.OK


def _doctor(args: Any, services: Sequence[Service], errors: _Errors, output: Output) -> Exit:
    rows = doctor(tuple(services))
    if output.structured:
        output.document({"checks": rows})
    else:
        columns = [
            ("SERVICE", "service"),
            ("CHECK", "check"),
            ("SUBJECT", "subject"),
            ("STATUS", "status"),
            ("DETAIL", "detail"),
        ]
        output.table(columns, rows)
    return Exit.FINDINGS if any(r["status"] == FAIL for r in rows) else Exit.OK


_COMMANDS: dict[str, Callable[[Any, Sequence[Service], _Errors, Output], Exit]] = {
    "ops": _ops,
    "show": _show,
    "quarantine": _quarantine,
    "reconcile": _reconcile,
    "doctor": _doctor,
}


def _access(args: Any, node: NodeConfig) -> coord.CoordinatorAccess:
    return coord.coordinator_access(node, getattr(args, "coordinator_socket", None))


_APP_COLUMNS: Final[list[Column]] = [
    ("ATTACHMENT", "attachment"),
    ("CLAIM", "claim"),
    ("TOPOLOGY", "topology"),
    ("STATE", "state"),
    ("OPEN CALLS", "openCallCount"),
    ("ERROR", "error"),
]
_APP_WIDE: Final[list[Column]] = [
    *_APP_COLUMNS[:-1],
    ("SANDBOX", "sandbox"),
    ("CLAIMED", "claimed"),
    _APP_COLUMNS[-1],
]
_CALL_COLUMNS: Final[list[Column]] = [
    ("  OPERATION", "indented"),
    ("PLUGIN", "plugin"),
    ("STATE", "state"),
    ("ERROR", "error"),
]
_CLAIM_COLUMNS: Final[list[Column]] = [
    ("  RESOURCE", "indented"),
    ("HOLDER", "holder"),
    ("MODE", "mode"),
    ("GROUP", "group"),
]
_RECEIPT_COLUMNS: Final[list[Column]] = [
    ("STEP", "step"),
    ("HOOK", "hook"),
    ("STATUS", "status"),
    ("DETAIL", "detail"),
]


def _coordinator_apps(args: Any, node: NodeConfig, output: Output) -> Exit:
    found = coord.status(_access(args, node))
    rows = coord.application_rows(found)
    if output.structured:
        output.document({"ready": found.ready, "applications": rows})
        return Exit.OK
    shown = [
        {
            **r,
            "openCallCount": len(r["openCalls"]),
            "claimed": [c["resource"] for c in r["claims"]],
        }
        for r in rows
    ]
    output.table(_APP_COLUMNS, shown, wide=_APP_WIDE, empty="no applications")
    if not found.ready:
        output.line("(the coordinator is recovering: these states may still change)")
    return Exit.OK


def _coordinator_show(args: Any, node: NodeConfig, output: Output) -> Exit:
    found = coord.status(_access(args, node))
    app = coord.application_detail(found, args.application)
    if output.structured:
        output.document({"application": app})
        return Exit.OK
    fields = (
        ("Attachment", "attachment"),
        ("Claim", "claim"),
        ("Topology", "topology"),
        ("Sandbox", "sandbox"),
        ("State", "state"),
        ("Error", "error"),
    )
    describe_fields(output.out, app, fields)
    output.line("Open calls:")
    if app["openCalls"]:
        calls = [{**c, "indented": f"  {c['operation']}"} for c in app["openCalls"]]
        table(output.out, _CALL_COLUMNS, calls)
    else:
        output.line("  (none)")
    output.line("Claims:")
    if app["claims"]:
        claims = [{**c, "indented": f"  {c['resource']}"} for c in app["claims"]]
        table(output.out, _CLAIM_COLUMNS, claims)
    else:
        output.line("  (none)")
    return Exit.OK


def _coordinator_remove(args: Any, node: NodeConfig, output: Output) -> Exit:
    result = coord.remove(_access(args, node), args.application)
    answer = coord.removal(result)
    if output.structured:
        output.document(answer)
    else:
        output.table(_RECEIPT_COLUMNS, answer["receipts"])
        if result.state == "removed":
            output.line(f"{result.attachment}: removed")
        else:
            output.line(
                f"{result.attachment}: {result.state} (a receipt is not CLEANED): "
                f"run '{PROG} coordinator remove {result.attachment}' again later"
            )
    return coord.removal_exit(result)


_COORDINATOR: dict[str, Callable[[Any, NodeConfig, Output], Exit]] = {
    "apps": _coordinator_apps,
    "show": _coordinator_show,
    "remove": _coordinator_remove,
}


def console_main() -> int:
    """The ``networkplugin-ctl`` console script."""
    return main(sys.argv[1:])
