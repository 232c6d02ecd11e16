"""Strict YAML loading: duplicate keys, multi-document files, non-JSON constructs."""

from __future__ import annotations

import pytest

from plugins.coordinator import YAMLLoadError, load_yaml_documents, load_yaml_file
from plugins.sdk import InvalidArgument


def refused(text: str) -> YAMLLoadError:
    with pytest.raises(YAMLLoadError) as info:
        load_yaml_documents(text, "t.yaml")
    return info.value


def test_plain_data_and_multiple_documents() -> None:
    text = "---\na: 1\nb: [x, {c: true}]\n---\n---\nd: null\ne: 1.5\n"
    assert load_yaml_documents(text) == [{"a": 1, "b": ["x", {"c": True}]}, {"d": None, "e": 1.5}]


def test_duplicate_key_names_key_line_and_column() -> None:
    err = refused("spec:\n  steps:\n  - name: a\n    kind: Allocation\n    name: b\n")
    assert (err.line, err.column) == (5, 5)
    assert "duplicate key 'name' (first at line 3)" in str(err)
    assert str(err).startswith("t.yaml:5:5: ")
    assert isinstance(err, InvalidArgument)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: 1\na: 2\n", 2),
        ("x:\n  y:\n    z: 1\n    z: 1\n", 4),
        ("- {k: 1, k: 2}\n", 1),
        ("a: 1\n---\nb: 1\nc: {d: 1}\nb: 2\n", 5),
    ],
)
def test_duplicate_keys_at_any_depth_and_in_any_document(text: str, line: int) -> None:
    err = refused(text)
    assert err.line == line
    assert "duplicate key" in err.problem


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a: &x 1\nb: *x\n", "alias *x"),
        ("<<: {a: 1}\nb: 2\n", "merge keys"),
        ("1: x\n", "not a string"),
        ("on: x\n", "not a string"),
        ("a: !!binary aGk=\n", "binary"),
        ("a: !!set {x}\n", "a set"),
        ("a: !!timestamp 2026-01-01\n", "timestamp"),
        ("a: !custom 1\n", "unknown tag"),
        ("a: .nan\n", "'.nan' is not a finite number"),
        ("a: [1.0, -.inf]\n", "'-.inf' is not a finite number"),
        ("a: [1, 2\n", "expected ','"),
    ],
)
def test_non_json_constructs_are_refused_with_a_position(text: str, problem: str) -> None:
    err = refused(text)
    assert problem in err.problem
    assert err.line >= 1


def test_untagged_dates_stay_strings() -> None:
    assert load_yaml_documents("d: 2026-09-16\n") == [{"d": "2026-09-16"}]


def test_missing_file_is_a_load_error() -> None:
    with pytest.raises(YAMLLoadError, match="No such file"):
        load_yaml_file("/nonexistent/topology.yaml")
