"""The Kubernetes manifests (deploy/kubernetes, rendered by plugins.deploy): every object
validates against Kubernetes 1.34 and the newest schemas kubernetes-validate carries;
the ClusterRole is exactly what the coordinator asks of the API server; the DeviceClasses
select what the coordinator publishes; the configs in the ConfigMap load with the
programs' own loaders and name paths the containers mount; bad values and a manifest
that does not validate are refused in one line with nothing written."""

from __future__ import annotations

import functools
import re
import stat
import subprocess
import sys
from collections.abc import Iterator, Mapping
from concurrent import futures
from pathlib import Path
from typing import Any

import celpy
import grpc
import pytest

from harness.k8s.kubelet import PodClaim
from harness.k8s.nri_runtime import SimSandbox
from harness.k8s.wire_node import DRIVER, claim_object, wired_node
from plugins.coordinator import (
    CoordinatorConfig,
    Device,
    PublishedDevice,
    load_inventory,
    load_policies,
    pinned_descriptors,
    publish,
)
from plugins.deploy import (
    EXAMPLES_FILE,
    INSTALL_FILE,
    SERVICE_PLUGINS,
    STOP_MARGIN_SECONDS,
    TOKENS,
    PodSetupError,
    RenderedManifests,
    SchemaMissing,
    latest_schema_version,
    load_values,
    main,
    manifest_problem,
    not_serving,
    render_manifests,
    set_up_pod,
    write_manifests,
)
from plugins.sdk import Registry, StepKind
from plugins.sdk.host import add_health_service
from plugins.sdk.service import ServiceConfig
from plugins.services import SERVICES

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "kubernetes"
TOPOLOGIES = REPO / "topologies"
OLDEST_SUPPORTED = "1.34"
NO_SCHEMA: Mapping[tuple[str, str], str] = {}
"""(kind, version) -> why kubernetes-validate has no schema for it: such an object is
skipped with that reason (none today: 1.34 and the newest carry every kind we render)."""


@functools.cache
def rendered() -> RenderedManifests:
    return render_manifests(CHART)


def objects() -> list[dict[str, Any]]:
    return [*rendered().install, *rendered().examples]


def the(kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [o for o in objects() if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    return found


def versions() -> list[str]:
    return [OLDEST_SUPPORTED, latest_schema_version()]


# -- validation ----------------------------------------------------------------------


def test_the_newest_schemas_are_newer_than_the_oldest_supported_release() -> None:
    """Two validations, not the same one twice."""
    newest = tuple(int(p) for p in latest_schema_version().split(".")[:2])
    assert newest > (1, 34), latest_schema_version()


@pytest.mark.parametrize("version", ["1.34", "latest"])
@pytest.mark.parametrize(
    "index", range(len(objects())), ids=[f"{o['kind']}-{o['metadata']['name']}" for o in objects()]
)
def test_every_rendered_object_validates(index: int, version: str) -> None:
    obj = objects()[index]
    resolved = latest_schema_version() if version == "latest" else version
    reason = NO_SCHEMA.get((obj["kind"], resolved))
    if reason is not None:
        pytest.skip(f"kubernetes-validate {resolved} has no schema for {obj['kind']}: {reason}")
    try:
        problem = manifest_problem(obj, resolved)
    except SchemaMissing as exc:
        pytest.fail(f"{exc} (list it in NO_SCHEMA with the reason, or render another kind)")
    assert problem is None, problem


def test_what_is_rendered_has_every_kind_a_node_needs() -> None:
    kinds = sorted({o["kind"] for o in rendered().install})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
        "DeviceClass",
        "Namespace",
        "ServiceAccount",
    ]
    assert {o["kind"] for o in rendered().examples} == {"Pod", "ResourceClaimTemplate"}


def test_a_broken_manifest_fails_with_a_line_naming_the_field() -> None:
    daemonset = the("DaemonSet")
    broken = {
        **daemonset,
        "spec": {
            **daemonset["spec"],
            "template": {
                "spec": {"containers": [{"name": "x", "capabilities": {"add": ["NET_ADMIN"]}}]}
            },
        },
    }
    problem = manifest_problem(broken, OLDEST_SUPPORTED)
    assert problem is not None
    assert problem.startswith(
        "DaemonSet dra-networkplugins does not validate against Kubernetes 1.34: "
    )
    assert "spec.template.spec.containers.0" in problem
    assert "'capabilities' was unexpected" in problem
    assert "\n" not in problem


def test_a_value_that_breaks_the_manifests_is_refused_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("tolerations: [{key: dedicated, operatorr: Exists}]\n")
    out = tmp_path / "out"
    assert (
        main(
            [
                "render",
                "--chart",
                str(CHART),
                "--values",
                str(values),
                "--out",
                str(out),
                "--validate",
                "1.34",
            ]
        )
        == 2
    )
    (line,) = capsys.readouterr().err.splitlines()
    assert "DaemonSet dra-networkplugins does not validate against Kubernetes 1.34" in line
    assert "spec.template.spec.tolerations.0" in line
    assert "operatorr" in line
    assert not out.exists()


# -- values ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "image:\n  tagg: v1\n",
            "image.tagg: unknown key (known here: binDir, pullPolicy, repository, tag)",
        ),
        ("logLevl: DEBUG\n", "logLevl: unknown key"),
        ("shutdownGraceSeconds: '10'\n", "shutdownGraceSeconds: expected an integer, got a string"),
        (
            "shutdownGraceSeconds: true\n",
            "shutdownGraceSeconds: expected an integer, got a boolean",
        ),
        ("hostPaths: /var/lib\n", "hostPaths: expected a mapping, got a string"),
        ("node:\n  topologies: [1]\n", "node.topologies[0]: expected a string, got an integer"),
        ("nodeSelector: [linux]\n", "nodeSelector: expected a mapping, got a list"),
        ("nodeSelector: {role: 3}\n", "nodeSelector.role: expected a string, got an integer"),
        ("hostPaths: {state: var/lib/x}\n", "hostPaths.state: 'var/lib/x' is not an absolute path"),
        ("hostPaths: {state: /run/dra}\n", "hostPaths.state: /run/dra is under /run"),
        (
            "logLevel: verbose\n",
            "logLevel: 'verbose' is not DEBUG, INFO, WARNING, ERROR or CRITICAL",
        ),
        ("namespace: 'a b'\n", "namespace: 'a b' is not a DNS label"),
        ("shutdownGraceSeconds: -1\n", "shutdownGraceSeconds: -1 is negative"),
    ],
)
def test_bad_values_are_one_line_naming_the_key_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(text)
    out = tmp_path / "out"
    assert main(["render", "--chart", str(CHART), "--values", str(values), "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"python -m plugins.deploy render: values {values}: ")
    assert expected in line
    assert not out.exists()


def test_values_override_the_defaults_and_name_files_relative_to_themselves(tmp_path: Path) -> None:
    (tmp_path / "only.yaml").write_text((TOPOLOGIES / "macvlan.yaml").read_text())
    values = tmp_path / "values.yaml"
    values.write_text(
        "image: {tag: v9}\nnodeSelector: {node-role.example.com/sriov: 'true'}\n"
        "shutdownGraceSeconds: 20\nnode: {topologies: [only.yaml]}\n"
    )
    merged = load_values(CHART / "values.yaml", values)
    assert merged["image"] == {**load_values(CHART / "values.yaml")["image"], "tag": "v9"}
    assert merged["node"]["topologies"] == [str(tmp_path / "only.yaml")]
    assert merged["node"]["inventory"] == str(TOPOLOGIES / "inventory.yaml")
    manifests = render_manifests(CHART, values)
    pod = next(o for o in manifests.install if o["kind"] == "DaemonSet")["spec"]["template"]
    assert pod["spec"]["terminationGracePeriodSeconds"] == 20 + STOP_MARGIN_SECONDS
    assert pod["spec"]["nodeSelector"] == {"node-role.example.com/sriov": "true"}
    assert {c["image"] for c in pod["spec"]["containers"]} == {"localhost/dra-networkplugins:v9"}
    assert [o["metadata"]["name"] for o in manifests.examples] == ["sdk-macvlan", "sdk-macvlan"]


def test_a_topology_the_coordinator_would_refuse_is_refused_at_render(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (TOPOLOGIES / "macvlan.yaml")
        .read_text()
        .replace("pluginRef:\n      name: macvlan", "pluginRef:\n      name: macvlann")
    )
    values = tmp_path / "values.yaml"
    values.write_text("node: {topologies: [bad.yaml]}\n")
    assert (
        main(
            [
                "render",
                "--chart",
                str(CHART),
                "--values",
                str(values),
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m plugins.deploy render: node files: ")
    assert "macvlann" in line
    assert not (tmp_path / "out").exists()


def test_rendering_again_writes_nothing_and_gives_the_same_bytes(tmp_path: Path) -> None:
    first = write_manifests(rendered(), tmp_path)
    assert sorted(p.name for p in first) == sorted([INSTALL_FILE, EXAMPLES_FILE])
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in first}
    assert write_manifests(render_manifests(CHART), tmp_path) == []
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in first} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before)


# -- RBAC ------------------------------------------------------------------------------

_CLAIM_PATH = re.compile(
    r"/apis/resource\.k8s\.io/v1/namespaces/[^/]+/resourceclaims/[^/]+(?P<sub>/status)?"
)
_SLICE_PATH = re.compile(r"/apis/resource\.k8s\.io/v1/resourceslices(?P<name>/[^/]+)?")


def authorized_as(method: str, path: str, query: str) -> tuple[str, str, str]:
    """(API group, resource, verb) the API server authorizes a request as (the
    Kubernetes request attributes: a GET of a collection is list, or watch)."""
    if match := _CLAIM_PATH.fullmatch(path):
        resource = "resourceclaims/status" if match["sub"] else "resourceclaims"
        named = True
    elif match := _SLICE_PATH.fullmatch(path):
        resource, named = "resourceslices", match["name"] is not None
    else:
        raise AssertionError(f"a request outside the known resources: {method} {path}")
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method)
    if method == "GET":
        verb = "get" if named else ("watch" if "watch=true" in query else "list")
    if method == "DELETE":
        verb = "delete" if named else "deletecollection"
    assert verb is not None, method
    return "resource.k8s.io", resource, verb


def cluster_role_grants() -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in the("ClusterRole")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_cluster_role_is_exactly_what_the_coordinator_asks_of_the_api_server(
    tmp_path: Path,
) -> None:
    """A pod's life over the wire (tests/k8s/test_node_on_the_wire.py) and the node's
    pool growing past one slice and shrinking back: every request the FakeAPIServer saw
    is granted, and every grant was used."""
    with wired_node(tmp_path) as wired:
        uid, pod_uid = "0d6f3c1e-1111-4a2b-8c3d-000000000001", "pod-uid-1"
        wired.api.put_claim(claim_object("sdk-macvlan", uid, pod_uid))
        claims = [PodClaim(DRIVER, uid, "default", "net")]
        assert wired.kubelet.prepare(pod_uid, claims)[uid].error == ""
        sandbox = SimSandbox(
            "sandbox-1", "web", "default", pod_uid, wired.node.sandbox().namespace.path
        )
        assert wired.runtime.run_pod_sandbox(sandbox).refusal is None
        assert wired.runtime.create_container("sandbox-1", "app").refusal is None
        wired.runtime.stop_pod_sandbox("sandbox-1")
        assert wired.kubelet.unprepare(pod_uid, claims) == {uid: ""}
        wired.runtime.remove_pod_sandbox("sandbox-1")
        devices = list(
            publish(
                load_inventory(TOPOLOGIES / "inventory.yaml"),
                load_policies(TOPOLOGIES / "policies.yaml"),
            )
        )
        grown = wired.k8s.slices.publish(devices + [extra_vf(i) for i in range(200)])
        shrunk = wired.k8s.slices.publish(devices)
        assert len(grown.slices) == 2
        assert shrunk.deleted == grown.slices[1:]
        requests = wired.api.requests
    assert all(r.status < 400 for r in requests), [str(r) for r in requests if r.status >= 400]
    asked = {authorized_as(r.method, r.path, r.query) for r in requests}
    assert asked == cluster_role_grants()


def extra_vf(index: int) -> PublishedDevice:
    """A VF beyond the example node's, to grow its pool past one slice."""
    attributes = {DRIVER: {"type": "vf", "ifName": f"extra{index}", "pfName": "extra"}}
    return PublishedDevice(
        f"extra-vf{index:03d}", Device(f"extra-vf{index:03d}", attributes), None, attributes, {}
    )


def test_the_binding_gives_the_role_to_the_daemonsets_service_account() -> None:
    binding, daemonset = the("ClusterRoleBinding"), the("DaemonSet")
    assert binding["roleRef"]["name"] == the("ClusterRole")["metadata"]["name"]
    (subject,) = binding["subjects"]
    assert (subject["kind"], subject["name"], subject["namespace"]) == (
        "ServiceAccount",
        daemonset["spec"]["template"]["spec"]["serviceAccountName"],
        daemonset["metadata"]["namespace"],
    )


# -- DeviceClasses and examples ----------------------------------------------------------


def published_devices() -> list[PublishedDevice]:
    inventory = load_inventory(TOPOLOGIES / "inventory.yaml")
    return list(publish(inventory, load_policies(TOPOLOGIES / "policies.yaml")))


def device_value(device: PublishedDevice) -> Any:
    """The device as the scheduler's CEL sees it: its driver, attributes and capacity."""
    capacity: dict[str, dict[str, int]] = {}
    for qualified, total in device.capacity.items():
        domain, _, name = qualified.partition("/")
        capacity.setdefault(domain, {})[name] = total
    attributes = {domain: dict(group) for domain, group in device.attributes.items()}
    return celpy.json_to_cel({"driver": DRIVER, "attributes": attributes, "capacity": capacity})


def selected(expression: str, devices: list[PublishedDevice]) -> set[str]:
    program = celpy.Environment().program(celpy.Environment().compile(expression))
    found = set()
    for device in devices:
        result = program.evaluate({"device": device_value(device)})
        assert isinstance(result, celpy.celtypes.BoolType), (expression, device.name, result)
        if result:
            found.add(device.name)
    return found


def test_a_device_class_for_each_plugin_whose_contract_allocates() -> None:
    allocating = {n for n, d in pinned_descriptors().items() if StepKind.ALLOCATION in d.step_kinds}
    classes = {
        o["metadata"]["labels"]["dra.networking/plugin"]: o
        for o in objects()
        if o["kind"] == "DeviceClass"
    }
    assert set(classes) == allocating == {"sriov", "macvlan", "ipvlan"}
    assert {o["metadata"]["name"] for o in classes.values()} == {
        f"{p}.{DRIVER}" for p in allocating
    }


@pytest.mark.parametrize(
    ("plugin", "expected"),
    [
        ("sriov", {f"enp3s0f{pf}v{vf}" for pf in (0, 1) for vf in range(4)}),
        ("macvlan", {"enp3s0f2-macvlan"}),
        ("ipvlan", {"enp3s0f2-ipvlan"}),
    ],
)
def test_each_device_class_selects_what_the_coordinator_publishes_for_its_plugin(
    plugin: str, expected: set[str]
) -> None:
    (selector,) = the("DeviceClass", f"{plugin}.{DRIVER}")["spec"]["selectors"]
    assert selected(selector["cel"]["expression"], published_devices()) == expected


def test_each_example_claim_can_be_allocated_on_the_example_node() -> None:
    devices = published_devices()
    templates = [o for o in rendered().examples if o["kind"] == "ResourceClaimTemplate"]
    assert sorted(t["metadata"]["name"] for t in templates) == [
        "sdk-ipvlan",
        "sdk-macvlan",
        "sdk-vf-bond",
        "sdk-vf-bond-vlan",
    ]
    for template in templates:
        spec = template["spec"]["spec"]["devices"]
        (config,) = spec["config"]
        assert config["opaque"]["parameters"]["topology"] == template["metadata"]["name"]
        for request in spec["requests"]:
            exact = request["exactly"]
            (class_selector,) = the("DeviceClass", exact["deviceClassName"])["spec"]["selectors"]
            (request_selector,) = exact["selectors"]
            fits = selected(class_selector["cel"]["expression"], devices) & selected(
                request_selector["cel"]["expression"], devices
            )
            assert fits, (template["metadata"]["name"], request["name"])
            for capacity in exact.get("capacity", {}).get("requests", {}):
                assert all(capacity in d.capacity for d in devices if d.name in fits)


def test_each_example_pod_uses_its_claim_template() -> None:
    for pod in (o for o in rendered().examples if o["kind"] == "Pod"):
        (claim,) = pod["spec"]["resourceClaims"]
        assert claim["resourceClaimTemplateName"] == pod["metadata"]["name"]
        assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": claim["name"]}]


# -- the DaemonSet and its configs -------------------------------------------------------


def test_the_services_and_their_sockets_are_the_services_registrations() -> None:
    for service, plugins in SERVICE_PLUGINS.items():
        registry = Registry()
        SERVICES[f"networkplugin-{service}"](registry)
        assert sorted(r.name for r in registry.seal()) == sorted(plugins)
    assert sorted(SERVICE_PLUGINS) == sorted(n.removeprefix("networkplugin-") for n in SERVICES)


def config_files(tmp_path: Path) -> dict[str, Path]:
    """The ConfigMap's files, written out, and the coordinator's as pod-setup makes it."""
    out = {}
    for key, text in the("ConfigMap")["data"].items():
        out[key] = tmp_path / "config" / key
        out[key].parent.mkdir(exist_ok=True)
        out[key].write_text(text)
    pod = tmp_path / "pod"
    pod.mkdir()
    set_up_pod("node-7", out["coordinator.yaml"], pod)
    out["pod/coordinator.yaml"] = pod / "coordinator.yaml"
    return out


def test_the_configs_load_with_the_programs_own_loaders(tmp_path: Path) -> None:
    files = config_files(tmp_path)
    values = load_values(CHART / "values.yaml")
    coordinator = CoordinatorConfig.load(files["pod/coordinator.yaml"])
    assert coordinator.kubernetes is not None
    assert coordinator.kubernetes.node_name == "node-7"
    assert str(coordinator.kubernetes.nri_socket) == values["nri"]["socket"]
    grace = {coordinator.shutdown_grace_seconds}
    sockets = {}
    for service, plugins in SERVICE_PLUGINS.items():
        config = ServiceConfig.load(files[f"{service}.yaml"])
        grace.add(config.shutdown_grace_seconds)
        assert config.kernel == "linux:///proc/1/ns/net"
        sockets.update(
            {p: (config.socket_dir / f"{p}.sock", config.token_file.name) for p in plugins}
        )
    assert {p.name: (p.socket, p.token_file.name) for p in coordinator.plugins} == sockets
    pod_spec = the("DaemonSet")["spec"]["template"]["spec"]
    assert grace == {values["shutdownGraceSeconds"]}
    assert (
        pod_spec["terminationGracePeriodSeconds"]
        == values["shutdownGraceSeconds"] + STOP_MARGIN_SECONDS
    )
    for key in ("inventory.yaml", "policies.yaml"):
        assert files[key].read_text() == (TOPOLOGIES / key).read_text()


def mounted(container: Mapping[str, Any], path: Path) -> bool:
    return any(path.is_relative_to(m["mountPath"]) for m in container["volumeMounts"])


def test_every_path_a_program_uses_is_mounted_in_its_container(tmp_path: Path) -> None:
    files = config_files(tmp_path)
    pod_spec = the("DaemonSet")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod_spec["containers"]}
    volumes = {v["name"] for v in pod_spec["volumes"]}
    for container in [*pod_spec["containers"], *pod_spec["initContainers"]]:
        assert {m["name"] for m in container["volumeMounts"]} <= volumes, container["name"]
    coordinator = CoordinatorConfig.load(files["pod/coordinator.yaml"])
    assert coordinator.kubernetes is not None
    assert coordinator.kubernetes.nri_socket is not None
    needed = [
        coordinator.state_dir,
        coordinator.socket,
        coordinator.token_file,
        coordinator.inventory,
        coordinator.kubernetes.plugins_dir,
        coordinator.kubernetes.registry_dir,
        coordinator.kubernetes.nri_socket,
        Path(load_values(CHART / "values.yaml")["hostPaths"]["netns"]),
        *coordinator.topologies,
        *(p.socket for p in coordinator.plugins),
        *(p.token_file for p in coordinator.plugins),
    ]
    assert [p for p in needed if not mounted(containers["coordinator"], p)] == []
    for service in SERVICE_PLUGINS:
        config = ServiceConfig.load(files[f"{service}.yaml"])
        paths = [config.state_dir, config.socket_dir, config.token_file, Path("/run/netns")]
        assert [p for p in paths if not mounted(containers[service], p)] == [], service
        assert containers[service]["command"][-4:-2] == [
            "--config",
            f"/etc/dra-networkplugins/config/{service}.yaml",
        ]


def test_only_the_services_get_capabilities_and_only_the_coordinator_the_api_token() -> None:
    pod_spec = the("DaemonSet")["spec"]["template"]["spec"]
    assert pod_spec["automountServiceAccountToken"] is False
    for container in [*pod_spec["containers"], *pod_spec["initContainers"]]:
        context = container["securityContext"]
        assert context["capabilities"]["drop"] == ["ALL"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        added = context["capabilities"].get("add", [])
        expected = (
            ["NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE"] if container["name"] in SERVICE_PLUGINS else []
        )
        assert added == expected, container["name"]
        has_token = any(m["name"] == "api-token" for m in container["volumeMounts"])
        assert has_token == (container["name"] == "coordinator"), container["name"]
        assert "privileged" not in context


# -- the pod's helpers -------------------------------------------------------------------


def test_pod_setup_makes_private_tokens_once_and_names_the_node(tmp_path: Path) -> None:
    files = config_files(tmp_path)
    pod = files["pod/coordinator.yaml"].parent
    tokens = {name: (pod / f"{name}.token").read_text() for name in TOKENS}
    assert len(set(tokens.values())) == len(TOKENS)
    for name in TOKENS:
        st = (pod / f"{name}.token").lstat()
        assert stat.S_ISREG(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
    set_up_pod("node-8", files["coordinator.yaml"], pod)  # the init container runs again
    assert {name: (pod / f"{name}.token").read_text() for name in TOKENS} == tokens
    assert CoordinatorConfig.load(pod / "coordinator.yaml").kubernetes.node_name == "node-8"  # type: ignore[union-attr]


def test_pod_setup_refuses_an_empty_node_name(tmp_path: Path) -> None:
    files = config_files(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PodSetupError, match="node name is empty"):
        set_up_pod("", files["coordinator.yaml"], empty)
    assert list(empty.iterdir()) == []


@pytest.fixture
def health_socket(tmp_path: Path) -> Iterator[tuple[str, list[bool]]]:
    """A health service on a Unix socket, serving while its flag says so."""
    serving = [True]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add_health_service(server, "networkplugin.v1alpha1.NetworkPlugin", lambda: serving[0])
    socket = str(tmp_path / "vlan.sock")
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        yield socket, serving
    finally:
        server.stop(None)


def test_the_readiness_probe_imports_grpc_and_not_the_renderer() -> None:
    """It runs every few seconds in each container: the renderer's templates, topology
    compiler and CEL would double its start."""
    probe = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "plugins.deploy", "probe", "/nonexistent.sock"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert probe.returncode == 1, probe.stderr
    imported = {line.split("|")[-1].strip() for line in probe.stderr.splitlines() if "|" in line}
    assert "grpc" in imported
    assert not imported & {"plugins.coordinator", "jinja2", "plugins.deploy._render"}


def test_the_readiness_probe_reads_each_sockets_health(
    tmp_path: Path, health_socket: tuple[str, list[bool]]
) -> None:
    socket, serving = health_socket
    assert not_serving([socket], 5) == []
    serving[0] = False
    assert not_serving([socket], 5) == [f"{socket}: NOT_SERVING"]
    missing = str(tmp_path / "gone.sock")
    (line,) = not_serving([missing], 5)
    assert line.startswith(f"{missing}: UNAVAILABLE")
    assert main(["probe", socket]) == 1
    serving[0] = True
    assert main(["probe", socket]) == 0
