"""Strict reading of topology, policy and inventory manifests.

Loading is the SDK's one strict YAML loader (``plugins.sdk``: ``load_yaml_file``), re-exported
here under the manifest names the coordinator's parsers use. Every refusal is a
:class:`YAMLLoadError` naming the source, line and column (1-based).

The shape of a topology, a policy or an inventory is its JSON Schema (``schemas/``), checked by the
SDK's document validator (:func:`check_shape`); the parsers add the checks a schema
cannot express. Every problem, with its path (``spec.steps[2].pluginRef.name``) and the
rule it breaks, is collected into one :class:`ManifestError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from plugins.sdk import (
    MAX_YAML_BYTES,
    DocumentSchema,
    InvalidArgument,
    YAMLLoadError,
    load_yaml_documents,
    load_yaml_file,
)

MAX_MANIFEST_BYTES = MAX_YAML_BYTES

__all__ = [
    "MAX_MANIFEST_BYTES",
    "FieldProblem",
    "ManifestError",
    "YAMLLoadError",
    "load_yaml_documents",
    "load_yaml_file",
]

# --- strict reading of parsed manifests ---------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
QUALIFIED_NAME = re.compile(
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
)


@dataclass(frozen=True)
class FieldProblem:
    """One rejected field: ``path`` is like ``spec.steps[2].pluginRef.name``; ``rule`` is
    the schema rule it breaks (``unknown-key``, ``type``, ``pattern``, ...), empty for the
    parsers' own checks."""

    path: str
    message: str
    rule: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" + (f" [{self.rule}]" if self.rule else "")


class ManifestError(InvalidArgument):
    """A manifest does not have the required shape; lists every problem found."""

    def __init__(self, source: str, problems: Sequence[FieldProblem]) -> None:
        super().__init__(
            f"{source}: " + "; ".join(str(p) for p in problems),
            details={"source": source},
        )
        self.source = source
        self.problems = tuple(problems)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(p.path for p in self.problems)


def check_shape(schema_file: str, doc: object, source: str) -> None:
    """Check ``doc`` against ``plugins/coordinator/schemas/<schema_file>``."""
    schema = DocumentSchema.packaged("plugins.coordinator", schema_file, root="")
    problems = schema.problems(doc)
    if problems:
        raise ManifestError(source, [FieldProblem(p.path(""), p.message, p.rule) for p in problems])


def child_path(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _IDENT.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


class Problems:
    """Collects :class:`FieldProblem` s; ``raise_if_any`` turns them into one error."""

    def __init__(self) -> None:
        self.items: list[FieldProblem] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(FieldProblem(path, message))

    def raise_if_any(self, source: str) -> None:
        if self.items:
            raise ManifestError(source, self.items)
