"""SIGKILL of the coordinator *program* serving a Kubernetes node, at a boundary of a pod's
life: the real ``networkplugin-coordinator`` process with a ``kubernetes:`` section
(its kubelet DRA plugin, NRI plugin and API client), over real service processes on a
lab with real namespaces (the netns tier: the program finds a sandbox's namespace by
``stat``, as on a node), its peers (``KubeletSim``, ``FakeAPIServer``,
``NRIRuntimeSim``) in this process.

A run arms one ``Pods/...`` or ``Coordinator/...`` point (from the in-process reference,
``harness.k8s.pod_lifecycle.pod_reference``, under the run's identities) and drives the
pod's life in the kubelet's order; the process kills itself there. It is started
again: it recovers from its journal, registers with the kubelet again (a new
registration socket) and with the runtime (Synchronize). The callers go on as theirs
do: the kubelet retries its own calls and the container, the runtime retries nothing.
Then the invariants: the kernel as before (the pod's namespace gone), every call and
pod unit closed (read from the journal once the program stopped), every container the
runtime ran admitted by the gate or evicted.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from labs import CoordinatorProcess, Lab, Node
from plugins.coordinator import (
    CoordinatorJournal,
    attachment_for,
)
from plugins.sdk.runner import CrashPoint

from ..invariants import violations
from ..scenarios import TOPOLOGY_DIR, lab_inventory
from .apiserver import FakeAPIServer
from .kubelet import KubeletSim, PodClaim
from .nri_runtime import NRIRuntimeSim, SimSandbox
from .pod_lifecycle import (
    KUBELET_RETRIES,
    POD_PHASES,
    TOPOLOGY_FILES,
    PodLifecycle,
    unfinished_pod_units,
)
from .wire_node import DRIVER, claim_object

__all__ = ["K8sProgramRig", "ProgramKillRun", "run_identities"]

DEADLINE_S: Final = 20.0
# The in-process reference's identities, its points' names are made of.
REFERENCE_IDS: Final = {PodLifecycle.uid: "uid", PodLifecycle.sandbox_id: "sandbox"}


def run_identities(n: int) -> dict[str, str]:
    """Run ``n``'s claim uid, pod uid and sandbox id (fresh for every run)."""
    return {
        "uid": f"5f1c0a2e-7d41-4c55-9a36-{n:012d}",
        "pod": f"pod-uid-{n}",
        "sandbox": f"sandbox-{n}",
    }


def renamed(point: CrashPoint, n: int) -> CrashPoint:
    """A reference point under run ``n``'s identities (the attachment id derives from the
    sandbox and the claim)."""
    ids = run_identities(n)
    reference = {key: old for old, key in REFERENCE_IDS.items()}
    attachment = attachment_for(reference["sandbox"], reference["uid"])
    renames = {old: ids[key] for old, key in REFERENCE_IDS.items()}
    renames[attachment] = attachment_for(ids["sandbox"], ids["uid"])
    return point.with_identities(renames)


@dataclass
class ProgramKillRun:
    point: CrashPoint | None  # None: a run not killed
    killed_in: str
    violations: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


class K8sProgramRig:
    """The program, the services and the three peers, reused by many runs."""

    def __init__(self, root: Path, lab: Lab) -> None:
        self._stack = contextlib.ExitStack()
        self._short = Path(tempfile.mkdtemp(prefix="k8s-kill-", dir="/tmp"))
        self.node: Node | None = None
        try:
            # Each run's pod has a namespace of its own: a namespace deleted and made
            # again under the same path may get the dead one's inode, and then the
            # services' kernel refuses it (ESTALE: the netns cookie differs), as it must
            # when a handle cannot tell the two apart.
            self.node = Node(lab, root / "node", processes=True, coordinator=False, pod=None)
            self.baseline = self.node.snapshot()
            self.inventory = lab_inventory(lab)
            self.api = self._stack.enter_context(FakeAPIServer())
            self.runtime = self._stack.enter_context(NRIRuntimeSim(self._short / "nri.sock"))
            self.program = CoordinatorProcess(
                root / "networkplugin-coordinator",
                self.node.processes,
                topologies=[TOPOLOGY_DIR / f"{f}.yaml" for f in TOPOLOGY_FILES.values()],
                inventory=TOPOLOGY_DIR / "inventory.yaml",
                policies=TOPOLOGY_DIR / "policies.yaml",
                kubernetes={
                    "nodeName": self.inventory.pool,
                    "apiServer": self.api.url,
                    "kubeletPluginsDir": str(self._short / "plugins"),
                    "kubeletRegistryDir": str(self._short / "registry"),
                    "nriSocket": str(self._short / "nri.sock"),
                },
            )
            self.kubelet = KubeletSim(self._short / "registry", root / "checkpoint.json")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        program = getattr(self, "program", None)
        if program is not None:
            program.kill()
        kubelet = getattr(self, "kubelet", None)
        if kubelet is not None:
            kubelet.stop()
        self._stack.close()
        if self.node is not None:
            self.node.close()
        shutil.rmtree(self._short, ignore_errors=True)

    # -- one run --------------------------------------------------------------------------

    def run(self, topology: str, point: CrashPoint | None, n: int) -> ProgramKillRun:
        """The pod's life with the program killed at ``point`` (None: not killed)."""
        assert self.node is not None
        ids = run_identities(n)
        armed = None if point is None else renamed(point, n)
        result = ProgramKillRun(armed, "-")
        self.api.put_claim(claim_object(topology, ids["uid"], ids["pod"], self.inventory))
        pod_ns = f"pod-{n}"
        netns = self.node.sandbox(pod_ns).namespace.path
        sandbox = SimSandbox(ids["sandbox"], "web", "default", ids["pod"], netns)
        claims = [PodClaim(DRIVER, ids["uid"], "default", "net")]
        self.program.start(crash_at=armed)
        self._wait_peers(result)
        killed = False
        index = 0
        dropped = self._drops()
        while index < len(POD_PHASES):
            phase = POD_PHASES[index]
            result.steps.append(phase)
            answered = self._phase(phase, sandbox, claims, ids, result)
            if not killed and armed is not None and self._died(answered):
                killed = True
                result.killed_in = phase
                result.steps.append(f"  the coordinator was killed at {armed}; started again")
                self._wait_dropped(result, dropped)
                self.program.start()
                self._wait_peers(result, again=True)
                self._evicted_then_recreated(phase, sandbox, result)
                if phase in KUBELET_RETRIES:
                    continue  # the kubelet's retry of the same call
            elif not answered:
                why = result.steps[-1].strip() if result.steps[-1] != phase else ""
                result.violations.append(f"{phase} failed with the coordinator alive: {why}")
            index += 1
        if armed is not None and not killed:
            result.violations.append(f"{armed} was not reached")
        self._check(result, ids, pod_ns)
        return result

    def _died(self, answered: bool) -> bool:
        """Whether the armed process killed itself: a call it did not answer waits for
        its exit (a death is what ends the call); an answered one checks it now."""
        if answered and self.program.running():
            return False
        try:
            code = self.program.wait_exit(DEADLINE_S)
        except subprocess.TimeoutExpired:
            return False
        if code != -signal.SIGKILL:
            raise AssertionError(f"the coordinator exited {code}, not by SIGKILL")
        return True

    def _evicted_then_recreated(
        self, phase: str, sandbox: SimSandbox, result: ProgramKillRun
    ) -> None:
        """Containers the runtime created while we were dead ran ungated: after the
        restart's Synchronize they must be evicted; the kubelet then recreates them, and
        the recreated one passes the gate."""
        if POD_PHASES.index(phase) >= POD_PHASES.index("stop_sandbox"):
            return
        ungated = self._ungated(sandbox.id)
        if not ungated:
            return
        result.steps.append(f"  containers that started ungated: {sorted(ungated)}")
        try:
            for container_id in sorted(ungated):
                self.runtime.wait_for_eviction(container_id, DEADLINE_S)
        except TimeoutError:
            result.violations.append(f"ungated containers never evicted: {sorted(ungated)}")
            return
        result.steps.append("  evicted; the kubelet recreates the container")
        if not self._phase("create_container", sandbox, [], {}, result):
            result.violations.append("the recreated container was refused")

    def _ungated(self, sandbox_id: str) -> set[str]:
        # An evicted container is gone from the runtime's list.
        running = {c.id for c in self.runtime.containers if c.sandbox_id == sandbox_id}
        return running - self._gated()

    def _gated(self) -> set[str]:
        """The containers the gate admitted, as the runtime saw them answered."""
        return {
            r.target
            for r in self.runtime.events_for(DRIVER)
            if r.event == "CreateContainer" and r.result == "answered"
        }

    def _phase(
        self,
        phase: str,
        sandbox: SimSandbox,
        claims: list[PodClaim],
        ids: dict[str, str],
        result: ProgramKillRun,
    ) -> bool:
        runtime = self.runtime
        if phase in ("prepare", "unprepare"):
            error = self._kubelet_call(phase, claims, ids)
        if phase in ("prepare", "unprepare"):
            if error:
                result.steps.append(f"  the kubelet's {phase}: {error}")
            return not error
        if phase == "run_sandbox":
            outcome = runtime.run_pod_sandbox(sandbox)
        elif phase == "create_container":
            for _ in range(3):
                outcome = runtime.create_container(sandbox.id, "app")
                if outcome.refusal is None:
                    break
                result.steps.append(f"  refused: {outcome.refusal}")
            else:
                return False
        elif phase == "stop_sandbox":
            outcome = runtime.stop_pod_sandbox(sandbox.id)
        else:
            outcome = runtime.remove_pod_sandbox(sandbox.id)
        # The runtime goes on without a plugin that does not answer (fail-open): what
        # says whether we answered is the outcome's list, not whether it proceeded.
        if outcome.refusal is not None:
            result.steps.append(f"  refused: {outcome.refusal}")
        if outcome.dropped:
            result.steps.append(f"  the runtime dropped us ({outcome.dropped[0].reason}), went on")
        return any(DRIVER in name for name in outcome.answered)

    def _kubelet_call(self, phase: str, claims: list[PodClaim], ids: dict[str, str]) -> str:
        """The kubelet's prepare or unprepare; its error. A SIGKILLed plugin leaves its
        registration socket behind, so the kubelet may still be between the old
        registration and the new one: like the kubelet, it tries again once the driver
        is registered."""
        kubelet = self.kubelet
        for _ in range(2):
            if phase == "prepare":
                error = kubelet.prepare(ids["pod"], claims)[ids["uid"]].error
            else:
                error = "; ".join(e for e in kubelet.unprepare(ids["pod"], claims).values() if e)
            if "is not registered" not in error:
                return error
            kubelet.wait_for(lambda: kubelet.registered(DRIVER) is not None, DEADLINE_S)
        return error

    def _drops(self) -> int:
        return sum(1 for d in self.runtime.drops if DRIVER in d.plugin)

    def _wait_dropped(self, result: ProgramKillRun, dropped: int) -> None:
        """The runtime saw the dead process's connection close (so the plugin it
        synchronizes next is the new process)."""
        try:
            self.runtime.wait_for_drop(DRIVER, DEADLINE_S, count=dropped + 1)
        except TimeoutError as exc:
            result.violations.append(f"the runtime never dropped the dead plugin: {exc}")

    def _wait_peers(self, result: ProgramKillRun, *, again: bool = False) -> None:
        """The kubelet found the registration socket and the runtime synchronized us."""
        try:
            self.kubelet.wait_registered(DRIVER, DEADLINE_S)
            self.runtime.wait_for_plugin(DRIVER, DEADLINE_S)
        except TimeoutError as exc:
            result.violations.append(f"the peers did not {'re' if again else ''}register: {exc}")

    def _check(self, result: ProgramKillRun, ids: dict[str, str], pod_ns: str) -> None:
        assert self.node is not None
        code = self.program.stop()
        if code != 0:
            result.violations.append(f"the coordinator exited {code} on SIGTERM")
        journal = CoordinatorJournal(self.program.state_dir)  # the program is stopped
        clients = self.node.clients()
        try:
            # This run's units: an earlier run's failure is reported once, by that run.
            result.violations += unfinished_pod_units(journal, ids["uid"], ids["sandbox"])
            result.violations += violations(
                self.baseline, self.node.kernel, journal, clients, sandbox=pod_ns
            )
        finally:
            journal.close()
            for c in clients.values():
                c.close()
