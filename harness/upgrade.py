"""Upgrades between releases with real processes: the previous release built from its
git tag, its services on a node's state directories, then this tree's on the same ones.

``previous_release()`` makes the release of a tag runnable: a ``git worktree`` of the
tagged commit and the venv of its own lock (``uv sync --locked --no-dev``), in a cache
directory keyed by the commit (``$DRANP_RELEASE_CACHE``, default
``~/.cache/dranp-releases``). Built once per machine and reused; never required: a clone
without the release's commit (shallow), or a machine without uv, gets
``ReleaseUnavailable`` with one line. A clone without tags uses the commit ``RELEASES``
records.

``ReleaseKernelLab`` is the node's kernel across the upgrade: the previous release's fake
kernel server, which a rolling update of the services never restarts (a node's kernel is
not upgraded with them). Both releases reach it: the old services over ``fake://`` (its
scheme then), this tree's over ``kernel+unix://``; the old server ignores the protocol
version this tree's client sends, while this tree's server refuses a request without it,
so the previous release's server is the one both can drive. Its node starts with the
previous release's services (``ReleaseServiceProcess``); ``hand_over`` stops one as a
rolling update does (SIGTERM, or finds it SIGKILLed) and starts this tree's on the same
state directory, socket directory and token. ``ReleaseCoordinatorProcess`` is the
release's coordinator program the same way.

``leave_every_state`` drives one service of the release into every state an upgrade can
meet, as ``LEAVING`` says for each (topology, crash point, the administrator's change
that makes a cleanup quarantine); tests/upgrade/make_golden_journals.py keeps what it
leaves as golden journals, with the kernel's snapshot, and ``restore_kernel`` brings a
fresh fake kernel of the release's lab back to that snapshot for a later build.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, NamedTuple

import grpc

from fakekernel import diff
from fakekernel.client import FakeKernelClient, FakeKernelProcess
from labs import (
    PROJECT_SERVICES,
    CoordinatorProcess,
    Lab,
    Node,
    ProcessServices,
    ReadyListener,
    ServiceProcess,
    ServiceSpec,
    project_descriptors,
)
from plugins.api.networkplugin.v1alpha1 import pb
from plugins.coordinator import (
    AllocatedDevice,
    Allocator,
    CompiledTopology,
    StepFailed,
    load_policies,
    load_yaml_file,
    parse_topology,
    validate_topology,
)
from plugins.kernel import BondInfo, Link, LinkChanges, LinkSpec, NsRef, VFChanges
from plugins.sdk import CleanupStatus, SandboxHandle
from plugins.sdk.host import connect_request_to_pb, prepare_request_to_pb
from plugins.sdk.runner import ENV_ARM, ENV_MODE, ENV_TRACE, CrashPoint

from .scenarios import TOPOLOGY_DIR, Lifecycle, compiled, lab_inventory

REPO = Path(__file__).resolve().parent.parent
PREVIOUS_RELEASE = "v0.1.0"
RELEASES = {"v0.1.0": "6eb5d1aab468f03f40417f2f59cbc46e7669ade4"}
"""Each release's tag and the commit it names (CHANGELOG.md). A clone made without tags
(``--no-tags``, or a CI that pushes one branch) still has the commits of main's history:
the recorded commit is used where the tag is missing, and a tag naming another commit is
refused rather than trusted."""
CACHE_ENV = "DRANP_RELEASE_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "dranp-releases"
LAUNCHER = "labs.crashing_service"  # the previous release's launcher has the same name
BUILD_TIMEOUT_S = 600
_NETWORK_PLUGIN = pb.DESCRIPTOR.services_by_name["NetworkPlugin"].full_name

# Variables of this tree's environment that would make a previous release's interpreter
# import this tree, or uv build into this tree's venv.
_FOREIGN_ENV = (
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "UV_PROJECT_ENVIRONMENT",
    "PYTHONDONTWRITEBYTECODE",
    ENV_ARM,
    ENV_MODE,
    ENV_TRACE,
)


class ReleaseUnavailable(Exception):
    """The previous release cannot be built here (one line: why)."""


@dataclass(frozen=True)
class Release:
    """A built release: its tag, the commit it names, its source tree with its venv."""

    tag: str
    commit: str
    src: Path

    @property
    def python(self) -> Path:
        return self.src / ".venv" / "bin" / "python"

    def env(self) -> dict[str, str]:
        """This process's environment without what would mix this tree into the release
        (nor arm a crash point the caller did not ask for)."""
        return {k: v for k, v in os.environ.items() if k not in _FOREIGN_ENV}


def _git(*args: str, repo: Path = REPO) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise ReleaseUnavailable(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def release_cache() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def previous_release(tag: str = PREVIOUS_RELEASE) -> Release:
    """The release ``tag`` names, built (or found built) in the cache."""
    commit = release_commit(tag)
    uv = os.environ.get("UV") or shutil.which("uv")  # uv run names itself in $UV
    if uv is None:
        raise ReleaseUnavailable(f"uv is not on PATH: the venv of {tag} cannot be built")
    root = release_cache() / commit
    root.mkdir(parents=True, exist_ok=True)
    release = Release(tag, commit, root / "src")
    # One build per commit at a time (xdist workers, two clones): the others wait for it.
    with (root / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "built").exists():
            _build(release, uv)
            (root / "built").write_text(f"{tag} {commit}\n")
    return release


def release_commit(tag: str, repo: Path = REPO) -> str:
    """The commit of release ``tag`` in the clone at ``repo``: its tag's, else the one
    ``RELEASES`` records."""
    recorded = RELEASES.get(tag)
    try:
        tagged: str | None = _git(
            "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}", repo=repo
        )
    except ReleaseUnavailable:
        tagged = None
    if tagged is not None and recorded is not None and tagged != recorded:
        raise ReleaseUnavailable(
            f"the release tag {tag} names {tagged[:12]}, not the released {recorded[:12]}"
        )
    commit = tagged or recorded
    if commit is None:
        raise ReleaseUnavailable(f"the release tag {tag} is not in this clone (git fetch --tags)")
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", repo=repo)
    except ReleaseUnavailable:
        raise ReleaseUnavailable(
            f"release {tag}'s commit {commit[:12]} is not in this clone (a shallow clone?)"
        ) from None


def _build(release: Release, uv: str) -> None:
    """A worktree of the tagged commit and the venv of its lock (a half-built one from an
    interrupted run is replaced: ``built`` is written only after both)."""
    if release.src.exists():
        with contextlib.suppress(ReleaseUnavailable):
            _git("worktree", "remove", "--force", str(release.src))
        shutil.rmtree(release.src, ignore_errors=True)
    # --force: a worktree registered at this path whose directory is gone is taken over.
    _git("worktree", "add", "--detach", "--force", str(release.src), release.commit)
    done = subprocess.run(
        [uv, "sync", "--locked", "--no-dev", "--quiet"],
        cwd=release.src,
        env=release.env(),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ReleaseUnavailable(f"uv sync --locked of {release.tag} failed: {last}")


class ReleaseKernelProcess(FakeKernelProcess):
    """The previous release's fake kernel server (its lab file, as it was released)."""

    def __init__(self, release: Release, socket_path: Path) -> None:
        super().__init__(socket_path, None, python=str(release.python))
        self.release = release

    def start(self) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(self.release.python), "-m", "fakekernel", "--socket", str(self.socket_path)],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=self.release.env(),
            cwd=self.release.src,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise


class ReleaseServiceProcess(ServiceProcess):
    """A service of ``release`` on this node's config, state and token: the command of the
    release's own launcher and interpreter, run from its source tree."""

    publishes_metrics = False  # the rig's scrape adds up this tree's services

    def __init__(
        self,
        release: Release,
        name: str,
        command: Sequence[str],
        root: Path,
        socket_dir: Path,
        kernel_url: str,
        sockets: Sequence[str],
    ) -> None:
        super().__init__(name, command, root, socket_dir, kernel_url, sockets)
        self.release = release

    def start(
        self,
        crash_at: CrashPoint | None = None,
        trace: Path | None = None,
        timeout: float = 30,
        *,
        wait_ready: bool = True,
    ) -> None:
        armed = None if crash_at is None else str(crash_at)
        self.launch(armed, trace, timeout, wait_ready=wait_ready)

    def launch(
        self,
        armed: str | None = None,
        trace: Path | None = None,
        timeout: float = 30,
        *,
        wait_ready: bool = True,
    ) -> None:
        """Start it (``armed``: SIGKILL at this point, named as the release names points;
        ``trace``: the points it reaches, one a line) and wait until every socket is ready
        (``wait_ready=False``: until each answers, ready or not)."""
        extra = {} if armed is None else {ENV_ARM: armed, ENV_MODE: "sigkill"}
        if trace is not None:
            extra[ENV_TRACE] = str(trace)
        deadline = time.monotonic() + timeout
        with ReadyListener() as listener:
            # Not waiting for it: no socket to notify that closes before it would.
            notify = listener.env() if wait_ready else {}
            self.proc = _release_popen(self.release, self, extra, notify)
            if wait_ready:
                listener.wait(self.proc, timeout)
        for socket in self.sockets:
            with self.client(socket) as client:
                left = max(deadline - time.monotonic(), 0.001)
                self._wait_serving(client, left, wait_ready=wait_ready)


def _release_popen(
    release: Release, process: ServiceProcess, extra: dict[str, str], notify: dict[str, str]
) -> subprocess.Popen[bytes]:
    """``process``'s program run by ``release``'s interpreter from its source tree, with
    ``extra`` (crash variables: through the launcher) and ``notify`` in its environment,
    its output appended to its log."""
    program = [LAUNCHER, *process.command] if extra else list(process.command)
    with process.log.open("ab") as log:
        return subprocess.Popen(
            [
                str(release.python),
                "-m",
                *program,
                "--config",
                str(process.config),
                "--log-level",
                process.log_level,
            ],
            cwd=release.src,
            env={**release.env(), **extra, **notify},
            stdout=log,
            stderr=subprocess.STDOUT,
        )


class ReleaseCoordinatorProcess(CoordinatorProcess):
    """The coordinator program of ``release`` (its interpreter, launcher and source tree)
    on this node's services, with its journal and token under ``root``."""

    def __init__(
        self, release: Release, root: Path, services: ProcessServices, **files: Any
    ) -> None:
        super().__init__(root, services, **files)
        self.release = release

    def start(
        self,
        crash_at: CrashPoint | None = None,
        trace: Path | None = None,
        timeout: float = 30,
        *,
        wait_ready: bool = True,
    ) -> None:
        self.launch(None if crash_at is None else str(crash_at), trace, timeout)

    def launch(
        self, armed: str | None = None, trace: Path | None = None, timeout: float = 30
    ) -> None:
        """Start it (``armed``: SIGKILL at this point, as the release names points;
        ``trace``: the points it reaches) and wait until its status says ready."""
        extra = {} if armed is None else {ENV_ARM: armed, ENV_MODE: "sigkill"}
        if trace is not None:
            extra[ENV_TRACE] = str(trace)
        with ReadyListener() as listener:
            self.proc = _release_popen(self.release, self, extra, listener.env())
            listener.wait(self.proc, timeout)
        with self.coordinator_client() as client:
            client.wait_ready(timeout)


class ReleaseKernelLab(Lab):
    """A node's kernel that outlives an upgrade of its services: the previous release's
    fake kernel server. A node built on it starts the previous release's services."""

    tier = "fake"

    def __init__(self, release: Release) -> None:
        self.release = release
        self.start_seed = 0  # the release's lab file as written: no random starting state
        self.short_dir = Path(tempfile.mkdtemp(prefix="upgrade-", dir="/tmp"))
        self.socket = self.short_dir / "kernel.sock"
        self.process = ReleaseKernelProcess(release, self.socket)
        self.process.start()
        self.client = FakeKernelClient(self.socket)

    @property
    def kernel(self) -> FakeKernelClient:
        return self.client

    @property
    def kernel_url(self) -> str:
        """This tree's scheme for a kernel behind a Unix socket."""
        return f"kernel+unix://{self.socket}"

    @property
    def release_kernel_url(self) -> str:
        """The previous release's scheme for the same socket."""
        return f"fake://{self.socket}"

    def process_services(
        self, root: Path, specs: Sequence[ServiceSpec], socket_dir: Path
    ) -> ProcessServices:
        services = ProcessServices(self, root, specs, socket_dir)
        for spec in specs:
            services.processes[spec.name] = ReleaseServiceProcess(
                self.release,
                spec.name,
                spec.command,
                root / spec.name,
                socket_dir / f"{spec.name}.sock.d",
                self.release_kernel_url,
                spec.sockets,
            )
        return services

    def close(self) -> None:
        self.client.close()
        self.process.stop()
        shutil.rmtree(self.short_dir, ignore_errors=True)


def hand_over(node: Node, name: str, *, stopped: bool = False) -> int | None:
    """A rolling update of service ``name``: the running release stops on SIGTERM (its
    exit status; ``stopped``: it is already dead, None) and this tree's program starts on
    the same state directory, socket directory and token, recovering before it is
    ready; the coordinator's clients reconnect."""
    old = node.processes.processes[name]
    code = None if stopped else old.stop()
    spec = next(s for s in node.processes.specs if s.name == name)
    url = node.lab.kernel_url
    assert url is not None
    new = ServiceProcess(name, spec.command, old.root, old.socket_dir, url, spec.sockets)
    new.token = old.token  # the same secret file, as the DaemonSet's pod mounts it
    (old.root / "token").write_text(old.token)
    node.processes.processes[name] = new
    new.start()
    node.reconnect()
    return code


@dataclass(frozen=True)
class JournalRecord:
    """One operation of a plugin journal as the file holds it."""

    operation_id: str
    hook: str
    scope: str
    step: str
    generation: int
    epoch: int
    state: str
    cleanup_status: str | None

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@contextlib.contextmanager
def journal_copy(state_dir: Path) -> Iterator[sqlite3.Connection]:
    """A connection to a copy of the journal in ``state_dir`` (its ``-wal`` with it), so
    the reading can neither change nor checkpoint the journal."""
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in ("", "-wal"):
            source = state_dir / f"journal.db{suffix}"
            if source.exists():
                shutil.copyfile(source, Path(tmp) / f"journal.db{suffix}")
        conn = sqlite3.connect(Path(tmp) / "journal.db")
        try:
            yield conn
        finally:
            conn.close()


def journal_records(state_dir: Path) -> list[JournalRecord]:
    """Every operation of the journal in ``state_dir``, read from a copy."""
    with journal_copy(state_dir) as conn:
        rows = conn.execute(
            "SELECT operation_id, hook, scope, step, generation, epoch, state, cleanup_status "
            "FROM operations "
            "ORDER BY seq"
        ).fetchall()
    return [JournalRecord(*row) for row in rows]


def journal_bytes(state_dir: Path) -> dict[str, bytes]:
    """The journal's files, byte for byte (those present)."""
    names = ("journal.db", "journal.db-wal", "journal.db-shm", "journal.id")
    return {n: (state_dir / n).read_bytes() for n in names if (state_dir / n).exists()}


def raw_call(process: ServiceProcess, socket: str, rpc: str, request: bytes) -> bytes:
    """One NetworkPlugin RPC with the request's bytes as given and the response's bytes
    as the service sent them (no decoding on either side)."""
    with grpc.insecure_channel(f"unix://{process.socket_dir / socket}") as channel:
        call = channel.unary_unary(
            f"/{_NETWORK_PLUGIN}/{rpc}", request_serializer=None, response_deserializer=None
        )
        answer: bytes = call(
            request, metadata=(("authorization", f"Bearer {process.token}"),), timeout=30
        )
        return answer


class SentRequest(NamedTuple):
    """A request as the coordinator sent it: to which plugin, which RPC, its bytes."""

    plugin: str
    rpc: str
    wire: bytes


Sent = dict[str, SentRequest]
"""The coordinator's NodePrepare and ConnectNetwork requests, by operation id."""


class RecordingClient:
    """A coordinator's plugin client that keeps the wire bytes of each NodePrepare and
    ConnectNetwork request it sends (to replay them later as they were)."""

    def __init__(self, client: Any, plugin: str, sent: Sent) -> None:
        self._client = client
        self._plugin = plugin
        self._sent = sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def node_prepare(self, req: Any) -> Any:
        wire = prepare_request_to_pb(req).SerializeToString(deterministic=True)
        self._sent[req.envelope.operation_id] = SentRequest(self._plugin, "NodePrepare", wire)
        return self._client.node_prepare(req)

    def connect_network(self, req: Any) -> Any:
        wire = connect_request_to_pb(req).SerializeToString(deterministic=True)
        self._sent[req.envelope.operation_id] = SentRequest(self._plugin, "ConnectNetwork", wire)
        return self._client.connect_network(req)


def record_requests(node: Node, sent: Sent) -> None:
    """Make the node's coordinator keep its requests' bytes in ``sent`` (again after each
    ``reconnect``, which gives it new clients)."""
    clients: dict[str, Any] = node.coordinator.clients  # PluginClient's calls, by duck type
    for plugin, client in list(clients.items()):
        if not isinstance(client, RecordingClient):
            clients[plugin] = RecordingClient(client, plugin, sent)


def replay(node: Node, request: SentRequest) -> bytes:
    """``request`` sent again, as it was, to whichever program serves its plugin now; the
    answer's bytes as sent."""
    return raw_call(
        node.processes.of(request.plugin), f"{request.plugin}.sock", request.rpc, request.wire
    )


@contextlib.contextmanager
def previous_release_node(
    release: Release, root: Path, services: Sequence[ServiceSpec]
) -> Iterator[Node]:
    """A node of ``services`` of ``release`` on its own kernel server (no pod yet)."""
    lab = ReleaseKernelLab(release)
    try:
        with Node(lab, root, services=services, processes=True, pod=None) as node:
            yield node
    finally:
        lab.close()


# -- the previous release leaves operations in every state ------------------------------

REFERENCE, SUCCEEDED, IN_FLIGHT, QUARANTINED = 0, 1, 2, 3
"""Each run's number: its claim ``claim-<n>``, attachment ``att-<n>`` and pod ``pod-<n>``."""


@dataclass(frozen=True)
class Leaving:
    """How one service of the previous release is left in every state: the services its
    node runs (``services``, the topology's), the topology its lifecycles run
    (``topology``: a file of topologies/, or ``document``, derived from one), the
    logical plugin whose journal is kept (served by ``service``), the suffix of the
    in-flight connect's crash point (``in_flight_at``), and what an administrator does
    (``quarantine``, given the node and the run) to make claim 3's cleanup quarantine
    in ``quarantined_phase``: the remove, or (a plugin whose remove cannot meet an
    external change it must keep) the unprepare."""

    service: str
    plugin: str
    topology: str
    services: tuple[str, ...]
    in_flight_at: str
    quarantine: Callable[[Node, Lifecycle], None]
    claim_step: str | None
    """The Allocation step of ``plugin`` (its claims' scopes are ``claim-<n>.<step>``);
    None: the plugin prepares nothing (an operation like bond)."""
    quarantined_phase: Literal["remove", "unprepare"] = "remove"
    document: Callable[[], dict[str, Any]] | None = None

    @property
    def socket(self) -> str:
        return f"{self.plugin}.sock"

    @property
    def specs(self) -> tuple[ServiceSpec, ...]:
        return tuple(s for s in PROJECT_SERVICES if s.name in self.services)

    @property
    def quarantined_scope(self) -> str:
        """The scope whose cleanup quarantined (its records stay ``Quarantined``)."""
        if self.quarantined_phase == "remove":
            return f"att-{QUARANTINED}"
        return f"claim-{QUARANTINED}.{self.claim_step}"

    @property
    def held_scopes(self) -> tuple[str, ...]:
        """Scopes the plugin refuses to clean while the quarantined one stays: the claim
        of a quarantined attachment (``FAILED_PRECONDITION``)."""
        if self.quarantined_phase != "remove" or self.claim_step is None:
            return ()
        return (f"claim-{QUARANTINED}.{self.claim_step}",)

    @property
    def quarantined_scopes(self) -> tuple[str, ...]:
        """Every scope left unclean: the quarantined one, then the ones it holds."""
        return (self.quarantined_scope, *self.held_scopes)

    def compiled(self) -> CompiledTopology:
        if self.document is None:
            return compiled(self.topology)
        policies = load_policies(TOPOLOGY_DIR / "policies.yaml")
        return validate_topology(
            parse_topology(self.document(), self.topology), project_descriptors(), policies
        )


def replace_marked_link(node: Node, life: Lifecycle, name: str) -> None:
    """An administrator replaces our link ``name`` in the pod by a dummy carrying our
    marker: a remove cannot tell it from ours and must quarantine, never delete it."""
    ns = node.kernel.open_namespace(life.lab.sandbox().namespace)
    ours = node.kernel.get_link(ns, name=name)
    assert ours is not None, f"the connect left no {name}"
    assert ours.alias, f"our {name} carries no marker"
    node.kernel.delete_link(ns, ours.ifindex)
    node.kernel.create_link(ns, LinkSpec(name=name, kind="dummy", alias=ours.alias))


def retag_vf(node: Node, life: Lifecycle, vlan: int = 42) -> None:
    """An administrator gives claim 3's VF a VLAN of their own while it is attached: the
    VF comes home cleanly, but its unprepare finds a setting neither ours nor its
    before-image and must quarantine rather than overwrite it. (v0.1.0's remove of a
    VF quarantines only a VF that vanished, which no kernel lab can do to a VF.)"""
    vf = life.allocations["vf0"].attributes
    host = node.kernel.host_namespace()
    pf = node.kernel.get_link(host, name=str(vf["pfName"]))
    assert pf is not None, vf
    node.kernel.set_vf(host, pf.ifindex, int(vf["vfIndex"]), VFChanges(vlan=vlan))


def vf_alone() -> dict[str, Any]:
    """topologies/vf-bond.yaml's first VF alone: one exclusive VF moved into the pod."""
    (doc,) = load_yaml_file(TOPOLOGY_DIR / "vf-bond.yaml")
    assert isinstance(doc, dict)
    doc["metadata"]["name"] = "upgrade-vf"
    doc["spec"]["steps"] = [s for s in doc["spec"]["steps"] if s["name"] == "vf0"]
    doc["spec"]["exports"] = {"data": {"from": {"step": "vf0", "output": "interface"}}}
    return doc


LEAVING = {
    "networkplugin-links": Leaving(
        service="networkplugin-links",
        plugin="macvlan",
        topology="macvlan",
        services=("networkplugin-links",),
        # The macvlan exists in the pod and its effect record says Applying.
        in_flight_at="create-child/kernel#1.create_link.after",
        quarantine=partial(replace_marked_link, name="secondary0"),
        claim_step="secondary",
    ),
    "networkplugin-vf": Leaving(
        service="networkplugin-vf",
        plugin="sriov",
        topology="upgrade-vf",
        services=("networkplugin-vf",),
        # The VF is in the pod under its temporary name, marked; its move is Applying
        # (its settings, applied by the prepare, keep their before-images).
        in_flight_at="move-vf.move/kernel#1.move_link.after",
        quarantine=retag_vf,
        claim_step="vf0",
        quarantined_phase="unprepare",
        document=vf_alone,
    ),
    "networkplugin-bond": Leaving(
        service="networkplugin-bond",
        plugin="bond",
        topology="vf-bond",
        services=("networkplugin-vf", "networkplugin-bond"),
        # The bond exists in the pod with its first VF enslaved; that enslaving is
        # Applying, the second VF not yet touched.
        in_flight_at="attach-member-0/kernel#2.set_link.after",
        quarantine=partial(replace_marked_link, name="bond0"),
        claim_step=None,
    ),
}
"""Every service's way of being left in every state, by service name."""

LINKS_LEAVING = LEAVING["networkplugin-links"]
TOPOLOGY = LINKS_LEAVING.topology
SERVICE = LINKS_LEAVING.service
SOCKET = LINKS_LEAVING.socket
LINKS = LINKS_LEAVING.specs
QUARANTINED_SCOPES = LINKS_LEAVING.quarantined_scopes


@dataclass
class Pod:
    """A lifecycle's view of the node with a pod of its own (``Lifecycle`` asks its
    ``lab`` for the coordinator and the sandbox)."""

    node: Node
    name: str

    @property
    def coordinator(self) -> Any:
        return self.node.coordinator

    @property
    def lab(self) -> Any:
        return self.node.lab

    def sandbox(self, name: str = "") -> SandboxHandle:
        return self.node.sandbox(self.name)


def lifecycle(node: Node, n: int, topology: str = TOPOLOGY) -> Lifecycle:
    return Lifecycle(topology, Pod(node, f"pod-{n}"), claim=f"claim-{n}", attachment=f"att-{n}")


@dataclass
class TopologyLifecycle(Lifecycle):
    """A lifecycle of a topology compiled by the caller (``given``), on devices the
    caller allocated (``devices``)."""

    given: CompiledTopology | None = None
    devices: dict[str, AllocatedDevice] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.given is not None, "TopologyLifecycle needs its compiled topology"
        self.compiled = self.given
        self.allocations = self.devices


def lifecycles(node: Node, leaving: Leaving, runs: Sequence[int]) -> dict[int, Lifecycle]:
    """One lifecycle per run of ``leaving``'s topology, each on devices of its own (one
    allocator for all of them: exclusive VFs are not handed out twice)."""
    topology = leaving.compiled()
    policies = load_policies(TOPOLOGY_DIR / "policies.yaml")
    allocator = Allocator(lab_inventory(node.lab), policies)
    return {
        n: TopologyLifecycle(
            leaving.topology,
            Pod(node, f"pod-{n}"),
            claim=f"claim-{n}",
            attachment=f"att-{n}",
            given=topology,
            devices=allocator.allocate(topology),
        )
        for n in runs
    }


def old_process(node: Node, service: str = SERVICE) -> ReleaseServiceProcess:
    process = node.processes.processes[service]
    assert isinstance(process, ReleaseServiceProcess), "the service was handed over already"
    return process


@dataclass
class LeftBehind:
    """What the previous release left: claim 0's lifecycle run to its end, claim 1
    prepared and connected, claim 3's remove quarantined, claim 2's connect SIGKILLed at
    ``point``; the old release's answers to claim 1's requests (by operation id), and
    every request's bytes as the coordinator sent them (``sent``, kept up to date)."""

    lifecycles: dict[int, Lifecycle]
    point: str
    answers: dict[str, bytes]
    sent: Sent = field(default_factory=dict)


def restart_old(node: Node, sent: Sent, service: str = SERVICE, **launch: Any) -> None:
    """SIGKILL an old service and start it again (``launch``'s arguments)."""
    old = old_process(node, service)
    old.kill()
    old.launch(**launch)
    node.reconnect()
    record_requests(node, sent)


def connect_points(trace: Path, reference: int) -> list[str]:
    """The previous release's points of run ``reference``'s connect, as it names them, at
    which a record of the connect exists (from its intent's commit on)."""
    points = [
        p
        for p in trace.read_text().splitlines()
        if p.startswith(f"ConnectNetwork/att-{reference}:")
    ]
    first = next(p for p in points if p.endswith("/intent.after-commit"))
    return points[points.index(first) :]


def renamed(point: str, reference: int, n: int) -> str:
    return point.replace(f"att-{reference}:", f"att-{n}:").replace(
        f"claim-{reference}.", f"claim-{n}."
    )


def quarantine_remove(node: Node, life: Lifecycle, leaving: Leaving = LINKS_LEAVING) -> None:
    """An administrator's change (``leaving.quarantine``) the cleanup cannot tell from
    ours: ``leaving.quarantined_phase`` quarantines the plugin's step, never undoes it
    (a remove before it cleans)."""
    leaving.quarantine(node, life)
    for phase in ("remove", "unprepare"):
        receipts = life.phase(phase)()
        statuses = {step: r.status for step, r in receipts.items()}
        quarantined = {s for s, status in statuses.items() if status is CleanupStatus.QUARANTINED}
        if phase == leaving.quarantined_phase:
            assert quarantined, statuses
            assert {life.compiled.steps[s].plugin for s in quarantined} == {leaving.plugin}
            return
        assert set(statuses.values()) == {CleanupStatus.CLEANED}, statuses


def administrator_clears(node: Node, pod: SandboxHandle) -> None:
    """The administrator takes back the dummy that made the remove quarantine."""
    ns = node.kernel.open_namespace(pod.namespace)
    planted = node.kernel.get_link(ns, name="secondary0")
    assert planted is not None, "the planted dummy is gone"
    assert planted.kind == "dummy", planted
    node.kernel.delete_link(ns, planted.ifindex)


def leave_every_state(
    node: Node,
    trace: Path,
    pick: Callable[[list[str]], str],
    leaving: Leaving = LINKS_LEAVING,
) -> LeftBehind:
    """Drive ``node``'s previous-release service ``leaving.service`` into every state an
    upgrade can meet; ``pick`` chooses the in-flight connect's point among the reference
    run's (``connect_points``). Returns with the service dead by SIGKILL at that point."""
    sent: Sent = {}
    service = leaving.service
    restart_old(node, sent, service, trace=trace)
    runs = lifecycles(node, leaving, (REFERENCE, SUCCEEDED, QUARANTINED, IN_FLIGHT))
    runs[REFERENCE].run()
    runs[SUCCEEDED].run(0, 2)
    answers = {
        op: replay(node, request)
        for op, request in sent.items()
        if request.plugin == leaving.plugin
        and op.startswith((f"claim-{SUCCEEDED}.", f"att-{SUCCEEDED}:"))
    }
    assert answers, "no request of claim 1 reached the plugin"
    runs[QUARANTINED].run(0, 2)
    quarantine_remove(node, runs[QUARANTINED], leaving)
    point = renamed(pick(connect_points(trace, REFERENCE)), REFERENCE, IN_FLIGHT)
    restart_old(node, sent, service, armed=point)
    runs[IN_FLIGHT].run(0, 1)
    try:
        runs[IN_FLIGHT].phase("connect")()
    except StepFailed:
        pass
    else:
        raise AssertionError(f"the connect was not killed at {point}")
    code = old_process(node, service).wait_exit()
    assert code == -signal.SIGKILL, f"{service} exited {code} at {point}, not by SIGKILL"
    return LeftBehind(runs, point, answers, sent)


# -- the kernel a golden journal was left on --------------------------------------------


def comparable(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """A fake kernel's snapshot with its links named by where they are (``<netns>#<ifindex>``,
    unique on a node) instead of by the model's internal ids, which count every link ever
    created: two kernels in the same state compare equal however they got there."""
    where = {lk["id"]: f"{lk['ns']}#{lk['ifindex']}" for lk in snapshot["links"]}

    def named(link_id: Any) -> Any:
        return None if link_id is None else where.get(link_id, f"gone#{link_id}")

    links = []
    for lk in snapshot["links"]:
        out = dict(lk, id=where[lk["id"]], master=named(lk["master"]), parent=named(lk["parent"]))
        out["peer"] = named(lk.get("peer"))
        if lk["bond"] is not None:
            bond = dict(lk["bond"])
            bond["slaves"] = [named(s) for s in bond["slaves"]]
            bond["active"] = named(bond.get("active"))
            bond["link_up"] = {named(int(k)): v for k, v in bond.get("link_up", {}).items()}
            out["bond"] = bond
        links.append(out)
    return {**snapshot, "links": sorted(links, key=lambda lk: lk["id"])}


def restore_kernel(kernel: FakeKernelClient, left: Mapping[str, Any]) -> list[str]:
    """Bring ``kernel`` (a fresh fake kernel of the lab the release ran on, not
    randomized) to the state ``left`` (the release's kernel's snapshot) records: the
    pods' namespaces, the VF tables, the PCI functions moved and renamed, the virtual
    links created (bonds, dummies, macvlans), the bonds' slaves, the admin states. The
    differences that remain (``fakekernel.diff`` of the two, ``comparable``) are
    returned: none, or this kernel cannot stand for the one the journal was left on."""
    host = kernel.host_namespace()
    for ns in sorted(left["namespaces"], key=lambda n: n["inode"]):
        if ns["path"] != host.path:
            kernel.add_namespace(ns["name"])
    spaces = {ns.path: ns for ns in kernel.namespaces()} | {host.path: host}
    counters = _Counters(kernel)
    tables = {pf["pci"]: pf["vfs"] for pf in kernel.snapshot()["pfs"]}
    for pf in left["pfs"]:
        parent = kernel.find_device(pf["pci"])
        assert parent is not None, f"the lab has no PF {pf['pci']}"
        for vf, was in zip(pf["vfs"], tables[pf["pci"]], strict=True):
            changes = {k: v for k, v in vf.items() if was.get(k) != v}
            if changes:
                kernel.set_vf(host, parent.ifindex, vf["vf_index"], VFChanges(**changes))
    made: dict[int, tuple[NsRef, int]] = {}  # the snapshot's link id -> here
    for lk in sorted(left["links"], key=lambda lk: lk["id"]):
        ns = spaces[lk["ns"]]
        if lk["pci_address"]:
            link = kernel.find_device(lk["pci_address"])
            assert link is not None, f"the lab has no PCI function {lk['pci_address']}"
            if link.ns.key != ns.key:
                link = kernel.move_link(link.ns, link.ifindex, ns, new_name=lk["name"])
            fix = LinkChanges(
                name=lk["name"] if link.name != lk["name"] else None,
                alias=(lk["alias"] or "") if link.alias != lk["alias"] else None,
                mtu=lk["mtu"] if link.mtu != lk["mtu"] and lk["master"] is None else None,
            )
            if fix != LinkChanges():
                link = kernel.set_link(ns, link.ifindex, fix)
        else:
            existing = kernel.get_link(ns, name=lk["name"])
            link = existing or counters.create(ns, _spec(lk, made), lk)
        made[lk["id"]] = (ns, link.ifindex)
    for lk in left["links"]:
        for slave in (lk["bond"] or {}).get("slaves", []):
            ns, ifindex = made[slave]
            kernel.set_link(ns, ifindex, LinkChanges(up=False))  # a slave is enslaved down
            kernel.set_link(ns, ifindex, LinkChanges(master=made[lk["id"]][1]))
    for lk in sorted(left["links"], key=lambda lk: lk["bond"] is not None):
        ns, ifindex = made[lk["id"]]
        link = kernel.get_link(ns, ifindex=ifindex)
        assert link is not None
        if link.up != lk["up"]:
            kernel.set_link(ns, ifindex, LinkChanges(up=lk["up"]))
    counters.close()
    return diff(comparable(left), comparable(kernel.snapshot()))


def _spec(lk: Mapping[str, Any], made: Mapping[int, tuple[NsRef, int]]) -> LinkSpec:
    bond = lk["bond"]
    parent = None if lk["parent"] is None else made[lk["parent"]]
    return LinkSpec(
        kind=lk["kind"],
        name=lk["name"],
        # A bond takes its first slave's address when it is enslaved; a random address
        # is the kernel's to give (``_Counters``).
        mac=None if bond is not None or lk["mac_assign"] == "random" else lk["mac"],
        mtu=lk["mtu"],
        alias=lk["alias"],
        parent=None if parent is None else parent[1],
        parent_ns=None if parent is None else parent[0],
        mode=lk["mode"],
        vlan_id=lk["vlan_id"],
        vlan_protocol=lk["vlan_protocol"] or "802.1Q",
        bond=None
        if bond is None
        else BondInfo(
            mode=bond["mode"],
            miimon_ms=bond["miimon_ms"],
            updelay_ms=bond["updelay_ms"],
            downdelay_ms=bond["downdelay_ms"],
        ),
    )


FIRST_IFINDEX = 2  # every namespace's loopback has 1
_PLACEHOLDER_MAC = "02:00:00:00:00:01"
_RANDOM_MAC = "0e:fa:"  # the fake kernel's eth_hw_addr_random


def _mac_number(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


class _Counters:
    """What the fake kernel hands out next, to give a restored link the ifindex and the
    random address the release's had. Neither is ever handed out twice (an ifindex per
    namespace, from 2 up, skipping those taken; an address from one counter): one the
    release's kernel gave a link deleted since (the bond a quarantined remove's
    administrator replaced by a dummy, the macvlans of a finished lifecycle) is spent
    here too, on a link made and deleted at once: for an ifindex in the namespace with
    a fixed address, for an address in a namespace of its own."""

    def __init__(self, kernel: FakeKernelClient) -> None:
        self.kernel = kernel
        snapshot = kernel.snapshot()
        given = [
            _mac_number(mac)
            for lk in snapshot["links"]
            for mac in (lk["mac"], lk.get("perm_mac"))
            if mac and mac.startswith(_RANDOM_MAC)
        ]
        self.next_mac = max(given, default=_mac_number(f"{_RANDOM_MAC}00:00:00:00")) + 1
        self.next_ifindex: dict[tuple[int, int, str], int] = {}
        self.scratch: NsRef | None = None

    def create(self, ns: NsRef, spec: LinkSpec, lk: Mapping[str, Any]) -> Link:
        while self._next_ifindex(ns) < lk["ifindex"]:
            self._spend(ns, LinkSpec(kind="dummy", name="restore0", mac=_PLACEHOLDER_MAC))
        if spec.mac is None and spec.bond is None:
            while self.next_mac < _mac_number(lk["mac"]):
                if self.scratch is None:
                    self.scratch = self.kernel.add_namespace("restore-scratch")
                self._spend(self.scratch, LinkSpec(kind="dummy", name="restore0"))
        return self._made(ns, self.kernel.create_link(ns, spec), spec)

    def close(self) -> None:
        if self.scratch is not None:
            self.kernel.delete_namespace("restore-scratch")

    def _next_ifindex(self, ns: NsRef) -> int:
        taken = {lk.ifindex for lk in self.kernel.list_links(ns)}
        n = self.next_ifindex.get(ns.key, FIRST_IFINDEX)
        while n in taken:
            n += 1
        return n

    def _spend(self, ns: NsRef, spec: LinkSpec) -> None:
        link = self._made(ns, self.kernel.create_link(ns, spec), spec)
        self.kernel.delete_link(ns, link.ifindex)

    def _made(self, ns: NsRef, link: Link, spec: LinkSpec) -> Link:
        self.next_ifindex[ns.key] = link.ifindex + 1
        if spec.mac is None:
            self.next_mac += 1
        return link
