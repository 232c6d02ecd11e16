"""One strict YAML loader for every file an administrator or a lab writes.

Service configs, topologies, policies, inventories and lab files all load through here.
The loader is a ``yaml.SafeLoader`` subclass that turns YAML into plain JSON-like data
(dicts, lists, str, int, float, bool, None) and refuses what such a file should never
contain or what PyYAML would silently resolve:

* a key repeated in one mapping, at any depth (the later value would silently win);
* mapping keys that are not strings (``1: x`` or ``on: x`` would not survive JSON);
* aliases (``*ref``) and merge keys (``<<``): a config is data, and aliases let a tiny
  file expand into a huge tree;
* ``.nan`` and ``.inf``: JSON has no such numbers;
* the non-JSON tags ``!!binary``, ``!!set``, ``!!omap``, ``!!pairs`` and ``!!timestamp``;
  an *untagged* date-like scalar such as ``2026-01-01`` stays a string.

Every refusal is a :class:`YAMLLoadError` naming the source, line and column (1-based).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from ._errors import InvalidArgument

__all__ = [
    "MAX_YAML_BYTES",
    "YAMLLoadError",
    "load_yaml_documents",
    "load_yaml_file",
    "load_yaml_mapping",
]

MAX_YAML_BYTES = 1 << 20

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
    """A file is not acceptable YAML; ``line``/``column`` are 1-based, 0 when unknown."""

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
            raise self._error(event, f"alias *{event.anchor} is not allowed in a config file")
        return super().compose_node(parent, index)

    def flatten_mapping(self, node: MappingNode) -> None:
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                raise self._error(key_node, "merge keys ('<<') are not allowed in a config file")

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

    def construct_yaml_float(self, node: ScalarNode) -> float:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise self._error(node, f"{node.value!r} is not a finite number (JSON has none)")
        return value

    def construct_timestamp(self, node: Node) -> Any:
        raise self._error(node, "a !!timestamp is not allowed in a config file")

    def construct_refused(self, node: Node) -> Any:
        raise self._error(node, f"{_REFUSED_TAGS[node.tag]} ({node.tag}) is not allowed")

    def construct_unknown_tag(self, node: Node) -> Any:
        raise self._error(node, f"unknown tag {node.tag!r}")


_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_float)
_StrictLoader.add_constructor(_TIMESTAMP, _StrictLoader.construct_timestamp)
_StrictLoader.add_constructor("tag:yaml.org,2002:map", _StrictLoader.construct_mapping)
for _tag in _REFUSED_TAGS:
    _StrictLoader.add_constructor(_tag, _StrictLoader.construct_refused)
_StrictLoader.add_constructor(None, _StrictLoader.construct_unknown_tag)


def load_yaml_documents(text: str | bytes, source: str = "<string>") -> list[Any]:
    """Every non-empty document of a (possibly multi-document) YAML stream, in order."""
    if len(text) > MAX_YAML_BYTES:
        raise YAMLLoadError(source, 0, 0, f"file exceeds {MAX_YAML_BYTES} bytes")
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
    """Read and load a YAML file; I/O errors become :class:`YAMLLoadError` too."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise YAMLLoadError(str(path), 0, 0, exc.strerror or str(exc)) from None
    return load_yaml_documents(data, str(path))


def load_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """A file holding exactly one mapping (a service config, a lab); anything else refused."""
    documents = load_yaml_file(path)
    if len(documents) != 1 or not isinstance(documents[0], dict):
        what = f"{len(documents)} documents" if len(documents) != 1 else type(documents[0]).__name__
        raise YAMLLoadError(str(path), 0, 0, f"expected one mapping, found {what}")
    return documents[0]
