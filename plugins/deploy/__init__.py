"""Deploying a node on Kubernetes: the manifests rendered from ``deploy/kubernetes``
(docs/installing.md), and the two commands the DaemonSet's pod runs besides the
programs (``python -m plugins.deploy pod-setup`` and ``probe``)."""

from __future__ import annotations

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
