"""Deploying a node on Kubernetes: the manifests rendered from ``deploy/kubernetes``
(docs/installing.md), and the two commands the DaemonSet's pod runs besides the
programs (``python -m plugins.deploy pod-setup`` and ``probe``).

Names are imported on first use (``plugins.sdk.first_use_exports``): the readiness probe
runs every few seconds in each container and needs gRPC alone, not the renderer's
templates, topology compiler and CEL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.sdk import first_use_exports

if TYPE_CHECKING:
    from ._main import main
    from ._pod_setup import TOKENS, PodSetupError, set_up_pod
    from ._probe import not_serving
    from ._render import (
        CONFIG_DIR,
        EXAMPLES_FILE,
        INSTALL_FILE,
        POD_DIR,
        SERVICE_PLUGINS,
        STOP_MARGIN_SECONDS,
        RenderedManifests,
        RenderError,
        device_class_expression,
        render_manifests,
        write_manifests,
    )
    from ._validate import SchemaMissing, latest_schema_version, manifest_problem
    from ._values import Values, ValuesError, load_values

_EXPORTS: dict[str, tuple[str, ...]] = {
    "_main": ("main",),
    "_pod_setup": ("TOKENS", "PodSetupError", "set_up_pod"),
    "_probe": ("not_serving",),
    "_render": (
        "CONFIG_DIR",
        "EXAMPLES_FILE",
        "INSTALL_FILE",
        "POD_DIR",
        "SERVICE_PLUGINS",
        "STOP_MARGIN_SECONDS",
        "RenderError",
        "RenderedManifests",
        "device_class_expression",
        "render_manifests",
        "write_manifests",
    ),
    "_validate": ("SchemaMissing", "latest_schema_version", "manifest_problem"),
    "_values": ("Values", "ValuesError", "load_values"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "CONFIG_DIR",
    "EXAMPLES_FILE",
    "INSTALL_FILE",
    "POD_DIR",
    "SERVICE_PLUGINS",
    "STOP_MARGIN_SECONDS",
    "TOKENS",
    "PodSetupError",
    "RenderError",
    "RenderedManifests",
    "SchemaMissing",
    "Values",
    "ValuesError",
    "device_class_expression",
    "latest_schema_version",
    "load_values",
    "main",
    "manifest_problem",
    "not_serving",
    "render_manifests",
    "set_up_pod",
    "write_manifests",
]

# Hidden from mypy, as in plugins.sdk: the TYPE_CHECKING imports above type the names.
if not TYPE_CHECKING:
    __getattr__, __dir__ = first_use_exports(__name__, _MODULE_OF, globals(), __all__)
