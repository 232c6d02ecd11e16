"""Pinned contract bundles: the source of every complete descriptor.

A bundle is a JSON file ``<root>/<schema-id>.json`` (for example
``plugins/contracts/bond/v1alpha1.json``). The artifact pins each bundle's
SHA-256 in ``pins.json`` beside them, so a descriptor can never silently drift
from what the artifact was approved with.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._accept import Accept, compile_accept
from ._config import ConfigValidator
from ._descriptor import Descriptor, PortSpec, Preparation
from ._errors import ConfigError, RegistrationError
from ._types import Hook, StepKind

if TYPE_CHECKING:
    import jsonschema

DEFAULT_BUNDLE_ROOT = Path(__file__).resolve().parent.parent / "contracts"
PINS_FILE = "pins.json"
BUNDLE_FORMAT = "dra-networkplugins.contract-bundle/v1"
MAX_BUNDLE_BYTES = 1 << 20

_PORT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "type", "min", "max"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,31}$"},
        "type": {"type": "string", "pattern": "^[A-Za-z]+/v[0-9]+$"},
        "min": {"type": "integer", "minimum": 0},
        "max": {"type": "integer", "minimum": 1},
    },
}
_EFFECT_KINDS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}

# The shape of a bundle file itself; checked before a descriptor is built from it.
BUNDLE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": [
        "bundleFormat",
        "schemaId",
        "plugin",
        "contractVersion",
        "profile",
        "stepKinds",
        "stateFormat",
        "preparation",
        "inputs",
        "outputs",
        "interfaceNames",
        "allowedEffects",
        "configSchema",
        "crossFieldRules",
        "examples",
    ],
    "properties": {
        "bundleFormat": {"const": BUNDLE_FORMAT},
        "schemaId": {"type": "string", "pattern": "^[a-z0-9-]+/v[0-9]+(alpha[0-9]+|beta[0-9]+)?$"},
        "plugin": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,62}$"},
        "contractVersion": {"type": "string", "pattern": "^v[0-9]+(alpha[0-9]+|beta[0-9]+)?$"},
        "profile": {"type": "string", "minLength": 1},
        "stepKinds": {
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": {"enum": [k.value for k in StepKind]},
        },
        "stateFormat": {"type": "string", "minLength": 1},
        "preparation": {
            "type": "object",
            "additionalProperties": False,
            "required": ["semantics", "deviceType", "capacity", "outputs"],
            "properties": {
                "semantics": {"enum": ["exclusive-device", "shared-unit", "none"]},
                "deviceType": {"type": ["string", "null"]},
                "capacity": {"type": ["string", "null"]},
                "outputs": {"type": "array", "items": _PORT},
            },
        },
        "inputs": {"type": "array", "items": _PORT},
        "outputs": {"type": "array", "items": _PORT},
        "interfaceNames": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "allowedEffects": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                h.value: _EFFECT_KINDS for h in (Hook.NODE_PREPARE, Hook.CONNECT_NETWORK)
            },
        },
        "configSchema": {"type": "object"},
        "crossFieldRules": {"type": "array", "items": {"type": "object"}},
        "examples": {
            "type": "object",
            "additionalProperties": False,
            "required": ["valid", "invalid"],
            "properties": {
                "valid": {"type": "array", "items": {"type": "object"}},
                "invalid": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["config", "path", "rule"],
                        "properties": {
                            "config": {},
                            "path": {"type": "string"},
                            "rule": {"type": "string"},
                        },
                    },
                },
            },
        },
    },
}


def file_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Bundle:
    """A loaded, verified bundle: its complete descriptor, validator and examples."""

    def __init__(self, raw: bytes, data: Mapping[str, Any]) -> None:
        self.digest = file_digest(raw)
        self.data = data
        self.validator = ConfigValidator(data["configSchema"], data["crossFieldRules"])
        prep = data["preparation"]
        self.descriptor = Descriptor(
            name=data["plugin"],
            contract_version=data["contractVersion"],
            step_kinds=tuple(StepKind(k) for k in data["stepKinds"]),
            config_schema_id=data["schemaId"],
            profile=data["profile"],
            config_schema=data["configSchema"],
            cross_field_rules=tuple(data["crossFieldRules"]),
            inputs=tuple(PortSpec(**p) for p in data["inputs"]),
            outputs=tuple(PortSpec(**p) for p in data["outputs"]),
            interface_names=tuple(data["interfaceNames"]),
            preparation=Preparation(
                semantics=prep["semantics"],
                device_type=prep["deviceType"],
                capacity=prep["capacity"],
                outputs=tuple(PortSpec(**p) for p in prep["outputs"]),
            ),
            allowed_effects={h: tuple(k) for h, k in data["allowedEffects"].items()},
            state_format=data["stateFormat"],
            bundle_digest=self.digest,
        )

    @property
    def valid_examples(self) -> list[Any]:
        return list(self.data["examples"]["valid"])

    @property
    def invalid_examples(self) -> list[Mapping[str, Any]]:
        return list(self.data["examples"]["invalid"])


class BundleStore:
    """Loads bundles from one root directory, verifying each against its pin."""

    def __init__(self, root: Path = DEFAULT_BUNDLE_ROOT, pins: Mapping[str, str] | None = None):
        self.root = root
        self._pins = dict(pins) if pins is not None else self._read_pins()
        self._cache: dict[str, Bundle] = {}

    def _read_pins(self) -> dict[str, str]:
        path = self.root / PINS_FILE
        try:
            pins = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise RegistrationError(f"contract pins {path}: unreadable ({exc})") from exc
        if not isinstance(pins, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in pins.items()
        ):
            raise RegistrationError(f"contract pins {path}: not a map of schema id to digest")
        return pins

    @property
    def schema_ids(self) -> list[str]:
        return sorted(self._pins)

    def load(self, schema_id: str) -> Bundle:
        if schema_id not in self._cache:
            self._cache[schema_id] = self._load(schema_id)
        return self._cache[schema_id]

    def _load(self, schema_id: str) -> Bundle:
        pin = self._pins.get(schema_id)
        if pin is None:
            raise RegistrationError(f"contract bundle {schema_id!r}: not pinned by this artifact")
        path = self.root / f"{schema_id}.json"
        if path.resolve().parent.parent != self.root.resolve():
            raise RegistrationError(f"contract bundle {schema_id!r}: invalid schema id")
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise RegistrationError(f"contract bundle {schema_id!r}: missing ({exc})") from exc
        if file_digest(raw) != pin:
            raise RegistrationError(
                f"contract bundle {schema_id!r}: digest {file_digest(raw)} does not match pin {pin}"
            )
        return _build_bundle(schema_id, raw)


@functools.cache
def pinned_bundles() -> BundleStore:
    """The artifact's own bundles (``DEFAULT_BUNDLE_ROOT``), loaded and checked against
    their pins once per process.

    They do not change under a running process, and a fresh store per registry, per
    ``describe()`` or per descriptor table read the pins and hashed each bundle again at
    every start of a service (the rig starts services a thousand times, in-process and
    not). A store that fails to open is not remembered.
    """
    return BundleStore()


@functools.lru_cache(maxsize=64)
def _build_bundle(schema_id: str, raw: bytes) -> Bundle:
    """Parse and check a pinned bundle; the same bytes always give the same immutable Bundle."""
    data = _parse_bundle(schema_id, raw)
    if data["schemaId"] != schema_id:
        raise RegistrationError(
            f"contract bundle {schema_id!r}: file declares schemaId {data['schemaId']!r}"
        )
    try:
        return Bundle(raw, data)
    except ValueError as exc:
        raise RegistrationError(f"contract bundle {schema_id!r}: {exc}") from exc


def _parse_bundle(schema_id: str, raw: bytes) -> dict[str, Any]:
    # Reuse the strict config parser: bundles get the same duplicate-key rejection.
    from ._config import parse_config_json

    try:
        data = parse_config_json(raw, max_bytes=MAX_BUNDLE_BYTES, max_depth=32)
    except ConfigError as exc:
        raise RegistrationError(f"contract bundle {schema_id!r}: {exc}") from exc
    if _bundle_accept()(data):
        return data
    validator = _bundle_validator()
    if validator.is_valid(data):  # jsonschema has the last word on a refusal
        return data
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
    raise RegistrationError(f"contract bundle {schema_id!r}: {where}: {errors[0].message}")


@functools.cache
def _bundle_accept() -> Accept:
    """``BUNDLE_SCHEMA``'s accept path (no jsonschema; tests/unit/test_schema_differential.py holds that
    ``_accept`` vouches for it)."""
    accept = compile_accept(BUNDLE_SCHEMA, strict=False)
    if accept is None:  # pragma: no cover - a build error, caught by the test
        raise AssertionError("BUNDLE_SCHEMA is outside what _accept compiles")
    return accept


@functools.cache
def _bundle_validator() -> jsonschema.Draft202012Validator:
    """``BUNDLE_SCHEMA`` compiled once per process (jsonschema decides a bundle's shape)."""
    import jsonschema

    return jsonschema.Draft202012Validator(BUNDLE_SCHEMA)
