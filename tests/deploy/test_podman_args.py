"""``harness.podman_pod`` against the rendered DaemonSet (no root, no podman): every
volume mount is a ``--volume`` at its path, every capability a ``--cap-add``, the user,
the read-only root, the host namespaces and the command are the DaemonSet's, and no
argument is there that the DaemonSet does not justify (issue 29 item 3: the image's
podman test runs exactly these). A DaemonSet field the module does not map is refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.podman_pod import (
    MACHINE,
    PODMAN,
    VALUES_ROOTED,
    ContainerRun,
    PodmanPodError,
    daemonset_of,
    pod_containers,
    pod_values,
    prepare_host_paths,
)
from plugins.deploy import render_manifests

CHART = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
DOWNWARD = {"spec.nodeName": "node-a", "metadata.uid": "5d1f0e7c-0000-4000-8000-000000000029"}
# Flags whose value is the DaemonSet's, each from a field of the pod spec (``why``).
DERIVED = {
    "--network",
    "--pid",
    "--pull",
    "--stop-timeout",
    "--restart",
    "--user",
    "--cap-drop",
    "--cap-add",
    "--read-only",
    "--read-only-tmpfs=false",
    "--security-opt",
    "--env",
    "--volume",
    "--entrypoint",
}


@pytest.fixture(scope="module")
def daemonset() -> dict[str, Any]:
    return daemonset_of(render_manifests(CHART).install)


def supplied(root: Path) -> dict[str, Path]:
    return {n: root / n for n in ("config", "pod", "scratch", "api-token")}


def runs(daemonset: dict[str, Any], root: Path = Path("/t")) -> list[ContainerRun]:
    return pod_containers(daemonset, supplied(root), DOWNWARD)


def spec_of(daemonset: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = daemonset["spec"]["template"]["spec"]
    return spec


def field(daemonset: dict[str, Any], path: str) -> Any:
    """The value at ``spec.template.spec.containers[1].securityContext...``."""
    node: Any = daemonset
    for part in path.split("."):
        name, _, index = part.partition("[")
        node = node[name]
        if index:
            node = node[int(index.rstrip("]"))]
    return node


def test_every_container_in_order_init_first(daemonset: dict[str, Any]) -> None:
    spec = spec_of(daemonset)
    expected = [c["name"] for c in spec["initContainers"]] + [c["name"] for c in spec["containers"]]
    found = runs(daemonset)
    assert (
        [r.name for r in found] == expected == ["pod-setup", "coordinator", "vf", "bond", "links"]
    )
    assert [r.init for r in found] == [True, False, False, False, False]


def test_every_volume_mount_is_a_volume_at_its_path(daemonset: dict[str, Any]) -> None:
    spec = spec_of(daemonset)
    volumes = {v["name"]: v for v in spec["volumes"]}
    for run, container in zip(
        runs(daemonset), [*spec["initContainers"], *spec["containers"]], strict=True
    ):
        expected = []
        for mount in container["volumeMounts"]:
            volume = volumes[mount["name"]]
            source = volume["hostPath"]["path"] if "hostPath" in volume else f"/t/{mount['name']}"
            opts = (["ro"] if mount.get("readOnly") else []) + (
                ["rslave"] if mount.get("mountPropagation") == "HostToContainer" else []
            )
            expected.append(
                f"{source}:{mount['mountPath']}" + (f":{','.join(opts)}" if opts else "")
            )
        assert run.option("--volume") == expected, run.name
        # a host path is mounted at its own path (the kubelet's and the runtime's paths
        # cross the wire: docs/installing.md, "The pod")
        for volume in run.option("--volume"):
            source, target = volume.split(":")[:2]
            if not source.startswith("/t/"):
                assert source == target


def test_the_security_context_exactly(daemonset: dict[str, Any]) -> None:
    spec = spec_of(daemonset)
    pod_security = spec["securityContext"]
    for run, container in zip(
        runs(daemonset), [*spec["initContainers"], *spec["containers"]], strict=True
    ):
        security = container["securityContext"]
        assert run.option("--user") == [f"{pod_security['runAsUser']}:{pod_security['runAsGroup']}"]
        assert run.option("--cap-drop") == security["capabilities"]["drop"] == ["ALL"]
        assert run.option("--cap-add") == security["capabilities"].get("add", [])
        flags = [a.args[0] for a in run.options]
        assert ("--read-only" in flags) == security["readOnlyRootFilesystem"]
        assert "--privileged" not in flags
        opts = run.option("--security-opt")
        assert ("no-new-privileges" in opts) == (security["allowPrivilegeEscalation"] is False)
        unconfined = security.get("appArmorProfile", {}).get("type") == "Unconfined"
        assert ("apparmor=unconfined" in opts) == unconfined
        assert spec["hostNetwork"]
        assert run.option("--network") == ["host"]
        assert spec["hostPID"]
        assert run.option("--pid") == ["host"]
        assert run.option("--stop-timeout") == [str(spec["terminationGracePeriodSeconds"])]
        assert run.option("--restart") == ["no" if run.init else "always"]
    services = [r for r in runs(daemonset) if r.name in ("vf", "bond", "links")]
    assert [r.option("--cap-add") for r in services] == [
        ["NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE"]
    ] * 3


def test_the_command_and_environment_with_the_downward_api(daemonset: dict[str, Any]) -> None:
    spec = spec_of(daemonset)
    init, coordinator = runs(daemonset)[:2]
    command = json.loads(init.option("--entrypoint")[0])
    declared = spec["initContainers"][0]["command"]
    # $(NODE_NAME) and $(POD_UID) expanded as the kubelet does, nothing else changed
    assert command == [
        {"$(NODE_NAME)": "node-a", "$(POD_UID)": DOWNWARD["metadata.uid"]}.get(a, a)
        for a in declared
    ]
    assert init.option("--env") == ["NODE_NAME=node-a", f"POD_UID={DOWNWARD['metadata.uid']}"]
    assert json.loads(coordinator.option("--entrypoint")[0]) == spec["containers"][0]["command"]
    assert coordinator.option("--env") == [
        f"{e['name']}={e['value']}" for e in spec["containers"][0]["env"]
    ]
    assert coordinator.readiness == tuple(
        spec["containers"][0]["readinessProbe"]["exec"]["command"]
    )
    assert coordinator.image == spec["containers"][0]["image"]


def test_no_argument_the_daemonset_does_not_justify(daemonset: dict[str, Any]) -> None:
    for run in runs(daemonset):
        for argument in run.options:
            if argument.why == MACHINE:
                assert argument.args[0] == "--ulimit", argument  # the machine's only need
                continue
            assert argument.args[0] in DERIVED, argument
            # the field it names is in the DaemonSet (an init container's restart: its kind)
            for named in argument.why.split(" ")[0].split("+"):
                path = named.rsplit(".env.", 1)[0].rsplit(".volumeMounts.", 1)[0]
                if path.endswith("restartPolicy"):
                    continue  # the default: Always, a DaemonSet's only policy
                field(daemonset, path)
        argv = run.run_argv()
        assert argv[: len(PODMAN) + 1] == [*PODMAN, "run"]
        assert argv[-1] == run.image  # no args: the command is the entrypoint
        assert "--privileged" not in argv
        assert "--restart" not in run.run_argv(restart=False)


def test_pod_values_put_every_host_path_under_the_root(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(pod_values(tmp_path / "pod")))
    daemonset = daemonset_of(render_manifests(CHART, values).install)
    host_paths = [v["hostPath"]["path"] for v in spec_of(daemonset)["volumes"] if "hostPath" in v]
    assert len(host_paths) == len(VALUES_ROOTED) + 1  # and the NRI socket's directory
    assert all(p.startswith(f"{tmp_path}/pod/") for p in host_paths), host_paths
    (tmp_path / "pod" / "nri").mkdir(parents=True)
    made = prepare_host_paths(daemonset, ["links"])
    assert sorted(str(p) for p in made) == sorted(
        str(tmp_path / "pod" / sub) for sub in ("run", "state", "netns")
    )
    with pytest.raises(PodmanPodError, match=r"registry \(type Directory\) is not a directory"):
        prepare_host_paths(daemonset)  # the kubelet's plugin watcher's directory is not made


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda s: s.update(hostIPC=True), r"spec.template.spec.hostIPC: not mapped"),
        (
            lambda s: s["containers"][1].update(resources={"limits": {"cpu": "1"}}),
            r"containers\[1\].resources: not mapped",
        ),
        (
            lambda s: s["containers"][1]["securityContext"].update(privileged=True),
            r"privileged: the DaemonSet must never need it",
        ),
        (
            lambda s: s["containers"][1]["volumeMounts"][0].update(subPath="x"),
            r"volumeMounts.config.subPath: not mapped",
        ),
        (lambda s: s.update(hostNetwork=False), r"hostNetwork is not true"),
        (
            lambda s: s["initContainers"][0]["env"][0]["valueFrom"]["fieldRef"].update(
                fieldPath="status.hostIP"
            ),
            r"env.NODE_NAME: the downward API's status.hostIP was not given",
        ),
    ],
)
def test_a_field_it_does_not_map_is_refused(
    daemonset: dict[str, Any], change: Any, error: str
) -> None:
    changed = copy.deepcopy(daemonset)
    change(spec_of(changed))
    with pytest.raises(PodmanPodError, match=error):
        runs(changed)


def test_a_volume_without_a_host_directory_is_refused(daemonset: dict[str, Any]) -> None:
    given = supplied(Path("/t"))
    del given["scratch"]
    with pytest.raises(PodmanPodError, match=r"volume scratch \(emptyDir\): no host directory"):
        pod_containers(daemonset, given, DOWNWARD)
