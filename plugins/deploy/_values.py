"""The values the Kubernetes manifests are rendered from, read strictly.

The chart's own ``values.yaml`` is the defaults and the schema at once: a values file of
the operator's overrides any of its keys, and a key the defaults do not have, or a value
of another type than the default's, is refused with one line naming the key
(:class:`ValuesError`). Two keys are free-form because Kubernetes defines their content:
``nodeSelector`` (string to string) and ``tolerations`` (a list of mappings, checked by
the manifests' validation). Then the values the templates put into YAML unquoted are
checked against the patterns they must have (a path, a DNS label, a log level), so a
value can never change the YAML around it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from plugins.sdk import YAMLLoadError, load_yaml_documents

__all__ = ["Values", "ValuesError", "load_values"]

# keys whose value is a path to a file read at render time, relative to the file naming it
_FILE_KEYS: Final = frozenset({"node.inventory", "node.policies", "node.topologies"})
# keys whose content Kubernetes defines (checked by the manifests' validation)
_FREE_FORM: Final = frozenset({"nodeSelector", "tolerations"})

_ABSOLUTE_PATH: Final = re.compile(r"/[A-Za-z0-9._/-]*")
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_IMAGE_REPOSITORY: Final = re.compile(r"[a-z0-9]+([._/:-][a-z0-9]+)*")
_IMAGE_TAG: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_IMAGE_REFERENCE: Final = re.compile(r"[a-z0-9]+([._/:-][a-z0-9]+)*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?")
_LABEL_KEY: Final = re.compile(
    r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
_LABEL_VALUE: Final = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")

# key -> (pattern, what it must be), for the strings the templates interpolate unquoted
_PATTERNS: Final[dict[str, tuple[re.Pattern[str], str]]] = {
    "namespace": (_DNS_LABEL, "a DNS label"),
    "driver": (_DNS_SUBDOMAIN, "a DNS subdomain"),
    "image.repository": (_IMAGE_REPOSITORY, "an image repository (registry/name)"),
    "image.tag": (_IMAGE_TAG, "an image tag"),
    "image.pullPolicy": (re.compile(r"Always|IfNotPresent|Never"), "Always, IfNotPresent or Never"),
    "image.binDir": (_ABSOLUTE_PATH, "an absolute path"),
    "priorityClassName": (_DNS_SUBDOMAIN, "a DNS subdomain"),
    "logLevel": (
        re.compile(r"DEBUG|INFO|WARNING|ERROR|CRITICAL"),
        "DEBUG, INFO, WARNING, ERROR or CRITICAL",
    ),
    "logFormat": (re.compile(r"text|json"), "text or json"),
    "nri.socket": (_ABSOLUTE_PATH, "an absolute path"),
    "nri.index": (re.compile(r"[0-9]{2}"), "two digits"),
    "hostPaths.kubeletPlugins": (_ABSOLUTE_PATH, "an absolute path"),
    "hostPaths.kubeletRegistry": (_ABSOLUTE_PATH, "an absolute path"),
    "hostPaths.netns": (_ABSOLUTE_PATH, "an absolute path"),
    "hostPaths.state": (_ABSOLUTE_PATH, "an absolute path"),
    "hostPaths.run": (_ABSOLUTE_PATH, "an absolute path"),
    "examples.namespace": (_DNS_LABEL, "a DNS label"),
    "examples.image": (_IMAGE_REFERENCE, "an image reference"),
}

Values = dict[str, Any]


class ValuesError(ValueError):
    """A values file that cannot be rendered: one line naming the file and the key."""


def load_values(defaults: Path, overrides: Path | None = None) -> Values:
    """The chart's defaults with ``overrides`` merged in, checked (module docstring).

    File paths under ``node`` come back absolute, resolved against the file that named
    them."""
    base = _resolve_files(_read(defaults), defaults.parent)
    values = copy.deepcopy(base)
    if overrides is not None:
        _merge(values, base, _resolve_files(_read(overrides), overrides.parent), overrides, "")
    for key, (pattern, what) in _PATTERNS.items():
        value = _at(values, key)
        if pattern.fullmatch(value) is None:
            raise ValuesError(f"values {overrides or defaults}: {key}: {value!r} is not {what}")
    if values["shutdownGraceSeconds"] < 0:
        raise ValuesError(
            f"values {overrides or defaults}: shutdownGraceSeconds: "
            f"{values['shutdownGraceSeconds']} is negative"
        )
    state = values["hostPaths"]["state"]
    if state == "/run" or state.startswith("/run/"):
        raise ValuesError(
            f"values {overrides or defaults}: hostPaths.state: {state} is under /run, which "
            "is emptied at every boot; the journals must be on the host's disk"
        )
    return values


def _read(path: Path) -> Values:
    try:
        documents = load_yaml_documents(path.read_bytes(), str(path))
    except YAMLLoadError as exc:
        raise ValuesError(f"values {exc}") from None
    except OSError as exc:
        raise ValuesError(f"values {path}: {exc.strerror or exc}") from None
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise ValuesError(f"values {path}: expected one mapping")
    return documents[0]


def _resolve_files(data: Values, base: Path) -> Values:
    """``data`` with the file paths under ``node`` made absolute against ``base``."""
    node = data.get("node")
    if not isinstance(node, dict):
        return data
    resolved = dict(node)
    for key, value in node.items():
        if f"node.{key}" not in _FILE_KEYS:
            continue
        if isinstance(value, str):
            resolved[key] = str((base / value).resolve())
        elif isinstance(value, list):
            resolved[key] = [str((base / v).resolve()) if isinstance(v, str) else v for v in value]
    return {**data, "node": resolved}


def _merge(
    into: Values, schema: Mapping[str, Any], given: Mapping[str, Any], path: Path, prefix: str
) -> None:
    for key, value in given.items():
        name = f"{prefix}{key}"
        if key not in schema:
            known = ", ".join(sorted(schema))
            raise ValuesError(f"values {path}: {name}: unknown key (known here: {known})")
        default = schema[key]
        if name in _FREE_FORM:
            _check_free_form(name, value, path)
            into[key] = value
        elif isinstance(default, dict):
            if not isinstance(value, dict):
                raise ValuesError(f"values {path}: {name}: expected a mapping, got {_kind(value)}")
            _merge(into[key], default, value, path, f"{name}.")
        else:
            _check_type(name, default, value, path)
            into[key] = value


def _check_type(name: str, default: object, value: object, path: Path) -> None:
    if isinstance(default, list):
        if not isinstance(value, list):
            raise ValuesError(f"values {path}: {name}: expected a list, got {_kind(value)}")
        if default:
            for i, item in enumerate(value):
                _check_type(f"{name}[{i}]", default[0], item, path)
        return
    if _kind(value) != _kind(default):
        raise ValuesError(f"values {path}: {name}: expected {_kind(default)}, got {_kind(value)}")


def _check_free_form(name: str, value: object, path: Path) -> None:
    if name == "nodeSelector":
        if not isinstance(value, dict):
            raise ValuesError(f"values {path}: {name}: expected a mapping, got {_kind(value)}")
        for label, text in value.items():
            if not isinstance(text, str):
                raise ValuesError(
                    f"values {path}: {name}.{label}: expected a string, got {_kind(text)}"
                )
            if _LABEL_KEY.fullmatch(label) is None or _LABEL_VALUE.fullmatch(text) is None:
                raise ValuesError(
                    f"values {path}: {name}.{label}: not a label selector {label}={text}"
                )
    elif not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ValuesError(f"values {path}: {name}: expected a list of mappings, got {_kind(value)}")


def _kind(value: object) -> str:
    # bool before int: a YAML true is no number here
    for python, name in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a number"),
        (str, "a string"),
        (list, "a list"),
        (dict, "a mapping"),
    ):
        if isinstance(value, python):
            return name
    return "null" if value is None else type(value).__name__


def _at(values: Values, key: str) -> Any:
    node: Any = values
    for part in key.split("."):
        node = node[part]
    return node
