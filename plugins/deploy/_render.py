"""Render the Kubernetes manifests of a node deployment from the chart in
``deploy/kubernetes`` (jinja2 templates and ``values.yaml``), all in memory first: a bad
value, a bad node file or a template that does not give YAML writes nothing.

What the templates get besides the values is derived here from the code, so the two
cannot drift: the services and the logical plugins each serves (the socket names), a
DeviceClass per logical plugin whose pinned contract prepares a device (its CEL selector
from the contract's preparation), and per topology (validated as the coordinator
validates it) the requests of its example ResourceClaimTemplate.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import jinja2

from plugins.coordinator import (
    load_inventory,
    load_policies,
    load_topology,
    pinned_descriptors,
    validate_topology,
)
from plugins.sdk import Descriptor, NetworkPluginError, YAMLLoadError, load_yaml_documents

from ._values import Values, load_values

__all__ = [
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
]

SERVICE_PLUGINS: Final[Mapping[str, tuple[str, ...]]] = {
    "vf": ("sriov",),
    "bond": ("bond",),
    "links": ("vlan", "ipvlan", "macvlan"),
}
"""Each service (``networkplugin-<name>``) and the logical plugins it serves, one socket
each (docs/deploying.md; tests/deploy checks it against the services' registrations)."""

CONFIG_DIR: Final = "/etc/dra-networkplugins/config"
"""Where the ConfigMap is mounted in every container."""
POD_DIR: Final = "/etc/dra-networkplugins/pod"
"""The pod's own files (an in-memory emptyDir): the tokens and the coordinator's config
with this node's name, written by the pod-setup init container."""
STOP_MARGIN_SECONDS: Final = 5
"""terminationGracePeriodSeconds = shutdownGraceSeconds + this: the systemd unit's
TimeoutStopSec margin (a program exits at most half a second after its grace)."""

INSTALL_FILE: Final = "dra-networkplugins.yaml"
EXAMPLES_FILE: Final = "examples.yaml"
_INSTALL_TEMPLATES: Final = ("namespace", "rbac", "configmap", "deviceclasses", "daemonset")
_EXAMPLE_TEMPLATES: Final = ("examples",)
_HEADER: Final = (
    "# Rendered by scripts/render-manifests from deploy/kubernetes (docs/installing.md):\n"
    "# change the values and render again rather than editing this file.\n"
)


class RenderError(ValueError):
    """The manifests cannot be rendered: one line naming what is wrong."""


@dataclass(frozen=True)
class RenderedManifests:
    """Every rendered object (what a node needs, and the examples per topology) and the
    text of the two files they are parsed from."""

    install: tuple[dict[str, Any], ...]
    examples: tuple[dict[str, Any], ...]
    texts: Mapping[str, str]
    """File name -> its text: the templates' output, comments kept, as validated."""

    def files(self) -> dict[str, str]:
        return dict(self.texts)


def device_class_expression(descriptor: Descriptor, driver: str) -> str | None:
    """The CEL selector of the DeviceClass of a logical plugin, from what its contract
    prepares; None for a plugin that prepares no device (Operation steps only)."""
    preparation = descriptor.preparation
    if preparation.semantics == "none" or preparation.device_type is None:
        return None
    attributes = f"device.attributes[{json.dumps(driver)}]"
    # exposure policies name the plugins a device they publish is for (comma-separated)
    listed = f"{attributes}.supportedNetworkPlugins.matches({json.dumps(f'(^|,){descriptor.name}(,|$)')})"
    has_list = f'"supportedNetworkPlugins" in {attributes}'
    common = f"device.driver == {json.dumps(driver)} && {attributes}.type == {json.dumps(preparation.device_type)}"
    if preparation.semantics == "shared-unit":
        # a shared parent is published once per policy, for the plugins that policy names
        return f"{common} && {has_list} && {listed}"
    # an exclusive device: unexposed, or exposed for this plugin
    return f"{common} && (!({has_list}) || {listed})"


def render_manifests(chart: Path, values_file: Path | None = None) -> RenderedManifests:
    """Render ``chart`` (``templates/`` and ``values.yaml``) with ``values_file``'s
    overrides; raise :class:`~plugins.deploy.ValuesError` or :class:`RenderError`."""
    values = load_values(chart / "values.yaml", values_file)
    descriptors = pinned_descriptors()
    context = _context(values, descriptors)
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(chart / "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    # a JSON string or value is YAML too, and quotes whatever it holds (jinja's own
    # tojson escapes &, < and > for HTML)
    environment.filters["json"] = lambda value: json.dumps(value, ensure_ascii=False)
    install_text, install = _render(environment, _INSTALL_TEMPLATES, context)
    examples_text, examples = _render(environment, _EXAMPLE_TEMPLATES, context)
    return RenderedManifests(
        install, examples, {INSTALL_FILE: install_text, EXAMPLES_FILE: examples_text}
    )


def write_manifests(rendered: RenderedManifests, out_dir: Path) -> list[Path]:
    """Write the rendered files into ``out_dir`` (created if missing), each atomically; a
    file whose content is already that is left alone. The files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in rendered.files().items():
        target = out_dir / name
        if target.exists() and target.read_text(encoding="utf-8") == text:
            continue
        fd, staging = tempfile.mkstemp(prefix=f".{name}.", dir=out_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.chmod(staging, 0o644)
            os.replace(staging, target)
        except BaseException:
            Path(staging).unlink(missing_ok=True)
            raise
        written.append(target)
    return written


def _context(values: Values, descriptors: Mapping[str, Descriptor]) -> dict[str, Any]:
    driver = values["driver"]
    classes = []
    for name, descriptor in sorted(descriptors.items()):
        expression = device_class_expression(descriptor, driver)
        if expression is not None:
            classes.append({"plugin": name, "name": f"{name}.{driver}", "expression": expression})
    class_of = {c["plugin"]: c["name"] for c in classes}
    node_files, topology_keys, examples = _node_files(values, descriptors, class_of)
    return {
        "v": values,
        "image": f"{values['image']['repository']}:{values['image']['tag']}",
        "config_dir": CONFIG_DIR,
        "pod_dir": POD_DIR,
        "nri_dir": str(Path(values["nri"]["socket"]).parent),
        "termination_grace_seconds": values["shutdownGraceSeconds"] + STOP_MARGIN_SECONDS,
        "services": [
            {
                "name": name,
                "plugins": plugins,
                "sockets": [f"{values['hostPaths']['run']}/{name}/{p}.sock" for p in plugins],
            }
            for name, plugins in SERVICE_PLUGINS.items()
        ],
        "device_classes": classes,
        "node_files": node_files,
        "topology_keys": topology_keys,
        "examples": examples,
    }


def _node_files(
    values: Values, descriptors: Mapping[str, Descriptor], class_of: Mapping[str, str]
) -> tuple[list[tuple[str, str]], list[str], list[dict[str, Any]]]:
    """The node's files for the ConfigMap (key, text), the topologies' keys, and an
    example per topology; each file checked as the coordinator checks it at start."""
    node = values["node"]
    try:
        load_inventory(node["inventory"])
        policies = load_policies(node["policies"])
        topologies = [(Path(p), load_topology(p)) for p in node["topologies"]]
        for _, topology in topologies:
            validate_topology(topology, descriptors, policies)
    except (NetworkPluginError, OSError) as exc:
        raise RenderError(f"node files: {' '.join(str(exc).split())}") from None
    files = [
        ("inventory.yaml", Path(node["inventory"]).read_text(encoding="utf-8")),
        ("policies.yaml", Path(node["policies"]).read_text(encoding="utf-8")),
    ]
    keys: list[str] = []
    examples = []
    for path, topology in topologies:
        key = f"topology-{path.name}"
        if key in keys:
            raise RenderError(f"node.topologies: two files named {path.name}")
        keys.append(key)
        files.append((key, path.read_text(encoding="utf-8")))
        requests = [
            {
                "name": step.name,
                "device_class": class_of[step.plugin_ref.name],
                "expression": step.allocation.selector.cel,
                "capacity": dict(step.allocation.capacity_requests),
            }
            for step in topology.steps
            if step.allocation is not None
        ]
        examples.append({"name": topology.name, "topology": topology.name, "requests": requests})
    return files, keys, examples


def _render(
    environment: jinja2.Environment, names: Sequence[str], context: Mapping[str, Any]
) -> tuple[str, tuple[dict[str, Any], ...]]:
    """The templates' output as one YAML stream, and its objects."""
    parts = [_HEADER]
    objects: list[dict[str, Any]] = []
    for name in names:
        source = f"templates/{name}.yaml.j2"
        try:
            text = environment.get_template(f"{name}.yaml.j2").render(context).strip()
        except jinja2.TemplateError as exc:
            raise RenderError(f"{source}: {type(exc).__name__}: {exc}") from None
        try:
            documents = load_yaml_documents(text, source)
        except YAMLLoadError as exc:
            raise RenderError(f"{source} does not render to YAML: {exc}") from None
        for document in documents:
            if not isinstance(document, dict) or "kind" not in document:
                raise RenderError(f"{source}: a document that is no Kubernetes object")
            objects.append(document)
        parts.append(text if text.startswith("---") else f"---\n{text}")
    return "\n".join(parts) + "\n", tuple(objects)
