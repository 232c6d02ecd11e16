"""Tables for people (kubectl's: upper-case headers, columns two spaces apart; ``-o wide``
adds columns, ``--no-headers`` drops the header), one document for machines (``-o json``,
``-o yaml``: the same document, keys in camelCase as in kubectl's API objects)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TextIO

import yaml

Column = tuple[str, str]  # (header, key)

FORMATS: Final = ("json", "yaml", "wide")
"""The values of ``-o``; without it, the narrow table."""


def _cell(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    text = str(value)
    return text if text else "-"


def table(
    out: TextIO,
    columns: Sequence[Column],
    rows: Sequence[Mapping[str, Any]],
    *,
    headers: bool = True,
) -> None:
    """Aligned columns; the last one is never padded (it may be long: a reason, a detail)."""
    cells = [[_cell(r.get(k, "")) for _, k in columns] for r in rows]
    if headers:
        cells.insert(0, [h for h, _ in columns])
    if not cells:
        return
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        padded = [c.ljust(w) for c, w in zip(row[:-1], widths[:-1], strict=True)]
        out.write("  ".join([*padded, row[-1]]).rstrip() + "\n")


def dump_json(out: TextIO, document: Any) -> None:
    out.write(json.dumps(document, indent=2, sort_keys=True) + "\n")


def dump_yaml(out: TextIO, document: Any) -> None:
    out.write(yaml.safe_dump(document, sort_keys=True, default_flow_style=False))


@dataclass(frozen=True)
class Output:
    """How a command prints: ``format`` is None (a table), ``wide``, ``json`` or ``yaml``."""

    out: TextIO
    format: str | None = None
    headers: bool = True

    @property
    def structured(self) -> bool:
        """JSON or YAML: one document, every field, no words for people."""
        return self.format in ("json", "yaml")

    @property
    def wide(self) -> bool:
        return self.format == "wide"

    def document(self, document: Any) -> None:
        if self.format == "yaml":
            dump_yaml(self.out, document)
        else:
            dump_json(self.out, document)

    def table(
        self,
        columns: Sequence[Column],
        rows: Sequence[Mapping[str, Any]],
        *,
        wide: Sequence[Column] | None = None,
        empty: str = "",
    ) -> None:
        """The rows under ``columns`` (under ``wide`` with ``-o wide``, when given); ``empty``
        is the line printed instead of a header alone (none with ``--no-headers``: no rows,
        no lines, for a script reading them)."""
        if not rows and empty:
            if self.headers:
                self.out.write(f"{empty}\n")
            return
        shown = wide if self.wide and wide is not None else columns
        table(self.out, shown, rows, headers=self.headers)

    def line(self, text: str) -> None:
        self.out.write(f"{text}\n")


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
    describe_fields(out, record, fields)
    out.write("Plan:\n")
    indented(out, record["plan"])
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
            indented(out, e["beforeImage"])
    else:
        out.write("  (none)\n")
    out.write("Response:\n")
    indented(out, record["response"])
    if record["error"] is not None:
        out.write("Error:\n")
        indented(out, record["error"])


def describe_fields(
    out: TextIO, record: Mapping[str, Any], fields: Sequence[tuple[str, str]]
) -> None:
    """``Label:   value`` lines, the values aligned (kubectl describe's header block)."""
    width = max(len(label) for label, _ in fields) + 2
    for label, key in fields:
        out.write(f"{label + ':':<{width}}{_cell(record[key])}\n")


def indented(out: TextIO, value: Any) -> None:
    if value is None:
        out.write("  (none)\n")
        return
    for line in json.dumps(value, indent=2, sort_keys=True).splitlines():
        out.write(f"  {line}\n")
