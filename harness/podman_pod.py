"""The DaemonSet's pod under podman: the ``podman run`` arguments of each of its
containers, derived from the rendered DaemonSet alone, so the image is tried with exactly
the privileges a node gives it (issue 29 item 3; docs/image.md, "Running the DaemonSet's
pod under podman").

What is derived, each argument with the field of the pod spec it comes from
(``Argument.why``): the hostPath and other volume mounts (same paths in and out,
``ro`` where ``readOnly``, ``rslave`` for ``HostToContainer``), the user
(``runAsUser``/``runAsGroup``), the capabilities (``--cap-drop`` and ``--cap-add`` exactly
as listed), a read-only root, no privilege escalation, the AppArmor and seccomp profiles,
the host's network and PID namespaces, the environment (the downward API's fields given
by the caller), the command (``$(VAR)`` expanded as the kubelet does), the pull policy,
the grace period, the restart policy; the readiness probe's command is there to be run
with ``podman exec``. A field of the pod or a container this module does not know is an
error naming it: a change of the DaemonSet cannot pass unmapped.

Besides, only what this machine's podman needs (``MACHINE``): ``--runtime runc
--cgroup-manager cgroupfs`` (crun refuses these machines' hybrid cgroups), ``nofile`` and
``nproc`` limits below the hard ones (podman's defaults exceed them), the container's
name, and ``--rm``/``--detach`` of the caller's choice. Never ``--privileged``.

The host paths: every hostPath is mounted at its own path (docs/installing.md, "The
pod"). ``pod_values(root)`` is the values file that puts each of them under ``root``
(``hostPaths.<key>`` -> ``root/<key>``, the NRI socket -> ``root/nri/nri.sock``), so a
test renders a DaemonSet that touches nothing of the host's ``/var/lib/kubelet``,
``/run`` or ``/var/lib``. The volumes that are not host paths (the ConfigMap, the
emptyDirs, the projected service-account token) are directories the caller supplies.

``python -m harness.podman_pod service NAME ...`` runs one service's container of such a
DaemonSet in the foreground (the wire conformance suite's start command), ``... kill``
and ``... stop`` end it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

__all__ = [
    "MACHINE",
    "PODMAN",
    "Argument",
    "ContainerRun",
    "PodmanPodError",
    "config_map_files",
    "daemonset_of",
    "pod_containers",
    "pod_values",
    "prepare_host_paths",
]

PODMAN: Final = ("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs")
"""podman with this machine's flags (issue 29, docs/image.md "Using it")."""
MACHINE: Final = "machine"
"""``Argument.why`` of what this machine's podman needs, not the DaemonSet."""
NOFILE: Final = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1048576)
NPROC: Final = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 4096)

# Fields read here and mapped below; any other is an error (a DaemonSet change that this
# module would silently drop). The pod's scheduling fields have no meaning on one node's
# runtime: the kubelet never sees a pod that does not fit them.
_POD_FIELDS: Final = {
    "containers",
    "initContainers",
    "volumes",
    "hostNetwork",
    "hostPID",
    "securityContext",
    "terminationGracePeriodSeconds",
    "restartPolicy",
    # the API server's and the scheduler's: nothing of them reaches the container
    "serviceAccountName",
    "automountServiceAccountToken",
    "priorityClassName",
    "nodeSelector",
    "tolerations",
    # with hostNetwork the container has the host's resolv.conf under podman as well
    "dnsPolicy",
}
_CONTAINER_FIELDS: Final = {
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "env",
    "securityContext",
    "volumeMounts",
    "readinessProbe",
}
_SECURITY_FIELDS: Final = {
    "runAsUser",
    "runAsGroup",
    "capabilities",
    "readOnlyRootFilesystem",
    "allowPrivilegeEscalation",
    "seccompProfile",
    "appArmorProfile",
    "privileged",
}
_PULL: Final = {"IfNotPresent": "missing", "Never": "never", "Always": "always"}
_PROPAGATION: Final = {"HostToContainer": "rslave", "Bidirectional": "rshared", "None": None}
_RESTART: Final = {"Always": "always", "OnFailure": "on-failure", "Never": "no"}
_VAR_REF: Final = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")

VALUES_ROOTED: Final = {
    # short: a socket's path holds at most 107 bytes, and the kubelet's are named per pod
    "kubeletPlugins": "plugins",
    "kubeletRegistry": "registry",
    "netns": "netns",
    "state": "state",
    "run": "run",
}
"""``pod_values``' mapping: ``hostPaths.<key>`` -> ``root/<this>``."""


class PodmanPodError(ValueError):
    """The DaemonSet cannot be run under podman as it is: one line naming what."""


@dataclass(frozen=True)
class Argument:
    """One option of ``podman run`` and the pod spec's field it comes from (or ``MACHINE``)."""

    args: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class ContainerRun:
    """One container of the pod as ``podman run`` starts it."""

    name: str
    """The DaemonSet's name of the container."""
    init: bool
    podman_name: str
    options: tuple[Argument, ...]
    """Derived from the DaemonSet (``why`` a field path), and the machine's few."""
    image: str
    args: tuple[str, ...]
    """After the image: the container's ``args`` (its ``command`` is the entrypoint)."""
    readiness: tuple[str, ...] | None
    """The readiness probe's exec command (``podman exec`` it), if the container has one."""

    def option(self, flag: str) -> list[str]:
        """The values of ``flag`` (``--volume`` -> each volume's ``src:dst[:opts]``)."""
        return [a.args[1] for a in self.options if a.args[0] == flag and len(a.args) == 2]

    def run_argv(self, *, detach: bool = True, restart: bool = True) -> list[str]:
        """``podman ... run``: detached, or in the foreground and removed at its end
        (``detach=False``). ``restart=False`` leaves the restart policy to the caller,
        as the kubelet keeps it (a caller that restarts the container itself, with
        ``podman start`` or a new ``run``)."""
        options = [
            arg for a in self.options if restart or a.args[0] != "--restart" for arg in a.args
        ]
        mode = ["--detach"] if detach else ["--rm"]
        return [*PODMAN, "run", *mode, "--name", self.podman_name, *options, self.image, *self.args]

    def exec_argv(self, command: Sequence[str]) -> list[str]:
        return [*PODMAN, "exec", self.podman_name, *command]


def daemonset_of(objects: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The one DaemonSet among the rendered objects (``RenderedManifests.install``)."""
    found = [dict(o) for o in objects if o.get("kind") == "DaemonSet"]
    if len(found) != 1:
        raise PodmanPodError(
            f"expected one DaemonSet among the rendered objects, found {len(found)}"
        )
    return found[0]


def config_map_files(objects: Iterable[Mapping[str, Any]], name: str) -> dict[str, str]:
    """The data of the ConfigMap ``name`` among the rendered objects: file -> text."""
    for o in objects:
        if o.get("kind") == "ConfigMap" and o.get("metadata", {}).get("name") == name:
            return dict(o.get("data", {}))
    raise PodmanPodError(f"no ConfigMap {name} among the rendered objects")


def pod_values(root: Path) -> dict[str, Any]:
    """The values that put each of the DaemonSet's host paths under ``root`` (the
    mapping of ``VALUES_ROOTED``; the NRI socket ``root/nri/nri.sock``)."""
    return {
        "hostPaths": {key: str(root / sub) for key, sub in VALUES_ROOTED.items()},
        "nri": {"socket": str(root / "nri" / "nri.sock")},
    }


def pod_containers(
    daemonset: Mapping[str, Any],
    supplied: Mapping[str, Path],
    downward: Mapping[str, str],
    *,
    pod_name: str = "dranp",
) -> list[ContainerRun]:
    """The init containers, then the containers, of ``daemonset``'s pod as ``podman run``
    starts them. ``supplied``: the host directory of each volume that is not a hostPath
    (by the volume's name); ``downward``: the downward API's values by field path
    (``spec.nodeName``, ``metadata.uid``)."""
    spec = daemonset.get("spec", {}).get("template", {}).get("spec")
    if not isinstance(spec, dict):
        raise PodmanPodError("the DaemonSet has no spec.template.spec")
    _known(spec, _POD_FIELDS, "spec.template.spec")
    if not spec.get("hostNetwork"):
        raise PodmanPodError(
            "spec.template.spec.hostNetwork is not true: pod networking is not modelled"
        )
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    pod_security = spec.get("securityContext", {})
    _known(
        pod_security,
        {"runAsUser", "runAsGroup", "seccompProfile"},
        "spec.template.spec.securityContext",
    )
    restart = spec.get("restartPolicy", "Always")  # a DaemonSet's pods: Always only
    runs = []
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind, [])):
            where = f"spec.template.spec.{kind}[{index}]"
            runs.append(
                _container(
                    container,
                    where,
                    spec,
                    pod_security,
                    volumes,
                    supplied,
                    downward,
                    init=kind == "initContainers",
                    restart=restart,
                    pod_name=pod_name,
                )
            )
    return runs


def prepare_host_paths(
    daemonset: Mapping[str, Any], containers: Iterable[str] | None = None
) -> list[Path]:
    """Make the hostPath directories of ``type: DirectoryOrCreate`` (as the kubelet
    does, 0755) and check the ``Directory`` ones exist, of the volumes ``containers``
    mount (None: every container's); the directories made."""
    spec = daemonset["spec"]["template"]["spec"]
    wanted = None if containers is None else set(containers)
    mounted = {
        m["name"]
        for c in [*spec.get("initContainers", []), *spec.get("containers", [])]
        if wanted is None or c["name"] in wanted
        for m in c.get("volumeMounts", [])
    }
    made = []
    for volume in spec.get("volumes", []):
        host = volume.get("hostPath")
        if host is None or volume["name"] not in mounted:
            continue
        path = Path(host["path"])
        kind = host.get("type", "")
        if kind == "DirectoryOrCreate" and not path.is_dir():
            path.mkdir(mode=0o755, parents=True)
            made.append(path)
        elif kind == "Directory" and not path.is_dir():
            raise PodmanPodError(
                f"volume {volume['name']}: hostPath {path} (type Directory) is not a directory"
            )
    return made


def _known(section: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(section) - known)
    if unknown:
        raise PodmanPodError(f"{where}.{unknown[0]}: not mapped to podman (harness.podman_pod)")


def _container(
    container: Mapping[str, Any],
    where: str,
    spec: Mapping[str, Any],
    pod_security: Mapping[str, Any],
    volumes: Mapping[str, Mapping[str, Any]],
    supplied: Mapping[str, Path],
    downward: Mapping[str, str],
    *,
    init: bool,
    restart: str,
    pod_name: str,
) -> ContainerRun:
    _known(container, _CONTAINER_FIELDS, where)
    name = container["name"]
    options: list[Argument] = []

    def add(why: str, *args: str) -> None:
        options.append(Argument(args, why))

    add(MACHINE, "--ulimit", f"nofile={NOFILE}:{NOFILE}")
    add(MACHINE, "--ulimit", f"nproc={NPROC}:{NPROC}")
    add("spec.template.spec.hostNetwork", "--network", "host")
    if spec.get("hostPID"):
        add("spec.template.spec.hostPID", "--pid", "host")
    pull = container.get("imagePullPolicy", "IfNotPresent")
    if pull not in _PULL:
        raise PodmanPodError(f"{where}.imagePullPolicy: {pull!r} is not a pull policy")
    add(f"{where}.imagePullPolicy", "--pull", _PULL[pull])
    if "terminationGracePeriodSeconds" in spec:
        grace = str(spec["terminationGracePeriodSeconds"])
        add("spec.template.spec.terminationGracePeriodSeconds", "--stop-timeout", grace)
    # init containers run once, to the end; the others as the pod's restartPolicy says
    policy = "no" if init else _RESTART[restart]
    add(
        "spec.template.spec.restartPolicy" if not init else f"{where} (an init container)",
        "--restart",
        policy,
    )
    _security(container.get("securityContext", {}), pod_security, where, add)
    env = _environment(container.get("env", []), downward, where)
    for key, value in env.items():
        add(f"{where}.env.{key}", "--env", f"{key}={value}")
    for mount in container.get("volumeMounts", []):
        add(
            f"{where}.volumeMounts.{mount['name']}",
            "--volume",
            _volume(mount, volumes, supplied, where),
        )
    command = [_expand(a, env) for a in container.get("command", [])]
    if command:
        add(f"{where}.command", "--entrypoint", json.dumps(command))
    probe = container.get("readinessProbe")
    readiness = None
    if probe is not None:
        if "exec" not in probe:
            raise PodmanPodError(f"{where}.readinessProbe: only exec probes are run (podman exec)")
        readiness = tuple(probe["exec"]["command"])
    return ContainerRun(
        name=name,
        init=init,
        podman_name=f"{pod_name}-{name}",
        options=tuple(options),
        image=container["image"],
        args=tuple(_expand(a, env) for a in container.get("args", [])),
        readiness=readiness,
    )


def _security(container: Mapping[str, Any], pod: Mapping[str, Any], where: str, add: Any) -> None:
    """The container's security context over the pod's (the container's field wins)."""
    _known(container, _SECURITY_FIELDS, f"{where}.securityContext")
    ctx = f"{where}.securityContext"
    if container.get("privileged"):
        raise PodmanPodError(f"{ctx}.privileged: the DaemonSet must never need it")

    def field(key: str) -> tuple[Any, str]:
        if key in container:
            return container[key], f"{ctx}.{key}"
        return pod.get(key), f"spec.template.spec.securityContext.{key}"

    user, user_why = field("runAsUser")
    group, group_why = field("runAsGroup")
    if user is not None:
        add(
            user_why if group is None else f"{user_why}+{group_why}",
            "--user",
            str(user) if group is None else f"{user}:{group}",
        )
    elif group is not None:
        raise PodmanPodError(f"{group_why} without runAsUser: podman's --user needs the user")
    capabilities = container.get("capabilities", {})
    for cap in capabilities.get("drop", []):
        add(f"{ctx}.capabilities.drop", "--cap-drop", str(cap))
    for cap in capabilities.get("add", []):
        add(f"{ctx}.capabilities.add", "--cap-add", str(cap))
    if container.get("readOnlyRootFilesystem"):
        add(f"{ctx}.readOnlyRootFilesystem", "--read-only")
        # podman would mount tmpfs on /tmp, /run and /var/tmp; a pod has none of them
        add(f"{ctx}.readOnlyRootFilesystem", "--read-only-tmpfs=false")
    if container.get("allowPrivilegeEscalation") is False:
        add(f"{ctx}.allowPrivilegeEscalation", "--security-opt", "no-new-privileges")
    seccomp, seccomp_why = field("seccompProfile")
    kind = (seccomp or {}).get("type", "RuntimeDefault")
    if kind == "Unconfined":
        add(seccomp_why, "--security-opt", "seccomp=unconfined")
    elif kind != "RuntimeDefault":  # RuntimeDefault: podman's default profile, no option
        raise PodmanPodError(f"{seccomp_why}: {kind} is not mapped to podman")
    apparmor = container.get("appArmorProfile", {}).get("type", "RuntimeDefault")
    if apparmor == "Unconfined":
        add(f"{ctx}.appArmorProfile", "--security-opt", "apparmor=unconfined")
    elif apparmor != "RuntimeDefault":
        raise PodmanPodError(f"{ctx}.appArmorProfile: {apparmor} is not mapped to podman")


def _environment(
    entries: Sequence[Mapping[str, Any]], downward: Mapping[str, str], where: str
) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in entries:
        key = entry["name"]
        if "value" in entry:
            env[key] = _expand(str(entry["value"]), env)
            continue
        field_path = entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if field_path is None:
            raise PodmanPodError(f"{where}.env.{key}: only values and fieldRefs are mapped")
        if field_path not in downward:
            raise PodmanPodError(
                f"{where}.env.{key}: the downward API's {field_path} was not given"
            )
        env[key] = downward[field_path]
    return env


def _expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)``: a variable of the container's env, ``$$`` a ``$``; a
    reference to anything else stays as written."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR_REF.sub(one, text)


def _volume(
    mount: Mapping[str, Any],
    volumes: Mapping[str, Mapping[str, Any]],
    supplied: Mapping[str, Path],
    where: str,
) -> str:
    name = mount["name"]
    unknown = sorted(set(mount) - {"name", "mountPath", "readOnly", "mountPropagation"})
    if unknown:
        raise PodmanPodError(f"{where}.volumeMounts.{name}.{unknown[0]}: not mapped to podman")
    volume = volumes.get(name)
    if volume is None:
        raise PodmanPodError(f"{where}.volumeMounts.{name}: no volume of that name")
    if "hostPath" in volume:
        source = str(volume["hostPath"]["path"])
    elif name in supplied:
        source = str(supplied[name])
    else:
        kinds = sorted(set(volume) - {"name"})
        raise PodmanPodError(
            f"volume {name} ({', '.join(kinds)}): no host directory was supplied for it"
        )
    opts = []
    if mount.get("readOnly"):
        opts.append("ro")
    propagation = mount.get("mountPropagation", "None")
    if propagation not in _PROPAGATION:
        raise PodmanPodError(f"{where}.volumeMounts.{name}.mountPropagation: {propagation!r}")
    if _PROPAGATION[propagation] is not None:
        opts.append(str(_PROPAGATION[propagation]))
    return f"{source}:{mount['mountPath']}" + (f":{','.join(opts)}" if opts else "")


# -- one service's container for the wire conformance suite ---------------------------------


def _render(root: Path, netns: Path, image: str) -> tuple[tuple[dict[str, Any], ...], Path]:
    """The manifests rendered with the host paths under ``root`` (the netns one
    ``netns``: the lab pins its namespaces there) and ``image``."""
    from plugins.deploy import render_manifests

    repository, _, tag = image.rpartition(":")
    values = pod_values(root)
    values["hostPaths"]["netns"] = str(netns)
    values["image"] = {"repository": repository, "tag": tag}
    values_file = root / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    chart = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes"
    return render_manifests(chart, values_file).install, values_file


def service_container(
    service: str, root: Path, netns: Path, kernel: str, image: str, token_file: Path
) -> ContainerRun:
    """``service``'s container of the DaemonSet rendered under ``root``, its ConfigMap
    written with ``kernel`` for the host's, and the pod's token of it ``token_file``'s
    (the suite is the coordinator: it mints the token)."""
    objects, _ = _render(root, netns, image)
    daemonset = daemonset_of(objects)
    prepare_host_paths(daemonset, [service])
    supplied = {name: root / "volumes" / name for name in ("config", "pod", "scratch", "api-token")}
    for directory in supplied.values():
        directory.mkdir(parents=True, exist_ok=True)
    for key, text in config_map_files(objects, "dra-networkplugins").items():
        (supplied["config"] / key).write_text(substitute_kernel(text, kernel))
    token = supplied["pod"] / f"{service}.token"
    token.write_bytes(token_file.read_bytes())
    token.chmod(0o600)
    containers = pod_containers(
        daemonset,
        supplied,
        {"spec.nodeName": "wire-node", "metadata.uid": root.name},
        pod_name=podman_name_of(root),
    )
    (found,) = [c for c in containers if c.name == service]
    return found


def substitute_kernel(text: str, kernel: str) -> str:
    """A service config of the ConfigMap with ``kernel`` for the host's namespace
    (``linux:///proc/1/ns/net``): the lab's node namespace in a test."""
    return text.replace("kernel: linux:///proc/1/ns/net", f"kernel: {kernel}")


def podman_name_of(root: Path) -> str:
    return f"dranp-{root.name}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.podman_pod")
    sub = parser.add_subparsers(dest="what", required=True)
    run = sub.add_parser("service", help="run a service's container in the foreground")
    run.add_argument("service")
    run.add_argument("--root", type=Path, required=True)
    run.add_argument("--netns", type=Path, required=True)
    run.add_argument("--kernel", required=True)
    run.add_argument("--image", required=True)
    run.add_argument("--token-file", type=Path, required=True)
    for name in ("kill", "stop"):
        end = sub.add_parser(name, help=f"{name} a service's container")
        end.add_argument("service")
        end.add_argument("--root", type=Path, required=True)
    args = parser.parse_args(argv)
    container_name = f"{podman_name_of(args.root)}-{args.service}"
    if args.what == "kill":
        return subprocess.run(
            [*PODMAN, "kill", "--signal", "KILL", container_name], check=False
        ).returncode
    if args.what == "stop":
        return subprocess.run([*PODMAN, "stop", container_name], check=False).returncode
    try:
        container = service_container(
            args.service, args.root, args.netns, args.kernel, args.image, args.token_file
        )
    except (PodmanPodError, ValueError, OSError) as exc:
        print(f"python -m harness.podman_pod: {exc}", file=sys.stderr)
        return 2
    argv_run = container.run_argv(detach=False, restart=False)
    podman = shutil.which(argv_run[0])
    if podman is None:
        print("python -m harness.podman_pod: podman is not installed", file=sys.stderr)
        return 2
    return os.execv(podman, argv_run)  # never returns: the process is podman now


if __name__ == "__main__":
    sys.exit(main())
