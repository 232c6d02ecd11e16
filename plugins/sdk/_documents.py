"""Files people write, checked against their JSON Schemas.

Every file format (service configs, topologies, exposure policies, inventories, fake
labs) has a JSON Schema (Draft 2020-12) in a ``schemas/`` directory of the package that
reads it, shipped as package data. A loaded document is checked by the validator plugin
configs use (``_config``: integers are not booleans, each unknown key is its own
problem located at the key) and every problem is reported, one line each in the form of
a config error: ``<path>: <why> [<rule>]``. Checks a schema cannot express (one name
referring to another, totals) stay with the reader of the format.

See docs/file-formats.md for the formats.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._config import SchemaCheck, SchemaProblem
from ._errors import InvalidArgument
from ._yaml import load_yaml_mapping

__all__ = [
    "DocumentError",
    "DocumentSchema",
    "load_service_config",
]


class DocumentError(InvalidArgument):
    """A document does not match its file format: names the file and every problem."""

    def __init__(self, source: str, problems: Sequence[SchemaProblem], root: str = "$") -> None:
        self.source = source
        self.problems = tuple(problems)
        self.lines = tuple(p.line(root) for p in self.problems)
        super().__init__(f"{source}: " + "; ".join(self.lines), details={"source": source})


class DocumentSchema:
    """One file format's JSON Schema, checked once (jsonschema only for a bad document)."""

    def __init__(self, schema: Mapping[str, Any], *, root: str = "$") -> None:
        self.schema = schema
        self.root = root
        self._check = SchemaCheck(schema)

    @classmethod
    def packaged(cls, package: str, filename: str, *, root: str = "$") -> DocumentSchema:
        """The schema ``<package>/schemas/<filename>``, read once per process."""
        return _packaged(package, filename, root)

    def problems(self, document: object) -> tuple[SchemaProblem, ...]:
        return self._check.problems(document)

    def check(self, document: object, source: str) -> None:
        """Raise :class:`DocumentError` naming ``source`` and every problem, if any."""
        problems = self.problems(document)
        if problems:
            raise DocumentError(source, problems, self.root)


@functools.cache
def _packaged(package: str, filename: str, root: str) -> DocumentSchema:
    # Package data, not user input: a broken schema is a build error, so no friendly message.
    # Read from the package's directory, as the contract bundles are (the packages are
    # never installed zipped): importlib.resources and what it imports (tempfile,
    # zipfile, ...) cost ~6 ms of CPU at each service start, for one file.
    directory = Path(next(iter(importlib.import_module(package).__path__)))
    text = (directory / "schemas" / filename).read_text(encoding="utf-8")
    return DocumentSchema(json.loads(text), root=root)


SERVICE_CONFIG_SCHEMA = "service-config.schema.json"


def load_service_config(path: Path) -> dict[str, Any]:
    """The administrator's service config (docs/deploying.md), loaded and checked.

    One YAML mapping through the strict loader (a repeated key is refused with its line
    and column), then the schema ``plugins/sdk/schemas/service-config.schema.json``.
    Optional keys set to null are dropped, so the result holds only what was given.
    Raises :class:`YAMLLoadError` or :class:`DocumentError`, both naming ``path``.
    """
    data = load_yaml_mapping(path)
    DocumentSchema.packaged("plugins.sdk", SERVICE_CONFIG_SCHEMA).check(data, str(path))
    return {key: value for key, value in data.items() if value is not None}
