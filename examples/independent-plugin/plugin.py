"""An independent macvlan NetworkPlugin: the wire contract, and nothing of the SDK.

    python plugin.py --socket S --token-file T --kernel kernel+unix:///path/kernel.sock --state DIR
    python plugin.py ... --kernel linux:///path/of/the/host/netns ...

It imports no project code: it speaks ``networkplugin.v1alpha1`` through stubs compiled
into ``stubs/`` (``generate.py``), keeps its own journal (SQLite, in ``--state``), and
reaches the fake kernel over that server's JSON-lines socket protocol with a client of
its own, or Linux over netlink with pyroute2. It exists to prove that the conformance suite checks a plugin over the wire
(docs/conformance.md), as a plugin written in another language would be checked.

One logical plugin, ``independent-macvlan`` (an Allocation root): NodePrepare records an
entitlement to a shared host parent (nothing in the kernel), ConnectNetwork creates a
macvlan child of it in the pod's namespace, RemoveNetwork deletes exactly that child,
NodeUnprepare releases the entitlement.

``--broken`` turns one deliberate fault on, so the suite can be shown to catch it:
``skip-release`` (RemoveNetwork answers CLEANED and leaves the link), ``ignore-token``
(any caller is served), ``late-intent`` (ConnectNetwork journals its intent after
creating the link: only a crash in between shows it).
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import hmac
import json
import os
import signal
import socket
import sqlite3
import sys
import threading
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import grpc

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "stubs"))

import networkplugin_pb2 as pb  # type: ignore[import-not-found]  # noqa: E402
import networkplugin_pb2_grpc as pb_grpc  # type: ignore[import-not-found]  # noqa: E402

NAME = "independent-macvlan"
DESCRIPTOR = (HERE / "descriptor.json").read_bytes()
CONTRACT_DIGEST = "sha256:" + hashlib.sha256(DESCRIPTOR).hexdigest()
ARTIFACT_DIGEST = "sha256:" + hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
MAX_CONFIG_BYTES = 64 * 1024
CONFIG_KEYS = {"mode", "mtu"}
BROKEN = ("skip-release", "ignore-token", "late-intent")

Msg = TypeVar("Msg")


class Refused(Exception):
    """A call answered with a status code other than OK."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class KernelRefused(Exception):
    def __init__(self, errno: int, message: str) -> None:
        super().__init__(message)
        self.errno = errno


# -- the kernel: the fake one over its socket, or Linux through pyroute2 --------------------
#
# Both give links as {"name", "ifindex", "alias", "mac", "mtu"} and namespaces as an
# opaque reference the plugin passes back; ``sandbox`` returns None for a namespace that
# is gone or is not the one the handle names (path, device/inode and boot id).


KERNEL_WIRE_VERSION = 2
"""The fake kernel's wire version this client speaks (its server refuses any other)."""


class FakeKernel:
    """One connection to ``python -m fakekernel``: a JSON object per line each way."""

    def __init__(self, path: str) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(30)
        self._sock.connect(path)
        self._reader = self._sock.makefile("rb")
        self._lock = threading.Lock()
        self._next = 0

    def _call(self, method: str, **params: Any) -> Any:
        with self._lock:
            self._next += 1
            request = {"v": KERNEL_WIRE_VERSION, "id": self._next, "method": method}
            request["params"] = params
            self._sock.sendall(json.dumps(request).encode() + b"\n")
            reply = json.loads(self._reader.readline())
        error = reply.get("error")
        if error is None:
            return reply["result"]
        if error.get("kind") == "kernel":
            raise KernelRefused(int(error["errno"]), str(error["message"]))
        raise RuntimeError(f"fake kernel {method}: {error}")

    def boot_id(self) -> str:
        return str(self._call("boot_id"))

    def host_link(self, name: str) -> dict[str, Any] | None:
        link = self._call("get_link", ns=self._call("host_namespace"), name=name)
        return None if link is None else dict(link)

    def sandbox(self, handle: dict[str, Any]) -> Any:
        try:
            return self._call("open_namespace", handle=handle)
        except KernelRefused:
            return None

    def link(self, ns: Any, name: str) -> dict[str, Any] | None:
        link = self._call("get_link", ns=ns, name=name)
        return None if link is None else dict(link)

    def create_macvlan(
        self, ns: Any, name: str, parent: dict[str, Any], mtu: int, alias: str
    ) -> dict[str, Any]:
        spec = {"kind": "macvlan", "name": name, "mtu": mtu, "mode": "bridge", "alias": alias}
        spec |= {"parent": parent["ifindex"], "parent_ns": parent["ns"]}
        link = self._call("create_link", ns=ns, spec=spec)
        return dict(self._call("set_link", ns=ns, ifindex=link["ifindex"], changes={"up": True}))

    def delete(self, ns: Any, ifindex: int) -> None:
        self._call("delete_link", ns=ns, ifindex=ifindex)

    def aliases(self) -> list[str]:
        """The alias of every link in every namespace."""
        return [
            str(link.get("alias") or "")
            for ns in self._call("list_namespaces")
            for link in self._call("list_links", ns=ns)
        ]

    def close(self) -> None:
        self._reader.close()
        self._sock.close()


class LinuxKernel:
    """The running kernel over netlink (pyroute2); ``node`` is the host namespace's path.

    A netlink socket belongs to the namespace of the thread that opens it, so each call
    runs in a thread of its own that enters the namespace first and then ends (CPython
    never reuses it). pyroute2's own ``netns=`` forks, which a process with gRPC's
    threads must not do.

    A macvlan is born in the node under a temporary name with its alias already set (the
    ownership evidence travels with it), moved into the pod, then renamed and set up."""

    BOOT_ID = "/proc/sys/kernel/random/boot_id"
    CLONE_NEWNET = 0x40000000
    THREAD_DEADLINE_S = 30.0

    def __init__(self, node: str) -> None:
        self.node = node

    def _in(self, ns: str, work: Callable[[Any], Msg]) -> Msg:
        import ctypes

        from pyroute2 import IPRoute, NetlinkError

        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(ns, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    if libc.setns(fd, self.CLONE_NEWNET) != 0:
                        code = ctypes.get_errno()
                        raise OSError(code, os.strerror(code))
                finally:
                    os.close(fd)
                with IPRoute() as ip:
                    outcome["result"] = work(ip)
            except NetlinkError as exc:
                outcome["error"] = KernelRefused(exc.code, str(exc))
            except BaseException as exc:
                outcome["error"] = exc

        thread = threading.Thread(target=run, name="netns-call")
        thread.start()
        thread.join(self.THREAD_DEADLINE_S)
        if thread.is_alive():
            raise RuntimeError(f"a netlink call in {ns} took over {self.THREAD_DEADLINE_S}s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["result"]  # type: ignore[no-any-return]

    @staticmethod
    def _describe(ip: Any, name: str) -> dict[str, Any] | None:
        found = ip.link_lookup(ifname=name)
        if not found:
            return None
        msg = ip.get_links(found[0])[0]
        return {
            "name": msg.get_attr("IFLA_IFNAME"),
            "ifindex": msg["index"],
            "alias": msg.get_attr("IFLA_IFALIAS"),
            "mac": msg.get_attr("IFLA_ADDRESS"),
            "mtu": msg.get_attr("IFLA_MTU"),
        }

    def boot_id(self) -> str:
        return Path(self.BOOT_ID).read_text().strip()

    def host_link(self, name: str) -> dict[str, Any] | None:
        return self._in(self.node, lambda ip: self._describe(ip, name))

    def sandbox(self, handle: dict[str, Any]) -> Any:
        try:
            st = os.stat(handle["path"])
        except OSError:
            return None
        same = (st.st_dev, st.st_ino) == (handle["device"], handle["inode"])
        return handle["path"] if same and handle["boot_id"] == self.boot_id() else None

    def link(self, ns: Any, name: str) -> dict[str, Any] | None:
        return self._in(str(ns), lambda ip: self._describe(ip, name))

    def create_macvlan(
        self, ns: Any, name: str, parent: dict[str, Any], mtu: int, alias: str
    ) -> dict[str, Any]:
        temporary = "ix" + hashlib.sha256(alias.encode()).hexdigest()[:12]

        def born_in_node(ip: Any) -> None:
            found = self._describe(ip, temporary)
            if found is None:
                ip.link(
                    "add",
                    ifname=temporary,
                    kind="macvlan",
                    link=parent["ifindex"],
                    macvlan_mode="bridge",
                    mtu=mtu,
                )
                # Linux ignores IFLA_IFALIAS in a create; the evidence is set before the move.
                (index,) = ip.link_lookup(ifname=temporary)
                ip.link("set", index=index, ifalias=alias)
            elif found["alias"] != alias:
                raise KernelRefused(errno.EEXIST, f"{temporary} in the node is not ours")
            (index,) = ip.link_lookup(ifname=temporary)
            fd = os.open(str(ns), os.O_RDONLY | os.O_CLOEXEC)
            try:
                ip.link("set", index=index, net_ns_fd=fd)
            finally:
                os.close(fd)

        def named_in_pod(ip: Any) -> dict[str, Any] | None:
            (index,) = ip.link_lookup(ifname=temporary)
            ip.link("set", index=index, ifname=name, state="up")
            return self._describe(ip, name)

        self._in(self.node, born_in_node)
        link = self._in(str(ns), named_in_pod)
        assert link is not None, f"{name} vanished after its creation"
        return link

    def delete(self, ns: Any, ifindex: int) -> None:
        self._in(str(ns), lambda ip: ip.link("del", index=ifindex))

    def aliases(self) -> list[str]:
        """The alias of every link in the namespaces mounted beside the node's and under
        /run/netns, and those of the processes (each namespace once)."""
        candidates = [self.node, *map(str, Path(self.node).parent.iterdir())]
        for directory in ("/run/netns", "/var/run/netns"):
            if Path(directory).is_dir():
                candidates += map(str, Path(directory).iterdir())
        candidates += [f"/proc/{pid}/ns/net" for pid in os.listdir("/proc") if pid.isdigit()]
        seen: set[tuple[int, int]] = set()
        found: list[str] = []
        for path in candidates:
            try:
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            try:
                found += self._in(
                    path, lambda ip: [m.get_attr("IFLA_IFALIAS") or "" for m in ip.get_links()]
                )
            except OSError:  # not a network namespace (setns refuses it), or gone
                continue
        return found

    def close(self) -> None:
        pass


def open_kernel(url: str) -> FakeKernel | LinuxKernel:
    parts = urlsplit(url)
    if parts.netloc or not parts.path.startswith("/"):
        raise SystemExit(f"--kernel {url!r}: expected kernel+unix:///socket or linux:///netns/path")
    if parts.scheme == "kernel+unix":  # the fake kernel server's socket (or a relay's)
        return FakeKernel(parts.path)
    if parts.scheme == "linux":
        return LinuxKernel(parts.path)
    raise SystemExit(f"--kernel {url!r}: this plugin speaks kernel+unix:// and linux:// only")


# -- the journal ------------------------------------------------------------------------------


class Journal:
    """Every operation by id, with its semantic digest, state and recorded answer, and the
    removal fences per scope. Each change is one transaction, synced before it returns."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        # One connection, used under the plugin's lock only (hence shared across threads).
        self.db = sqlite3.connect(directory / "journal.db", check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        with self.db:
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS operations (id TEXT PRIMARY KEY, hook INTEGER,"
                " scope TEXT, generation INTEGER, digest TEXT, state TEXT, record TEXT,"
                " response BLOB, error_code TEXT, error_message TEXT)"
            )
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS fences (scope TEXT PRIMARY KEY, generation INTEGER)"
            )

    def get(self, op_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.db.execute(
            "SELECT * FROM operations WHERE id = ?", (op_id,)
        ).fetchone()
        return row

    def latest(self, scope: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.db.execute(
            "SELECT * FROM operations WHERE scope = ? ORDER BY rowid DESC LIMIT 1", (scope,)
        ).fetchone()
        return row

    def in_scope(self, scope: str, hook: int) -> list[sqlite3.Row]:
        return list(
            self.db.execute(
                "SELECT * FROM operations WHERE scope = ? AND hook = ? ORDER BY rowid",
                (scope, hook),
            )
        )

    def begin(self, env: Any, digest: str, record: dict[str, Any], fence: bool = False) -> None:
        """The intent, durable before anything touches the kernel (and, for a removal, its
        fence in the same transaction)."""
        with self.db:
            self.db.execute(
                "INSERT OR IGNORE INTO operations (id, hook, scope, generation, digest, state,"
                " record) VALUES (?, ?, ?, ?, ?, 'running', ?)",
                (env.operation_id, env.hook, env.scope, env.generation, digest, json.dumps(record)),
            )
            if fence:
                self.db.execute(
                    "INSERT INTO fences (scope, generation) VALUES (?, ?) ON CONFLICT(scope)"
                    " DO UPDATE SET generation = max(generation, excluded.generation)",
                    (env.scope, env.generation),
                )

    def succeed(self, op_id: str, response: bytes) -> None:
        with self.db:
            self.db.execute(
                "UPDATE operations SET state = 'succeeded', response = ? WHERE id = ?",
                (response, op_id),
            )

    def fail(self, op_id: str, refused: Refused) -> None:
        with self.db:
            self.db.execute(
                "UPDATE operations SET state = 'failed', error_code = ?, error_message = ?"
                " WHERE id = ?",
                (refused.code.name, refused.message, op_id),
            )

    def fenced(self, scope: str, generation: int) -> bool:
        row = self.db.execute("SELECT generation FROM fences WHERE scope = ?", (scope,)).fetchone()
        return row is not None and int(row[0]) >= generation


# -- request checks ---------------------------------------------------------------------------


def digest_of(request: Any) -> str:
    """The semantic digest: the whole request, deterministically encoded, less its trace id."""
    copy = type(request)()
    copy.CopyFrom(request)
    copy.envelope.trace_id = ""
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()


def check_envelope(env: Any, hook: int) -> None:
    for field in ("operation_id", "scope", "step"):
        if not getattr(env, field):
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"envelope.{field}: required")
    if env.hook != hook:
        raise Refused(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"envelope.hook: {pb.Hook.Name(env.hook)} on the {pb.Hook.Name(hook)} call",
        )


def _bad_config(path: str, why: str, rule: str) -> Refused:
    return Refused(grpc.StatusCode.INVALID_ARGUMENT, f"config {path}: {why} [{rule}]")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _bad_config(f"$.{key}", "key repeated", "duplicate-key")
        seen[key] = value
    return seen


def parse_config(raw: str) -> tuple[str, int]:
    """``{"mode": "bridge", "mtu": 68..65535}`` and nothing else."""
    if len(raw.encode()) > MAX_CONFIG_BYTES:
        raise _bad_config("$", f"larger than {MAX_CONFIG_BYTES} bytes", "max-bytes")
    try:
        config = json.loads(raw, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise _bad_config("$", f"not JSON: {exc.msg}", "syntax") from None
    if not isinstance(config, dict):
        raise _bad_config("$", "must be an object", "not-object")
    for key in sorted(set(config) - CONFIG_KEYS):
        raise _bad_config(f"$.{key}", "not a key of this plugin's config", "unknown-key")
    for key in sorted(CONFIG_KEYS - set(config)):
        raise _bad_config(f"$.{key}", "required", "required")
    if config["mode"] != "bridge":
        raise _bad_config("$.mode", "must be 'bridge'", "enum")
    mtu = config["mtu"]
    if not isinstance(mtu, int) or isinstance(mtu, bool):
        raise _bad_config("$.mtu", "must be an integer", "type")
    if not 68 <= mtu <= 65535:
        raise _bad_config("$.mtu", "must be in 68..65535", "range")
    return "bridge", mtu


def scope_evidence(scope: str) -> str:
    """The start of the alias of every link created for ``scope``: a lost journal's scope
    can still be found on the node."""
    return f"indie:{hashlib.sha256(scope.encode()).hexdigest()[:12]}:"


def marker(env: Any) -> str:
    """Ownership evidence on the link, deterministic from the operation's identity: a link
    with the right name but another alias is never ours."""
    digest = hashlib.sha256(f"{env.scope}/{env.operation_id}".encode()).hexdigest()
    return scope_evidence(env.scope) + digest[:12]


# -- the service ------------------------------------------------------------------------------


class Plugin(pb_grpc.NetworkPluginServicer):  # type: ignore[misc]
    def __init__(
        self,
        token: str,
        kernel: FakeKernel | LinuxKernel,
        journal: Journal | None,
        broken: str,
        damaged: str = "",
    ) -> None:
        self.token = token
        self.kernel = kernel
        self._journal = journal
        self.broken = broken
        self.damaged = damaged
        """Why the journal could not be opened ("": it is sound): no hook is served."""
        self.lock = threading.Lock()  # one call at a time: duplicates see the first's record

    def _serve(self, context: Any, body: Callable[[], Msg], *, needs_journal: bool = True) -> Msg:
        if self.broken != "ignore-token":
            metadata = dict(context.invocation_metadata())
            offered = str(metadata.get("authorization", ""))
            if not hmac.compare_digest(offered.encode(), f"Bearer {self.token}".encode()):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid token")
        try:
            if needs_journal and self.damaged:
                raise Refused(
                    grpc.StatusCode.DATA_LOSS,
                    f"the journal is damaged ({self.damaged}); an operator must act",
                )
            with self.lock:
                return body()
        except Refused as exc:
            context.abort(exc.code, exc.message)
            raise  # abort raises; this keeps the type checker sure of it

    @property
    def journal(self) -> Journal:
        assert self._journal is not None, "no hook is served over a damaged journal"
        return self._journal

    def _replayed(self, env: Any, digest: str, response_type: type[Msg]) -> Msg | None:
        row = self.journal.get(env.operation_id)
        if row is None:
            return None
        if row["digest"] != digest:
            raise Refused(
                grpc.StatusCode.ALREADY_EXISTS,
                f"operation {env.operation_id} was recorded with other semantics",
            )
        if row["state"] == "succeeded":
            return response_type.FromString(row["response"])  # type: ignore[attr-defined, no-any-return]
        if row["state"] == "failed":
            raise Refused(grpc.StatusCode[row["error_code"]], row["error_message"])
        return None  # interrupted: carry on from the record

    def _run(self, env: Any, body: Callable[[], Any]) -> Any:
        try:
            response = body()
        except Refused as exc:
            self.journal.fail(env.operation_id, exc)
            raise
        self.journal.succeed(env.operation_id, response.SerializeToString(deterministic=True))
        return response

    def _host_link(self, name: str) -> dict[str, Any]:
        link = self.kernel.host_link(name)
        if link is None:
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION, f"no parent {name} on the host")
        return link

    # -- GetInfo / InspectOperation ------------------------------------------------------------

    def GetInfo(self, request: Any, context: Any) -> Any:
        return self._serve(
            context,
            lambda: pb.GetInfoResponse(
                plugin_name=NAME,
                contract_version="v1alpha1",
                step_kinds=[pb.ALLOCATION],
                contract_digest=CONTRACT_DIGEST,
                artifact_digest=ARTIFACT_DIGEST,
                state_namespace=f"{NAME}/v1",
                ready=not self.damaged,
                descriptor_json=DESCRIPTOR.decode(),
            ),
            needs_journal=False,
        )

    def InspectOperation(self, request: Any, context: Any) -> Any:
        def inspect() -> Any:
            if request.operation_id:
                row = self.journal.get(request.operation_id)
                if row is not None and request.scope and row["scope"] != request.scope:
                    row = None
            else:
                row = self.journal.latest(request.scope)
            if row is None:
                return pb.InspectOperationResponse(found=False)
            states = {"running": pb.RUNNING, "succeeded": pb.SUCCEEDED, "failed": pb.FAILED}
            creates = row["hook"] in (pb.NODE_PREPARE, pb.CONNECT_NETWORK)
            return pb.InspectOperationResponse(
                found=True,
                operation_id=row["id"],
                hook=row["hook"],
                scope=row["scope"],
                state=states[row["state"]],
                fenced=creates and self.journal.fenced(row["scope"], row["generation"]),
                generation=row["generation"],
                semantic_digest=row["digest"],
            )

        return self._serve(context, inspect)

    # -- the four hooks ----------------------------------------------------------------------

    def NodePrepare(self, request: Any, context: Any) -> Any:
        def prepare() -> Any:
            env = request.envelope
            check_envelope(env, pb.NODE_PREPARE)
            digest = digest_of(request)
            if (done := self._replayed(env, digest, pb.NodePrepareResponse)) is not None:
                return done
            mode, mtu = parse_config(request.config_json)
            allocation = request.allocation
            parent_name = allocation.attributes.get("ifName", "")
            if allocation.device_type != "pf" or allocation.sharing != pb.SHARED:
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "allocation: must be a shared pf")
            if not parent_name:
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT, "allocation.attributes.ifName: required"
                )
            if self.journal.fenced(env.scope, env.generation):
                raise Refused(grpc.StatusCode.ABORTED, f"preparation {env.scope} was released")
            self.journal.begin(env, digest, {"parent": parent_name})

            def hold() -> Any:
                parent = self._host_link(parent_name)
                description = {"ifName": parent["name"], "ifIndex": parent["ifindex"]}
                description |= {"mode": mode, "mtu": mtu}
                handle = pb.ResourceHandle(
                    id=f"parent-{env.scope}",
                    type="SharedParent/v1",
                    owner_scope=env.scope,
                    owner_step=env.step,
                    boot_id=self.kernel.boot_id(),
                    root_provenance=allocation.root_id,
                    description_json=json.dumps(description, sort_keys=True),
                )
                state = pb.PreparedState(
                    root_id=allocation.root_id,
                    plugin=NAME,
                    preparation_id=env.scope,
                    handles=[handle],
                )
                return pb.NodePrepareResponse(prepared_state=state)

            return self._run(env, hold)

        return self._serve(context, prepare)

    def ConnectNetwork(self, request: Any, context: Any) -> Any:
        def connect() -> Any:
            env = request.envelope
            check_envelope(env, pb.CONNECT_NETWORK)
            digest = digest_of(request)
            if self.journal.fenced(env.scope, env.generation):
                raise Refused(grpc.StatusCode.ABORTED, f"attachment {env.scope} was removed")
            if (done := self._replayed(env, digest, pb.ConnectNetworkResponse)) is not None:
                return done
            _, mtu = parse_config(request.config_json)
            name = request.interface_names.get("interface", "")
            if not name or len(name) > 15 or "/" in name:
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT, f"interface_names.interface: bad {name!r}"
                )
            handles = [h for h in request.prepared.handles if h.type == "SharedParent/v1"]
            if len(handles) != 1:
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT, "prepared: one SharedParent/v1 handle"
                )
            parent_name = str(json.loads(handles[0].description_json)["ifName"])
            ns = request.sandbox.network_namespace
            handle = {
                "path": ns.path,
                "device": ns.device,
                "inode": ns.inode,
                "boot_id": ns.boot_id,
            }
            owned = marker(env)
            record = {"sandbox": handle, "name": name, "alias": owned}
            if self.broken == "late-intent":
                # The fault: the intent is journaled after the kernel change it describes,
                # so a crash in between leaves a link no record owns.
                def create_then_record() -> Any:
                    response = self._create(env, handle, name, owned, parent_name, mtu)
                    self.journal.begin(env, digest, record)
                    return response

                return self._run(env, create_then_record)
            self.journal.begin(env, digest, record)
            return self._run(env, lambda: self._create(env, handle, name, owned, parent_name, mtu))

        return self._serve(context, connect)

    def _create(
        self, env: Any, handle: dict[str, Any], name: str, owned: str, parent_name: str, mtu: int
    ) -> Any:
        sandbox = self.kernel.sandbox(handle)
        if sandbox is None:
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION, "the sandbox namespace is gone")
        link = self.kernel.link(sandbox, name)
        if link is not None and link.get("alias") != owned:
            raise Refused(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{name} in the sandbox is not ours (alias {link.get('alias')!r}); left alone",
            )
        if link is None:  # else: our own, from a run that was interrupted after creating it
            parent = self._host_link(parent_name)
            try:
                link = self.kernel.create_macvlan(sandbox, name, parent, mtu, owned)
            except KernelRefused as exc:
                raise Refused(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
        description = {
            "ifName": link["name"],
            "ifIndex": link["ifindex"],
            "kind": "macvlan",
            "mac": link["mac"],
            "mtu": link["mtu"],
            "netns": {
                "path": handle["path"],
                "device": handle["device"],
                "inode": handle["inode"],
                "bootId": handle["boot_id"],
            },
        }
        out = pb.ResourceHandle(
            id=f"interface-{env.scope}",
            type="KernelInterface/v1",
            owner_scope=env.scope,
            owner_step=env.step,
            attachment_id=env.scope,
            boot_id=handle["boot_id"],
            description_json=json.dumps(description, sort_keys=True),
        )
        return pb.ConnectNetworkResponse(outputs=[pb.OutputPort(port="interface", handles=[out])])

    def RemoveNetwork(self, request: Any, context: Any) -> Any:
        return self._serve(
            context, lambda: self._cleanup(request, pb.REMOVE_NETWORK, pb.CONNECT_NETWORK)
        )

    def NodeUnprepare(self, request: Any, context: Any) -> Any:
        return self._serve(
            context, lambda: self._cleanup(request, pb.NODE_UNPREPARE, pb.NODE_PREPARE)
        )

    def _cleanup(self, request: Any, hook: int, undoes: int) -> Any:
        """Fence the scope, then undo what every recorded create of it left in the kernel,
        found by its ownership evidence; the journal's silence alone proves nothing, but
        this plugin creates nothing it did not record first."""
        env = request.envelope
        check_envelope(env, hook)
        digest = digest_of(request)
        if (done := self._replayed(env, digest, pb.CleanupResponse)) is not None:
            return done
        creates = self.journal.in_scope(env.scope, undoes)
        if not creates and hook == pb.REMOVE_NETWORK:
            # The journal never saw this attachment: only the node can say it is clean (a
            # journal lost with everything in it is silent too).
            try:
                evidence = scope_evidence(env.scope)
                left = [a for a in self.kernel.aliases() if a.startswith(evidence)]
            except Exception as exc:  # unknown is not absent
                return pb.CleanupResponse(
                    status=pb.PENDING, detail=f"the node could not be scanned ({exc}); retry"
                )
            if left:
                return pb.CleanupResponse(
                    status=pb.QUARANTINED,
                    detail=f"no record of {env.scope}, but the node holds links carrying its "
                    f"evidence ({', '.join(left)}); left for an operator",
                )
        self.journal.begin(env, digest, {}, fence=True)
        effects = []
        for row in creates:
            record = json.loads(row["record"])
            if "name" in record:
                effects.append(self._release(row["id"], record))
        response = pb.CleanupResponse(status=pb.CLEANED, detail="released", effects=effects)
        return self._run(env, lambda: response)

    def _release(self, op_id: str, record: dict[str, Any]) -> Any:
        status = pb.EffectStatus(effect_id=f"{op_id}/macvlan", kind="independent/macvlan")
        sandbox = self.kernel.sandbox(record["sandbox"])
        link = None if sandbox is None else self.kernel.link(sandbox, record["name"])
        if (
            link is not None
            and link.get("alias") == record["alias"]
            and self.broken != "skip-release"
        ):
            self.kernel.delete(sandbox, link["ifindex"])
        status.state = pb.UNDONE
        status.detail = "absent" if link is None else "deleted"
        return status


STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--token-file", required=True, type=Path)
    parser.add_argument(
        "--kernel", required=True, help="kernel+unix:///kernel.sock or linux:///netns"
    )
    parser.add_argument("--state", required=True, type=Path, help="the journal's directory")
    parser.add_argument("--broken", choices=BROKEN, default="", help="one deliberate fault")
    args = parser.parse_args(argv)
    # Blocked before any thread exists, so every thread (gRPC's too) inherits the mask
    # and the signals stay pending until the main thread takes them with sigwait below:
    # a Python handler setting an event may deadlock on the event's own lock, or never
    # run while the main thread sleeps (plugins/sdk/signals.py, which this program must
    # not import, tells the story).
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    token = args.token_file.read_text().strip()
    if not token:
        raise SystemExit(f"--token-file {args.token_file}: empty")
    kernel = open_kernel(args.kernel)
    journal: Journal | None = None
    damaged = ""
    try:
        journal = Journal(args.state)
    except sqlite3.DatabaseError as exc:  # kept as found, for an operator: never recreated
        damaged = str(exc)
        print(f"journal in {args.state} is damaged: {exc}", file=sys.stderr, flush=True)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    plugin = Plugin(token, kernel, journal, args.broken, damaged)
    pb_grpc.add_NetworkPluginServicer_to_server(plugin, server)
    args.socket.parent.mkdir(parents=True, exist_ok=True)
    args.socket.unlink(missing_ok=True)  # a killed run leaves its socket file behind
    server.add_insecure_port(f"unix://{args.socket}")
    server.start()
    print("serving", args.socket, flush=True)
    signal.sigwait(STOP_SIGNALS)
    server.stop(5).wait()
    if journal is not None:
        journal.db.close()
    kernel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
