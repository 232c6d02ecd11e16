"""Strict reading of topology, policy and inventory manifests.

Loading is the SDK's one strict YAML loader (``plugins.sdk``: ``load_yaml_file``), re-exported
here under the manifest names the coordinator's parsers use. Every refusal is a
:class:`YAMLLoadError` naming the source, line and column (1-based).

The shape of a topology or a policy is its JSON Schema (``schemas/``), checked by the
SDK's document validator (:func:`check_shape`); the parsers add the checks a schema
cannot express. Every problem, with its path (``spec.steps[2].pluginRef.name``) and the
rule it breaks, is collected into one :class:`ManifestError`.

:class:`Fields` is the hand-written reader the inventory (``_cel``) still uses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
_QUANTITY = re.compile(r"^(0|[1-9][0-9]{0,17})$")


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


def kind_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


class Problems:
    """Collects :class:`FieldProblem` s; ``raise_if_any`` turns them into one error."""

    def __init__(self) -> None:
        self.items: list[FieldProblem] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(FieldProblem(path, message))

    def raise_if_any(self, source: str) -> None:
        if self.items:
            raise ManifestError(source, self.items)


class Fields:
    """A strict view of one mapping at ``path``.

    Each accessor records a problem instead of raising and returns a neutral value
    (``""``, ``0``, ``False``, an empty view), so one pass reports every problem; the
    caller builds its result only when no problem was recorded.
    """

    def __init__(
        self, problems: Problems, path: str, value: object, *, absent: bool = False
    ) -> None:
        self.problems = problems
        self.path = path
        self.valid = isinstance(value, dict) and not absent
        self.data: dict[str, Any] = value if isinstance(value, dict) else {}
        if not isinstance(value, dict):
            problems.add(path or "$", f"must be a mapping, got {kind_of(value)}")

    def at(self, key: str | int) -> str:
        return child_path(self.path, key)

    def has(self, key: str) -> bool:
        return key in self.data

    def only(self, *keys: str) -> None:
        for key in self.data:
            if key not in keys:
                known = ", ".join(keys)
                self.problems.add(self.at(key), f"unknown field {key!r} (known: {known})")

    def _missing(self, key: str) -> None:
        # A missing or malformed mapping is one problem, not one per field it lacks.
        if self.valid:
            self.problems.add(self.at(key), "required field is missing")

    def string(
        self,
        key: str,
        *,
        required: bool = True,
        pattern: re.Pattern[str] | None = None,
        choices: Sequence[str] = (),
        what: str = "",
    ) -> str:
        if key not in self.data:
            if required:
                self._missing(key)
            return ""
        value = self.data[key]
        if not isinstance(value, str) or not value:
            self.problems.add(self.at(key), f"must be a non-empty string, got {kind_of(value)}")
            return ""
        if choices and value not in choices:
            allowed = ", ".join(repr(c) for c in choices)
            self.problems.add(self.at(key), f"must be one of {allowed}, got {value!r}")
            return ""
        if pattern is not None and not pattern.match(value):
            self.problems.add(self.at(key), f"{value!r} is not a valid {what or 'value'}")
            return ""
        return value

    def integer(self, key: str, *, required: bool = True, low: int, high: int) -> int:
        if key not in self.data:
            if required:
                self._missing(key)
            return 0
        value = self.data[key]
        if not isinstance(value, int) or isinstance(value, bool):
            self.problems.add(self.at(key), f"must be an integer, got {kind_of(value)}")
            return 0
        if not low <= value <= high:
            self.problems.add(self.at(key), f"must be in {low}..{high}, got {value}")
            return 0
        return value

    def boolean(self, key: str, *, required: bool = True) -> bool:
        if key not in self.data:
            if required:
                self._missing(key)
            return False
        value = self.data[key]
        if not isinstance(value, bool):
            self.problems.add(self.at(key), f"must be true or false, got {kind_of(value)}")
            return False
        return value

    def mapping(self, key: str, *, required: bool = True) -> Fields:
        if key not in self.data:
            if required:
                self._missing(key)
            return Fields(self.problems, self.at(key), {}, absent=True)
        return Fields(self.problems, self.at(key), self.data[key])

    def items(self, key: str, *, required: bool = True, non_empty: bool = True) -> list[Any]:
        """The list at ``key`` (its items are at ``self.at(key)[i]``)."""
        if key not in self.data:
            if required:
                self._missing(key)
            return []
        value = self.data[key]
        if not isinstance(value, list):
            self.problems.add(self.at(key), f"must be a list, got {kind_of(value)}")
            return []
        if non_empty and not value:
            self.problems.add(self.at(key), "must not be empty")
        return value

    def strings(self, key: str, *, required: bool = True) -> tuple[str, ...]:
        out: list[str] = []
        for index, item in enumerate(self.items(key, required=required)):
            if isinstance(item, str) and item:
                out.append(item)
            else:
                path = child_path(self.at(key), index)
                self.problems.add(path, f"must be a non-empty string, got {kind_of(item)}")
        return tuple(out)

    def string_map(self, key: str) -> dict[str, str]:
        """An optional map of strings to strings (labels, annotations)."""
        out: dict[str, str] = {}
        for name, value in self.mapping(key, required=False).data.items():
            if isinstance(value, str):
                out[name] = value
            else:
                path = child_path(self.at(key), name)
                self.problems.add(path, f"must be a string, got {kind_of(value)}")
        return out


def parse_quantity(problems: Problems, path: str, value: object) -> str:
    """A countable quantity (``1``, ``"64"``), normalized to its decimal string.

    Only plain non-negative integers are accepted: every capacity of the initial profile
    counts whole children, and a suffixed form (``1k``, ``500m``) is refused rather than
    half-understood.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not _QUANTITY.match(value):
        shown = repr(value) if isinstance(value, str) else kind_of(value)
        problems.add(path, f'must be a whole-number quantity such as "1", got {shown}')
        return ""
    return value
