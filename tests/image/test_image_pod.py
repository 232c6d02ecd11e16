"""The image does its job (issue 29 item 3): the DaemonSet's pod under podman, each
container with exactly the arguments ``harness.podman_pod`` derives from the rendered
DaemonSet (its mounts, user, capabilities; never ``--privileged``), on a ``netns://``
lab whose node namespace is the services' kernel:

(a) the wire conformance suite against the ``links`` container's ``macvlan.sock``, the
    container started, stopped and killed by the suite (``WIRE_SELECTION``);
(b) the ``k8s`` lifecycle: the kubelet, API server and NRI runtime simulators on the host
    side, the coordinator container on the mounted sockets, one pod's full life, the
    kernel as before after it;
(c) the ``links`` container SIGKILLed at a seeded random moment of the pod's connect,
    restarted by podman (``--restart always``); the kubelet's retried container passes
    the gate, the node ends clean.

Opt-in (``pytest -m image``, root): it builds the image if it is not there.
docs/image.md, "Running the DaemonSet's pod under podman".
"""

from __future__ import annotations

import functools
import logging
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from conformance import WIRE_CHECKS, WireLabs, load_wire_target, run_check
from harness.k8s.apiserver import FakeAPIServer
from harness.k8s.kubelet import KubeletSim, PodClaim
from harness.k8s.nri_runtime import NRIRuntimeSim, SimSandbox
from harness.k8s.wire_node import DRIVER, claim_object
from harness.podman_pod import (
    PODMAN,
    ContainerRun,
    config_map_files,
    daemonset_of,
    pod_containers,
    pod_values,
    prepare_host_paths,
    substitute_kernel,
)
from harness.pytest_plugin import require_lab
from harness.scenarios import lab_inventory, start_state_seed
from labs import Lab, NetnsLab
from labs.netns import missing as netns_missing
from plugins.deploy import render_manifests

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
DEADLINE_S = 60.0
KILL_ATTEMPTS = 8
RETRY_S = 20.0  # the kubelet's retries of a refused sandbox before the pod is deleted
CONFIG_MAP = "dra-networkplugins"
# Every wire check: each starts the container at least once (about a second under
# podman). Not applicable on linux:// (the kernel's calls cannot be held there) and so
# reported as such: the crashes at a held kernel call, which need the fake kernel ((c)
# below is this test's crash), and the external change, which needs the target file's
# tamper (macvlan.yaml has none); and the wrong step kind (an Allocation root has every
# hook).
NOT_APPLICABLE = frozenset(
    {"crash-at-every-boundary", "cleanup-without-response", "external-change", "wrong-step-kind"}
)
WIRE_SELECTION = tuple(WIRE_CHECKS)
log = logging.getLogger(__name__)

pytestmark = pytest.mark.image


def podman(
    *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*PODMAN, *args], capture_output=True, text=True, check=False, timeout=timeout
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args[:3])}: {done.stderr.strip()[-2000:]}")
    return done


@pytest.fixture(scope="module")
def image(request: pytest.FixtureRequest, image_tier: None) -> str:
    """HEAD's image in podman's storage, built by scripts/build-image if missing."""
    require_lab(request.config, "image", netns_missing())
    started = time.monotonic()
    done = subprocess.run(
        [str(ROOT / "scripts" / "build-image")],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.splitlines()[-1]
    log.info("scripts/build-image: %.0f s: %s", time.monotonic() - started, last)
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()[:12]
    return f"localhost/dra-networkplugins:{VERSION}-{rev}"


@pytest.fixture(scope="module")
def pod_root() -> Iterator[Path]:
    """The pod's host paths (``pod_values``), its ``netns`` a shared mount as a runtime
    makes ``/run/netns``: a namespace pinned after a container started reaches it
    through the DaemonSet's ``HostToContainer`` propagation."""
    root = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))  # sun_path holds 107 bytes
    netns = root / "netns"
    netns.mkdir()
    subprocess.run(["mount", "--bind", str(netns), str(netns)], check=True)
    subprocess.run(["mount", "--make-rshared", str(netns)], check=True)
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(netns)], check=False)
        shutil.rmtree(root, ignore_errors=True)


# -- (a) the wire conformance suite ----------------------------------------------------------


class PinnedWireLabs(WireLabs):
    """The suite's netns labs, pinned in the pod's netns directory (the containers see
    the node namespace, the services' kernel, at the same path)."""

    def __init__(self, target: Any, pin_root: Path) -> None:
        super().__init__(target)
        self.pin_root = pin_root

    def fresh(self) -> Lab:
        if self.netns is not None:
            self.netns.close()
            self.netns = None
        self.netns = NetnsLab(randomize=True, pin_root=self.pin_root)
        return self.netns


def wire_target_file(directory: Path, netns: Path, image: str) -> Path:
    """conformance/targets/macvlan.yaml with the DaemonSet's ``links`` container as the
    program: its socket, journal and token where the DaemonSet puts them under the
    check's ``{run}`` (``pod_values``), started by ``python -m harness.podman_pod``."""
    data = yaml.safe_load((ROOT / "conformance" / "targets" / "macvlan.yaml").read_text())
    launcher = ["{python}", "-m", "harness.podman_pod"]
    state = "{run}/state/links"
    data |= {
        "socket": "{run}/run/links/macvlan.sock",
        "tokenFile": "{run}/token",
        "kernel": {"url": "linux://"},
        "stateFiles": [
            f"{state}/journal.db",
            f"{state}/journal.db-wal",
            f"{state}/journal.db-shm",
            f"{state}/journal.id",
        ],
        "startTimeoutSeconds": 60,
        "commands": {
            "start": [
                *launcher,
                *("service", "links", "--root", "{run}", "--netns", str(netns)),
                *("--kernel", "{kernel}", "--image", image, "--token-file", "{tokenFile}"),
            ],
            "stop": [*launcher, "stop", "links", "--root", "{run}"],
            "kill": [*launcher, "kill", "links", "--root", "{run}"],
        },
    }
    path = directory / "links-in-podman.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.timeout(1800)
def test_the_wire_suite_against_the_links_container(image: str, pod_root: Path) -> None:
    target_dir = pod_root / "wire"
    target_dir.mkdir()
    target = load_wire_target(wire_target_file(target_dir, pod_root / "netns", image))
    verdicts = []
    with PinnedWireLabs(target, pod_root / "netns") as labs:
        for check in WIRE_SELECTION:
            started = time.monotonic()
            verdict = run_check(target, check, labs)
            log.info("%s (%.1f s)", verdict.line(), time.monotonic() - started)
            print(f"{verdict.line()} ({time.monotonic() - started:.1f} s)")
            verdicts.append(verdict)
    expected = {
        v.check: "not applicable" if v.check in NOT_APPLICABLE else "passed" for v in verdicts
    }
    wrong = [v.line() for v in verdicts if v.outcome != expected[v.check]]
    assert not wrong, "\n".join(wrong)


# -- (b) and (c) the pod with the k8s simulators ---------------------------------------------


class PodUnderPodman:
    """The DaemonSet's pod on a netns lab: the init container run to its end, then the
    coordinator and the services detached, restarted by podman as the kubelet would."""

    def __init__(self, root: Path, image: str, lab: NetnsLab, api_url: str) -> None:
        self.root = root
        values = pod_values(root)
        values["image"] = {"repository": image.rpartition(":")[0], "tag": image.rpartition(":")[2]}
        values_file = root / "values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        objects = render_manifests(ROOT / "deploy" / "kubernetes", values_file).install
        self.daemonset = daemonset_of(objects)
        (root / "nri").mkdir(exist_ok=True)  # the runtime's (type Directory)
        (root / "registry").mkdir(exist_ok=True)  # the kubelet's plugin watcher's (Directory)
        prepare_host_paths(self.daemonset)
        supplied = {n: root / "volumes" / n for n in ("config", "pod", "scratch", "api-token")}
        for directory in supplied.values():
            directory.mkdir(parents=True, exist_ok=True)
        for key, rendered in config_map_files(objects, CONFIG_MAP).items():
            text = substitute_kernel(rendered, str(lab.kernel_url))
            if key == "coordinator.yaml":
                config = yaml.safe_load(text)
                # the simulator's plain URL for the in-cluster service account
                config["kubernetes"]["apiServer"] = api_url
                text = yaml.safe_dump(config, sort_keys=False)
            (supplied["config"] / key).write_text(text)
        # the projected service-account volume (unused: the config names the API server)
        for name, text in {
            "token": "unused",
            "ca.crt": "",
            "namespace": "dra-networkplugins",
        }.items():
            (supplied["api-token"] / name).write_text(text)
        self.containers = pod_containers(
            self.daemonset,
            supplied,
            {
                "spec.nodeName": lab_inventory(lab).pool,
                "metadata.uid": "5d1f0e7c-0000-4000-8000-000000000029",
            },
            pod_name=f"dranp-{root.name}",
        )
        self.started: list[ContainerRun] = []

    def container(self, name: str) -> ContainerRun:
        (found,) = [c for c in self.containers if c.name == name]
        return found

    def start(self) -> None:
        for container in self.containers:
            if container.init:
                done = subprocess.run(
                    container.run_argv(detach=False),
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                assert done.returncode == 0, (
                    f"init container {container.name}: {done.stderr[-2000:]}"
                )
            else:
                done = subprocess.run(
                    container.run_argv(), capture_output=True, text=True, timeout=120, check=False
                )
                assert done.returncode == 0, f"container {container.name}: {done.stderr[-2000:]}"
                self.started.append(container)

    def ready(self, containers: Sequence[ContainerRun] | None = None) -> None:
        """Every container's readiness probe passes (run as the kubelet runs it), within
        the deadline; each try is the probe's own run, the kubelet's period is not needed."""
        deadline = time.monotonic() + DEADLINE_S
        for container in self.started if containers is None else containers:
            assert container.readiness is not None
            while True:
                done = subprocess.run(
                    container.exec_argv(container.readiness),
                    capture_output=True,
                    text=True,
                    check=False,
                    timeout=60,
                )
                if done.returncode == 0:
                    break
                assert time.monotonic() < deadline, (
                    f"{container.name} not ready: {done.stdout}{done.stderr}\n{self.logs(container)}"
                )

    def logs(self, container: ContainerRun, tail: int = 30) -> str:
        done = podman("logs", "--tail", str(tail), container.podman_name, check=False)
        return done.stdout + done.stderr  # the programs log to stderr

    def pid(self, container: ContainerRun) -> int:
        return int(podman("inspect", "--format", "{{.State.Pid}}", container.podman_name).stdout)

    def restarted(self, container: ContainerRun, times: int) -> None:
        """Returns once podman restarted ``container`` (its restart policy) ``times``
        times in all and its readiness probe passes."""
        deadline = time.monotonic() + DEADLINE_S
        while self.restarts(container) < times:
            assert time.monotonic() < deadline, f"podman did not restart {container.name}"
        self.ready(containers=[container])

    def restarts(self, container: ContainerRun) -> int:
        return int(podman("inspect", "--format", "{{.RestartCount}}", container.podman_name).stdout)

    def close(self) -> None:
        for container in reversed(self.started):
            podman("rm", "--force", "--time", "15", container.podman_name, check=False)


def test_the_pods_life_and_a_killed_service_under_podman(image: str, pod_root: Path) -> None:
    root = pod_root  # a socket's path holds at most 107 bytes: the shortest root
    lab = NetnsLab(randomize=True, pin_root=pod_root / "netns")
    pod: PodUnderPodman | None = None
    kubelet: KubeletSim | None = None
    (root / "nri").mkdir()  # the runtime's socket directory (hostPath type Directory)
    try:
        with FakeAPIServer() as api, NRIRuntimeSim(root / "nri" / "nri.sock") as runtime:
            pod = PodUnderPodman(root, image, lab, api.url)
            kubelet = KubeletSim(root / "registry", root / "checkpoint.json")
            pod.start()
            kubelet.wait_registered(DRIVER, DEADLINE_S)
            runtime.wait_for_plugin(DRIVER, DEADLINE_S)
            pod.ready()
            life = PodLife(lab, api, kubelet, runtime)

            # (b) one pod's full life
            connect_s, _ = life.run(1)

            # (c) the links container SIGKILLed at a seeded moment of a pod's connect
            # (RunPodSandbox: the coordinator's ConnectNetwork to macvlan.sock), restarted
            # by podman. A moment after the service answered misses the connect: the next
            # pod's, at the stream's next moment, until one lands in it.
            seed = start_state_seed()
            moments = random.Random(f"{seed}/image-pod-kill")
            links = pod.container("links")
            for attempt in range(1, KILL_ATTEMPTS + 1):
                delay = moments.uniform(0, connect_s)
                pid = pod.pid(links)
                print(
                    f"(c) start-state seed {seed}, try {attempt}: SIGKILL of links (pid {pid}) "
                    f"{delay * 1000:.1f} ms after RunPodSandbox was sent (the connect took "
                    f"{connect_s * 1000:.1f} ms in (b))"
                )
                _, hit = life.run(
                    1 + attempt,
                    kill=functools.partial(sigkill_after, pid, delay),
                    restarted=functools.partial(pod.restarted, links, attempt),
                )
                if hit:
                    break
            assert hit, f"no SIGKILL of {KILL_ATTEMPTS} landed in a connect (seed {seed})"
            recovered = [line for line in pod.logs(links, 1000).splitlines() if "recovery" in line]
            print("  the restarted links container:\n  " + "\n  ".join(recovered))
    except BaseException:
        if pod is not None:  # what each container said, with the failure
            for container in pod.started:
                print(f"--- {container.name}:\n{pod.logs(container)}")
        raise
    finally:
        if kubelet is not None:
            kubelet.stop()
        if pod is not None:
            pod.close()
        lab.close()


def sigkill_after(pid: int, delay: float) -> threading.Thread:
    """SIGKILL ``pid`` ``delay`` seconds from now (``os.kill``: ``podman kill`` takes
    longer than a connect to start)."""

    def kill() -> None:
        threading.Event().wait(delay)  # the seed's moment; the connect goes on meanwhile
        os.kill(pid, signal.SIGKILL)

    thread = threading.Thread(target=kill, name="sigkill-links")
    thread.start()
    return thread


@dataclass
class PodLife:
    """One pod with a macvlan claim in the kubelet's order, the node's peers on their
    wires; the kernel checked as before at its end."""

    lab: NetnsLab
    api: FakeAPIServer
    kubelet: KubeletSim
    runtime: NRIRuntimeSim

    def run(
        self,
        n: int,
        kill: Callable[[], threading.Thread] | None = None,
        restarted: Callable[[], None] | None = None,
    ) -> tuple[float, bool]:
        """Prepare, RunPodSandbox (the connect), the container through the gate, stop,
        unprepare, remove: the connect's wall time, and whether ``kill`` (started as
        RunPodSandbox is sent) landed in the connect; ``restarted`` returns once the
        killed container serves again."""
        lab, api, kubelet, runtime = self.lab, self.api, self.kubelet, self.runtime
        uid, pod_uid, sandbox_id = (
            f"0d6f3c1e-2929-4a2b-8c3d-{n:012d}",
            f"pod-uid-{n}",
            f"sandbox-{n}",
        )
        claim = f"net-{n}"
        api.put_claim(claim_object("sdk-macvlan", uid, pod_uid, lab_inventory(lab), name=claim))
        claims = [PodClaim(DRIVER, uid, "default", claim)]
        handle = lab.sandbox(f"pod-{n}")
        before = lab.kernel.snapshot()
        prepared = kubelet.prepare(pod_uid, claims)
        assert prepared[uid].error == "", prepared
        sandbox = SimSandbox(sandbox_id, "web", "default", pod_uid, handle.namespace.path)
        killer = kill() if kill is not None else None
        started = time.monotonic()
        ran = runtime.run_pod_sandbox(sandbox)
        connect_s = time.monotonic() - started
        hit = False
        if killer is None:
            assert ran.refusal is None, ran
            assert ran.answered, ran
        else:
            killer.join()
            assert restarted is not None
            restarted()
            # The coordinator refuses the sandbox whose connect failed under it; the
            # kubelet creates the pod's sandbox again.
            hit = not ran.proceeded
            print(f"  RunPodSandbox after {connect_s * 1000:.1f} ms: {ran.refusal or 'answered'}")
            if hit:
                sandbox_id = self.run_sandbox_again(sandbox)
        self.create_container(sandbox_id)
        status = (api.claim("default", claim) or {}).get("status", {})
        names = [d.get("networkData", {}).get("interfaceName") for d in status.get("devices", [])]
        assert names, status
        assert all(names), status
        in_pod = {link.name for link in lab.kernel.list_links(lab.kernel.namespace(f"pod-{n}"))}
        assert set(names) <= in_pod, (names, in_pod)
        runtime.stop_pod_sandbox(sandbox_id)
        assert kubelet.unprepare(pod_uid, claims) == {uid: ""}
        runtime.remove_pod_sandbox(sandbox_id)
        assert lab.kernel.snapshot() == before
        assert not (api.claim("default", claim) or {}).get("status", {}).get("devices")
        return connect_s, hit

    def run_sandbox_again(self, failed: SimSandbox) -> str:
        """The kubelet creates the pod's sandbox again (a new attempt, a new id) after a
        failed RunPodSandbox, with its back-off, until it runs: the new sandbox's id.

        The failed sandbox's undo failed while the service was down, so its claim's root
        is still attached: the coordinator finishes that removal before connecting the
        new sandbox, and refuses it (networks not removed yet) until the restarted
        service answers."""
        tries = 0

        def run() -> str | None:
            nonlocal tries
            tries += 1
            sandbox = SimSandbox(
                f"{failed.id}-{tries}", failed.name, failed.namespace, failed.uid, failed.netns_path
            )
            outcome = self.runtime.run_pod_sandbox(sandbox)
            return outcome.refusal if outcome.refusal or not outcome.answered else None

        refusals = with_backoff(run, "RunPodSandbox", RETRY_S)
        print(f"  RunPodSandbox again: {len(refusals)} refused {refusals[-1:]}, then ran")
        return f"{failed.id}-{tries}"

    def create_container(self, sandbox_id: str) -> None:
        """The kubelet creates the container, retrying a refusal (the gate's, while the
        pod's connect is not done) with its back-off."""
        refusals = with_backoff(
            lambda: self.runtime.create_container(sandbox_id, "app").refusal, "CreateContainer"
        )
        if refusals:
            print(f"  the gate refused {len(refusals)} tries, then admitted: {refusals[0]}")


def with_backoff(
    attempt: Callable[[], str | None], what: str, within_s: float = DEADLINE_S
) -> list[str]:
    """``attempt`` (a refusal, or None once it succeeded) tried again after the kubelet's
    back-off (doubling from 0.1 s, at most 2 s) until it succeeds within the deadline;
    the refusals before it did. The back-off is the kubelet's pacing of its retries, not a
    wait for a condition: each try asks the node again."""
    deadline = time.monotonic() + within_s
    refusals: list[str] = []
    backoff = 0.1
    while (refusal := attempt()) is not None:
        refusals.append(refusal)
        assert time.monotonic() < deadline, f"{what} refused every try: {refusals[-3:]}"
        threading.Event().wait(backoff)
        backoff = min(backoff * 2, 2.0)
    return refusals
