"""Every file format has a JSON Schema checked by the config validator, path + rule errors."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from plugins.sdk import (
    DocumentError,
    DocumentSchema,
    YAMLLoadError,
    load_service_config,
)

# Every packaged schema, by (package, file): docs/file-formats.md lists the same.
PACKAGED = [
    ("plugins.sdk", "service-config.schema.json"),
    ("plugins.coordinator", "coordinator-config.schema.json"),
    ("plugins.coordinator", "network-topology.schema.json"),
    ("plugins.coordinator", "device-exposure-policy.schema.json"),
    ("plugins.coordinator", "device-inventory.schema.json"),
    ("fakekernel", "lab.schema.json"),
    ("conformance", "wire-target.schema.json"),
]

GOOD = "socketDir: sock\nstateDir: state\ntokenFile: token\nkernel: kernel+unix:///k.sock\n"


@pytest.mark.parametrize(("package", "filename"), PACKAGED)
def test_every_packaged_schema_is_a_valid_2020_12_schema(package: str, filename: str) -> None:
    schema = DocumentSchema.packaged(package, filename)
    assert schema.schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    text = resources.files(package).joinpath("schemas", filename).read_text()
    assert json.loads(text) == schema.schema


def test_a_service_config_loads_without_its_null_keys(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD + "bootId: null\nshutdownGraceSeconds: 2.5\n")
    assert load_service_config(path) == {
        "socketDir": "sock",
        "stateDir": "state",
        "tokenFile": "token",
        "kernel": "kernel+unix:///k.sock",
        "shutdownGraceSeconds": 2.5,
    }


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        ("stateDri: x\n", "$.stateDri: unknown key 'stateDri' [unknown-key]"),
        ("shutdownGraceSeconds: -1\n", "$.shutdownGraceSeconds: must be >= 0, got -1 [range]"),
        ("shutdownGraceSeconds: true\n", "$.shutdownGraceSeconds: must be of type number or null"),
        ("runtimeDir: ''\n", "$.runtimeDir: must have at least 1 characters, got 0 [size]"),
        ("bootId: 7\n", "$.bootId: must be of type string or null, got integer 7 [type]"),
    ],
)
def test_a_bad_service_config_names_the_file_path_and_rule(
    tmp_path: Path, extra: str, line: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD + extra)
    with pytest.raises(DocumentError) as info:
        load_service_config(path)
    assert info.value.source == str(path)
    assert str(info.value).startswith(f"{path}: {line}")


def test_every_service_config_problem_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("stateDir: state\nkernel: 5\n")
    with pytest.raises(DocumentError) as info:
        load_service_config(path)
    assert info.value.lines == (
        "$.socketDir: missing required field 'socketDir' [required]",
        "$.tokenFile: missing required field 'tokenFile' [required]",
        "$.kernel: must be of type string, got integer 5 [type]",
    )
    assert [p.rule for p in info.value.problems] == ["required", "required", "type"]


def test_a_service_config_with_a_duplicate_key_is_refused_with_its_place(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD + "stateDir: other\n")
    with pytest.raises(YAMLLoadError) as info:
        load_service_config(path)
    assert (info.value.source, info.value.line, info.value.column) == (str(path), 5, 1)
    assert info.value.problem == "duplicate key 'stateDir' (first at line 2)"


def test_a_schema_problem_is_reported_at_a_bad_key_of_a_map() -> None:
    schema = DocumentSchema(
        {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}}, root="doc"
    )
    (problem,) = schema.problems({"ok": 1, "Bad": 2})
    assert problem.line("doc") == 'doc.Bad: must match pattern "^[a-z]+$", got "Bad" [pattern]'
