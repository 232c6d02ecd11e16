"""Strict YAML loading for topology, policy and inventory manifests.

The loader is a ``yaml.SafeLoader`` subclass that turns YAML into plain JSON-like data
(dicts, lists, str, int, float, bool, None) and refuses what a manifest should never
contain or what PyYAML would silently resolve:

* a key repeated in one mapping, at any depth (the later value would silently win);
* mapping keys that are not strings (``1: x`` or ``on: x`` would not survive JSON);
* aliases (``*ref``) and merge keys (``<<``): a manifest is data, and aliases let a tiny
  file expand into a huge tree;
* the non-JSON tags ``!!binary``, ``!!set``, ``!!omap``, ``!!pairs`` and ``!!timestamp``;
  an *untagged* date-like scalar such as ``2026-01-01`` stays a string.

Every refusal is a :class:`YAMLLoadError` naming the source, line and column (1-based).

The second half is the strict reader the manifest parsers share: :class:`Fields` walks
one mapping, refuses unknown keys and wrong types, and collects every problem with its
path (``spec.steps[2].pluginRef.name``) into one :class:`ManifestError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node

from plugins.sdk import InvalidArgument

__all__ = [
    "MAX_MANIFEST_BYTES",
    "FieldProblem",
    "ManifestError",
    "YAMLLoadError",
    "load_yaml_documents",
    "load_yaml_file",
]

MAX_MANIFEST_BYTES = 1 << 20

_REFUSED_TAGS = {
    "tag:yaml.org,2002:binary": "binary data",
    "tag:yaml.org,2002:set": "a set",
    "tag:yaml.org,2002:omap": "an ordered map",
    "tag:yaml.org,2002:pairs": "a list of pairs",
}
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MERGE = "tag:yaml.org,2002:merge"
_STR = "tag:yaml.org,2002:str"


class YAMLLoadError(InvalidArgument):
    """A manifest is not acceptable YAML; ``line``/``column`` are 1-based, 0 when unknown."""

    def __init__(self, source: str, line: int, column: int, problem: str) -> None:
        where = f"{source}:{line}:{column}" if line else source
        super().__init__(
            f"{where}: {problem}",
            details={"source": source, "line": str(line), "column": str(column)},
        )
        self.source = source
        self.line = line
        self.column = column
        self.problem = problem


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader producing JSON-like data; see the module docstring for what it refuses."""

    source = "<string>"

    def _error(self, node_or_mark: Any, problem: str) -> YAMLLoadError:
        mark = getattr(node_or_mark, "start_mark", node_or_mark)
        return YAMLLoadError(self.source, mark.line + 1, mark.column + 1, problem)

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            raise self._error(event, f"alias *{event.anchor} is not allowed in a manifest")
        return super().compose_node(parent, index)

    def flatten_mapping(self, node: MappingNode) -> None:
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                raise self._error(key_node, "merge keys ('<<') are not allowed in a manifest")

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Hashable, Any]:
        if not isinstance(node, MappingNode):
            raise self._error(node, f"expected a mapping, found {type(node).__name__}")
        self.flatten_mapping(node)
        result: dict[Hashable, Any] = {}
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise self._error(key_node, f"mapping key {key!r} is not a string; quote it")
            if key in result:
                raise self._error(
                    key_node, f"duplicate key {key!r} (first at line {first_line[key]})"
                )
            first_line[key] = key_node.start_mark.line + 1
            result[key] = self.construct_object(value_node, deep=deep)
        return result

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        # An untagged date-like scalar stays a string; only ``!!timestamp`` reaches the
        # timestamp constructor, which refuses it.
        tag = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        return _STR if tag == _TIMESTAMP else tag

    def construct_timestamp(self, node: Node) -> Any:
        raise self._error(node, "a !!timestamp is not allowed in a manifest")

    def construct_refused(self, node: Node) -> Any:
        raise self._error(node, f"{_REFUSED_TAGS[node.tag]} ({node.tag}) is not allowed")

    def construct_unknown_tag(self, node: Node) -> Any:
        raise self._error(node, f"unknown tag {node.tag!r}")


_StrictLoader.add_constructor(_TIMESTAMP, _StrictLoader.construct_timestamp)
_StrictLoader.add_constructor("tag:yaml.org,2002:map", _StrictLoader.construct_mapping)
for _tag in _REFUSED_TAGS:
    _StrictLoader.add_constructor(_tag, _StrictLoader.construct_refused)
_StrictLoader.add_constructor(None, _StrictLoader.construct_unknown_tag)


def load_yaml_documents(text: str | bytes, source: str = "<string>") -> list[Any]:
    """Every non-empty document of a (possibly multi-document) YAML stream, in order."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise YAMLLoadError(source, 0, 0, f"manifest exceeds {MAX_MANIFEST_BYTES} bytes")
    loader = _StrictLoader(text)
    loader.source = source
    documents: list[Any] = []
    try:
        while loader.check_data():  # type: ignore[no-untyped-call]
            document = loader.get_data()
            if document is not None:
                documents.append(document)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        line, column = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        raise YAMLLoadError(source, line, column, problem) from None
    except yaml.YAMLError as exc:
        raise YAMLLoadError(source, 0, 0, f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()
    return documents


def load_yaml_file(path: str | Path) -> list[Any]:
    """Read and load a manifest file; I/O errors become :class:`YAMLLoadError` too."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise YAMLLoadError(str(path), 0, 0, exc.strerror or str(exc)) from None
    return load_yaml_documents(data, str(path))


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
    """One rejected field: ``path`` is like ``spec.steps[2].pluginRef.name``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


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
