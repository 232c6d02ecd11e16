"""Tables for people (kubectl's: upper-case headers, columns two spaces apart), JSON for
machines (``-o json``: one document, keys as in the tables' JSON rows)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

Column = tuple[str, str]  # (header, key)


def _cell(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    text = str(value)
    return text if text else "-"


def table(out: TextIO, columns: Sequence[Column], rows: Sequence[Mapping[str, Any]]) -> None:
    """Aligned columns; the last one is never padded (it may be long: a reason, a detail)."""
    cells = [[h for h, _ in columns], *([_cell(r.get(k, "")) for _, k in columns] for r in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        padded = [c.ljust(w) for c, w in zip(row[:-1], widths[:-1], strict=True)]
        out.write("  ".join([*padded, row[-1]]).rstrip() + "\n")


def dump_json(out: TextIO, document: Any) -> None:
    out.write(json.dumps(document, indent=2, sort_keys=True) + "\n")


def describe_operation(out: TextIO, record: Mapping[str, Any]) -> None:
    """``show OP`` for people: its fields, the plan, each effect with its before-image,
    the response (kubectl describe's shape)."""
    fields = (
        ("Service", "service"),
        ("Plugin", "plugin"),
        ("Operation", "operation"),
        ("Hook", "hook"),
        ("Scope", "scope"),
        ("Step", "step"),
        ("State", "state"),
        ("Cleanup", "cleanup"),
        ("Target", "targetOperation"),
        ("Generation", "generation"),
        ("Epoch", "epoch"),
        ("Seq", "seq"),
        ("Semantic digest", "semanticDigest"),
    )
    width = max(len(label) for label, _ in fields) + 2
    for label, key in fields:
        out.write(f"{label + ':':<{width}}{_cell(record[key])}\n")
    out.write("Plan:\n")
    _indented(out, record["plan"])
    out.write("Effects:\n")
    if record["effects"]:
        columns = [
            ("  ID", "id"),
            ("KIND", "kind"),
            ("STATE", "state"),
            ("ATTEMPTS", "attempts"),
            ("DETAIL", "detail"),
        ]
        rows = [{**e, "id": f"  {e['id']}"} for e in record["effects"]]
        table(out, columns, rows)
        for e in record["effects"]:
            out.write(f"Before-image of {e['id']}:\n")
            _indented(out, e["beforeImage"])
    else:
        out.write("  (none)\n")
    out.write("Response:\n")
    _indented(out, record["response"])
    if record["error"] is not None:
        out.write("Error:\n")
        _indented(out, record["error"])


def _indented(out: TextIO, value: Any) -> None:
    if value is None:
        out.write("  (none)\n")
        return
    for line in json.dumps(value, indent=2, sort_keys=True).splitlines():
        out.write(f"  {line}\n")
