"""Validating rendered objects against the Kubernetes API's schemas, with
``kubernetes-validate`` (a development dependency: the product does not need it to run,
so it is imported only when asked for).

The schemas are the OpenAPI ones of each release, in their strict form (an unknown
field is an error, as ``kubectl apply --validate=strict`` says). They check structure and
types; what the API server alone checks (CEL ``x-kubernetes-validations`` rules, a
selector's expression compiling, admission) is not checked here.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["SchemaMissing", "latest_schema_version", "manifest_problem"]


class SchemaMissing(LookupError):
    """kubernetes-validate carries no schema for this kind at this version."""


def _library() -> Any:
    try:
        return importlib.import_module("kubernetes_validate")
    except ImportError:
        raise LookupError(
            "kubernetes-validate is not installed (it is in the development dependency group: uv sync)"
        ) from None


def latest_schema_version() -> str:
    """The newest Kubernetes release whose schemas the installed library carries."""
    return str(_library().latest_version())


def manifest_problem(obj: Mapping[str, Any], version: str) -> str | None:
    """One line saying why ``obj`` does not validate against ``version``'s schema (with
    the field's path), or None when it does; :class:`SchemaMissing` when there is none."""
    library = _library()
    what = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
    try:
        library.validate(dict(obj), version, strict=True)
    except library.SchemaNotFoundError as exc:
        raise SchemaMissing(f"{what}: {exc.message}") from None
    except library.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path) or "(the object)"
        message = " ".join(str(exc.message).split())
        return f"{what} does not validate against Kubernetes {exc.version}: {where}: {message}"
    return None
