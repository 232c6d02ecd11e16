"""``FakeAPIServer``: the slice of the Kubernetes API server a DRA driver talks to,
``resource.k8s.io/v1`` over HTTP, written from the public API conventions.

Served (JSON, as the real server answers; errors are ``Status`` objects with ``code``
and ``reason``, ``Content-Type: application/json``):

- ``ResourceClaim``: ``GET`` of one claim; ``GET`` and ``PATCH`` of its ``status``
  subresource, as server-side apply (``application/apply-patch+yaml``, ``fieldManager``
  required, ``force``) or JSON merge patch. Apply is simulated for ``status.devices``
  only, the list a driver writes: a map keyed by driver, pool, device and shareID, each
  entry owned by the manager that applied it; an apply drops the entries its manager
  owned and left out, an entry another manager owns is a 409 conflict unless forced.
  Entries must name a device the claim's allocation holds (422 otherwise), and an apply
  whose ``metadata.uid`` is not the claim's is refused (409: the claim was replaced).
- ``ResourceSlice``: create, get, list and watch (``fieldSelector`` on ``spec.nodeName``,
  ``spec.driver`` and ``metadata.name``; an equality ``labelSelector``), patch (apply,
  which creates a missing slice, or merge), delete. The API's limits are checked on every
  write (422): at most 128 devices per slice, at most 32 attributes and capacities per
  device, unique device names, a pool with a name, a generation and a slice count.
- ``resourceVersion`` is one counter for the server; a write that changes nothing does
  not move it. ``metadata.generation`` moves when a slice's spec changes.
- Watch (``?watch=true``): JSON lines ``{"type": ADDED|MODIFIED|DELETED, "object": ...}``
  after ``resourceVersion`` (none, or ``0``: the current objects as ADDED first), until
  ``timeoutSeconds`` or the server closes.

Not simulated (a request for it is refused, never half-served): strategic merge patch
(415), claims' other verbs, apply of any status field but ``devices``, pagination.

Test hooks: ``put_claim``, ``delete_claim``, ``swap_claim_uid`` (the claim deleted and
re-created under its name), ``set_unavailable`` (every request answers 503), ``claim``
and ``slices`` to read back, and ``requests``, the log of every request (method, path,
query, content type, status) for a test's report (``request_log_text``).

Its codec is ``json`` and ``yaml``: nothing of the adapter under test is used.
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Final, Self
from urllib.parse import parse_qs, urlsplit

from plugins.sdk import YAMLLoadError, load_yaml_documents

__all__ = [
    "API_PREFIX",
    "MAX_ATTRIBUTES_AND_CAPACITIES",
    "MAX_DEVICES_PER_SLICE",
    "ApiRequest",
    "FakeAPIServer",
]

API_PREFIX: Final = "/apis/resource.k8s.io/v1"
MAX_DEVICES_PER_SLICE: Final = 128
MAX_ATTRIBUTES_AND_CAPACITIES: Final = 32
APPLY: Final = "application/apply-patch+yaml"
MERGE: Final = "application/merge-patch+json"
_GROUP: Final = "resource.k8s.io"
_VERSION: Final = "resource.k8s.io/v1"
_CLAIM: Final = re.compile(
    API_PREFIX + r"/namespaces/(?P<ns>[^/]+)/resourceclaims/(?P<name>[^/]+)(?P<status>/status)?"
)
_SLICES: Final = re.compile(API_PREFIX + r"/resourceslices(?:/(?P<name>[^/]+))?")
_SLICE_FIELDS: Final = {
    "spec.nodeName": ("spec", "nodeName"),
    "spec.driver": ("spec", "driver"),
    "metadata.name": ("metadata", "name"),
}
_CONDITION_STATUS: Final = frozenset({"True", "False", "Unknown"})


@dataclass(frozen=True)
class ApiRequest:
    """One request as the server saw it."""

    method: str
    path: str
    query: str
    content_type: str
    status: int

    def __str__(self) -> str:
        query = f"?{self.query}" if self.query else ""
        kind = f" [{self.content_type}]" if self.content_type else ""
        return f"{self.method} {self.path}{query}{kind} -> {self.status}"


class _Refusal(Exception):
    """An answer the API server gives as a Status object."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Event:
    version: int
    type: str
    obj: dict[str, Any]


class _Store:
    """The objects, their owners and the event history, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.version = 0
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        # claim -> status.devices key -> the manager that owns the entry
        self.device_owners: dict[tuple[str, str], dict[tuple[str, ...], str]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self.slice_owner: dict[str, str] = {}  # slice -> manager of its last apply
        self.events: list[_Event] = []
        self.closed = False

    def bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def record(self, kind: str, obj: dict[str, Any]) -> None:
        self.events.append(_Event(self.version, kind, copy.deepcopy(obj)))
        self.lock.notify_all()


class FakeAPIServer:
    """See the module docstring. ``with FakeAPIServer() as api: api.url``."""

    def __init__(self) -> None:
        self._store = _Store()
        self._unavailable = False
        self._log: list[ApiRequest] = []
        self._log_lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Self:
        # a short poll: shutdown() waits for the serving loop's next look at its flag
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving: watches end, open connections are shut, handler threads joined."""
        with self._store.lock:
            self._store.closed = True
            self._store.lock.notify_all()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        with self._log_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):  # already closed by its handler
                conn.shutdown(socket.SHUT_RDWR)
        self._server.server_close()  # joins the handler threads (block_on_close)

    # -- test hooks ------------------------------------------------------------------

    def set_unavailable(self, unavailable: bool) -> None:
        """While True, every request answers 503 ServiceUnavailable."""
        self._unavailable = unavailable

    def put_claim(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store a ResourceClaim (a uid is given if it has none); returns it as stored."""
        claim = copy.deepcopy(dict(obj))
        meta = claim.setdefault("metadata", {})
        if not meta.get("name") or not meta.get("namespace"):
            raise ValueError("a claim needs metadata.name and metadata.namespace")
        claim.setdefault("apiVersion", _VERSION)
        claim.setdefault("kind", "ResourceClaim")
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        meta.setdefault("generation", 1)
        key = (meta["namespace"], meta["name"])
        with self._store.lock:
            existed = key in self._store.claims
            self._store.bump(claim)
            self._store.claims[key] = claim
            self._store.device_owners[key] = {
                _device_key(d): "unknown" for d in claim.get("status", {}).get("devices", [])
            }
            self._store.record("MODIFIED" if existed else "ADDED", claim)
            return copy.deepcopy(claim)

    def delete_claim(self, namespace: str, name: str) -> None:
        with self._store.lock:
            claim = self._store.claims.pop((namespace, name))
            self._store.device_owners.pop((namespace, name), None)
            self._store.bump(claim)
            self._store.record("DELETED", claim)

    def swap_claim_uid(self, namespace: str, name: str) -> str:
        """The claim deleted and re-created under the same name: a new uid, its status
        entries gone with the old claim. Returns the new uid."""
        with self._store.lock:
            claim = self._store.claims[(namespace, name)]
            claim["metadata"]["uid"] = str(uuid.uuid4())
            claim.get("status", {}).pop("devices", None)
            self._store.device_owners[(namespace, name)] = {}
            self._store.bump(claim)
            self._store.record("MODIFIED", claim)
            return str(claim["metadata"]["uid"])

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._store.lock:
            found = self._store.claims.get((namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def slices(self) -> list[dict[str, Any]]:
        with self._store.lock:
            return [copy.deepcopy(s) for _, s in sorted(self._store.slices.items())]

    @property
    def version(self) -> int:
        """The server's resourceVersion now (what a write moves)."""
        with self._store.lock:
            return self._store.version

    @property
    def requests(self) -> tuple[ApiRequest, ...]:
        with self._log_lock:
            return tuple(self._log)

    def request_log_text(self) -> str:
        """The request log, one line a request: what a test attaches to its report."""
        return "\n".join(str(r) for r in self.requests) + "\n"

    # -- dispatch (called by the handler) ----------------------------------------------

    def _logged(self, request: ApiRequest) -> None:
        with self._log_lock:
            self._log.append(request)

    def _track(self, conn: socket.socket, open_: bool) -> None:
        with self._log_lock:
            if open_:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _dispatch(
        self, method: str, path: str, query: Mapping[str, list[str]], content_type: str, body: bytes
    ) -> tuple[int, dict[str, Any]] | Iterator[dict[str, Any]]:
        if self._unavailable:
            raise _Refusal(503, "ServiceUnavailable", "the API server is unavailable (test hook)")
        params = {k: v[-1] for k, v in query.items()}
        if match := _CLAIM.fullmatch(path):
            key = (match["ns"], match["name"])
            if method == "GET":
                return 200, self._get_claim(key)
            if method == "PATCH" and match["status"]:
                return 200, self._patch_claim_status(key, params, content_type, body)
            raise _Refusal(405, "MethodNotAllowed", f"{method} of {path} is not simulated")
        if match := _SLICES.fullmatch(path):
            name = match["name"]
            if name is None and method == "GET":
                if params.get("watch") in ("true", "1"):
                    return self._watch_slices(params)
                return 200, self._list_slices(params)
            if name is None and method == "POST":
                return 201, self._create_slice(params, content_type, body)
            if name is not None and method == "GET":
                return 200, self._get_slice(name)
            if name is not None and method == "PATCH":
                return self._patch_slice(name, params, content_type, body)
            if name is not None and method == "DELETE":
                return 200, self._delete_slice(name)
            raise _Refusal(405, "MethodNotAllowed", f"{method} of {path} is not simulated")
        raise _Refusal(404, "NotFound", f"the server could not find the requested resource {path}")

    # -- claims ----------------------------------------------------------------------

    def _get_claim(self, key: tuple[str, str]) -> dict[str, Any]:
        with self._store.lock:
            claim = self._store.claims.get(key)
            if claim is None:
                raise _not_found("resourceclaims", key[1])
            return copy.deepcopy(claim)

    def _patch_claim_status(
        self, key: tuple[str, str], params: Mapping[str, str], content_type: str, body: bytes
    ) -> dict[str, Any]:
        patch = _decode_patch(content_type, body)
        manager = params.get("fieldManager", "")
        with self._store.lock:
            claim = self._store.claims.get(key)
            if claim is None:
                raise _not_found("resourceclaims", key[1])
            _check_identity(patch, "ResourceClaim", key[1], claim["metadata"]["uid"])
            owners = self._store.device_owners.setdefault(key, {})
            updated = copy.deepcopy(claim)
            status = updated.setdefault("status", {})
            new_owners = dict(owners)
            if content_type == APPLY:
                if not manager:
                    raise _bad_request("fieldManager is required for apply patch")
                applied = (patch.get("status") or {}).copy()
                devices = applied.pop("devices", [])
                if applied:
                    raise _bad_request(
                        f"fake API server: apply of status fields {sorted(applied)} is not "
                        "simulated (only status.devices)"
                    )
                new_owners = _apply_devices(
                    status, owners, devices, manager, params.get("force") == "true"
                )
            else:
                _merge(updated, {"status": patch.get("status") or {}})
                new_owners = {
                    _device_key(d): owners.get(_device_key(d), manager or "unknown")
                    for d in status.get("devices", [])
                }
            if not status.get("devices"):
                status.pop("devices", None)
            _validate_claim_status(updated)
            if updated != claim:
                _managed(updated, manager or "unknown", content_type, "status")
                self._store.bump(updated)
                self._store.claims[key] = updated
                self._store.device_owners[key] = new_owners
                self._store.record("MODIFIED", updated)
            return copy.deepcopy(self._store.claims[key])

    # -- slices ----------------------------------------------------------------------

    def _get_slice(self, name: str) -> dict[str, Any]:
        with self._store.lock:
            found = self._store.slices.get(name)
            if found is None:
                raise _not_found("resourceslices", name)
            return copy.deepcopy(found)

    def _list_slices(self, params: Mapping[str, str]) -> dict[str, Any]:
        selected = _selector(params)
        with self._store.lock:
            items = [copy.deepcopy(s) for _, s in sorted(self._store.slices.items()) if selected(s)]
            version = self._store.version
        return {
            "kind": "ResourceSliceList",
            "apiVersion": _VERSION,
            "metadata": {"resourceVersion": str(version)},
            "items": items,
        }

    def _create_slice(
        self, params: Mapping[str, str], content_type: str, body: bytes
    ) -> dict[str, Any]:
        if content_type.split(";", maxsplit=1)[0].strip() not in ("application/json", ""):
            raise _Refusal(415, "UnsupportedMediaType", f"create takes JSON, not {content_type}")
        obj = _json_object(body)
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            raise _invalid("ResourceSlice", "", "metadata.name: Required value")
        with self._store.lock:
            if name in self._store.slices:
                raise _Refusal(
                    409, "AlreadyExists", f'resourceslices.{_GROUP} "{name}" already exists'
                )
            return self._store_new_slice(name, obj, params.get("fieldManager", ""), "Update")

    def _store_new_slice(
        self, name: str, obj: dict[str, Any], manager: str, operation: str
    ) -> dict[str, Any]:
        obj.setdefault("apiVersion", _VERSION)
        obj.setdefault("kind", "ResourceSlice")
        meta = obj.setdefault("metadata", {})
        meta.update(
            {"name": name, "uid": str(uuid.uuid4()), "generation": 1, "creationTimestamp": _now()}
        )
        _validate_slice(obj)
        _managed(obj, manager or "unknown", APPLY if operation == "Apply" else "", None)
        self._store.bump(obj)
        self._store.slices[name] = obj
        self._store.slice_owner[name] = manager
        self._store.record("ADDED", obj)
        return copy.deepcopy(obj)

    def _patch_slice(
        self, name: str, params: Mapping[str, str], content_type: str, body: bytes
    ) -> tuple[int, dict[str, Any]]:
        patch = _decode_patch(content_type, body)
        manager = params.get("fieldManager", "")
        with self._store.lock:
            current = self._store.slices.get(name)
            if content_type == APPLY:
                if not manager:
                    raise _bad_request("fieldManager is required for apply patch")
                _check_identity(patch, "ResourceSlice", name, None)
                if current is None:
                    return 201, self._store_new_slice(name, copy.deepcopy(patch), manager, "Apply")
                owner = self._store.slice_owner.get(name, "")
                if owner and owner != manager and params.get("force") != "true":
                    raise _Refusal(
                        409,
                        "Conflict",
                        f'Apply failed with 1 conflict: conflict with "{owner}": .spec',
                    )
                updated = copy.deepcopy(current)
                updated["spec"] = copy.deepcopy(patch.get("spec", {}))
                for field in ("labels", "annotations"):
                    if field in patch.get("metadata", {}):
                        updated["metadata"][field] = patch["metadata"][field]
                self._store.slice_owner[name] = manager
            else:
                if current is None:
                    raise _not_found("resourceslices", name)
                updated = copy.deepcopy(current)
                _merge(updated, patch)
                _check_identity(updated, "ResourceSlice", name, current["metadata"]["uid"])
            _validate_slice(updated)
            if updated != current:
                assert current is not None
                if updated.get("spec") != current.get("spec"):
                    updated["metadata"]["generation"] = current["metadata"]["generation"] + 1
                _managed(updated, manager or "unknown", content_type, None)
                self._store.bump(updated)
                self._store.slices[name] = updated
                self._store.record("MODIFIED", updated)
            return 200, copy.deepcopy(self._store.slices[name])

    def _delete_slice(self, name: str) -> dict[str, Any]:
        with self._store.lock:
            found = self._store.slices.pop(name, None)
            if found is None:
                raise _not_found("resourceslices", name)
            self._store.slice_owner.pop(name, None)
            self._store.bump(found)
            self._store.record("DELETED", found)
        status = _status(200, "", "")
        status["details"] = {"name": name, "group": _GROUP, "kind": "resourceslices"}
        return status

    def _watch_slices(self, params: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        selected = _selector(params)
        since = params.get("resourceVersion", "")
        timeout = float(params["timeoutSeconds"]) if "timeoutSeconds" in params else None
        if since not in ("", "0") and not since.isdigit():
            raise _bad_request(f"resourceVersion {since!r} is not a number")
        with self._store.lock:
            start = self._store.version
            initial = []
            if since in ("", "0"):
                initial = [
                    {"type": "ADDED", "object": copy.deepcopy(s)}
                    for _, s in sorted(self._store.slices.items())
                    if selected(s)
                ]
            else:
                start = int(since)
        return self._stream(initial, start, selected, timeout)

    def _stream(
        self,
        initial: list[dict[str, Any]],
        after: int,
        selected: Callable[[Mapping[str, Any]], bool],
        timeout: float | None,
    ) -> Iterator[dict[str, Any]]:
        yield from initial
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._store.lock:
                while not self._store.closed:
                    pending = [
                        e
                        for e in self._store.events
                        if e.version > after and e.obj.get("kind") == "ResourceSlice"
                    ]
                    if pending:
                        break
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return
                    self._store.lock.wait(left)
                else:
                    return
            for event in pending:
                after = event.version
                if selected(event.obj):
                    yield {"type": event.type, "object": event.obj}


# -- the HTTP side ----------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # joined at server_close: no thread outlives the server
    block_on_close = True


def _handler_for(api: FakeAPIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive and chunked watch streams, as httpx expects

        def setup(self) -> None:
            super().setup()
            # The handler writes headers and body separately; with Nagle on, the body
            # waits for the client's delayed ACK (40 ms a reply, measured by P7). The
            # real API server (Go) sends with Nagle off.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            api._track(self.connection, True)

        def finish(self) -> None:
            api._track(self.connection, False)
            super().finish()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the request log is ``FakeAPIServer.requests``."""

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            content_type = self.headers.get("Content-Type", "")
            answer: tuple[int, Mapping[str, Any]] | Iterator[dict[str, Any]]
            try:
                answer = api._dispatch(
                    method, parts.path, parse_qs(parts.query), content_type, body
                )
            except _Refusal as e:
                answer = e.code, _status(e.code, e.reason, e.message)
            except Exception as e:  # the fake's own bug: say so, as a real server's 500 would
                answer = 500, _status(500, "InternalError", f"fake API server: {e!r}")
            status = answer[0] if isinstance(answer, tuple) else 200
            # logged before the answer goes out: a client that has its answer finds it logged
            api._logged(ApiRequest(method, parts.path, parts.query, content_type, status))
            if isinstance(answer, tuple):
                self._json(*answer)
            else:
                self._chunks(answer)

        def _json(self, code: int, obj: Mapping[str, Any]) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code, HTTPStatus(code).phrase)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _chunks(self, events: Iterator[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in events:
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                self.close_connection = True  # the watcher went away

    return Handler


# -- helpers: errors ----------------------------------------------------------------------


def _not_found(plural: str, name: str) -> _Refusal:
    return _Refusal(404, "NotFound", f'{plural}.{_GROUP} "{name}" not found')


def _bad_request(message: str) -> _Refusal:
    return _Refusal(400, "BadRequest", message)


def _invalid(kind: str, name: str, *problems: str) -> _Refusal:
    return _Refusal(422, "Invalid", f'{kind}.{_GROUP} "{name}" is invalid: ' + ", ".join(problems))


# -- helpers: decoding and merging ------------------------------------------------------------


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(body or b"null")
    except ValueError as e:
        raise _bad_request(f"the body is not JSON: {e}") from e
    if not isinstance(obj, dict):
        raise _bad_request("the body is not a JSON object")
    return obj


def _decode_patch(content_type: str, body: bytes) -> dict[str, Any]:
    kind = content_type.split(";", maxsplit=1)[0].strip()
    if kind == APPLY:
        # The project's one YAML loader (strict: a repeated key is refused, as the API
        # server refuses it); JSON, which lightkube sends, is YAML too.
        try:
            documents = load_yaml_documents(body or b"null", "apply body")
        except YAMLLoadError as e:
            raise _bad_request(f"the apply body is not YAML: {e}") from e
        obj = documents[0] if len(documents) == 1 else None
        if not isinstance(obj, dict):
            raise _bad_request("the apply body is not an object")
        return obj
    if kind == MERGE:
        return _json_object(body)
    raise _Refusal(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{MERGE}, {APPLY} (fake API server: no {kind or 'empty'} patch)",
    )


def _check_identity(obj: Mapping[str, Any], kind: str, name: str, uid: str | None) -> None:
    meta = obj.get("metadata") or {}
    if meta.get("name", name) != name:
        raise _bad_request(
            f"the name of the object ({meta['name']}) does not match the URL ({name})"
        )
    if obj.get("kind", kind) != kind or obj.get("apiVersion", _VERSION) != _VERSION:
        raise _bad_request(
            f"expected {_VERSION} {kind}, got {obj.get('apiVersion')} {obj.get('kind')}"
        )
    if uid is not None and meta.get("uid") not in (None, uid):
        raise _Refusal(
            409,
            "Conflict",
            f"Operation cannot be fulfilled on {kind}: Precondition failed: "
            f"UID in precondition: {meta['uid']}, UID in object meta: {uid}",
        )


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386: a null deletes, an object merges, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _managed(obj: dict[str, Any], manager: str, content_type: str, sub: str | None) -> None:
    """Record ``manager`` in ``metadata.managedFields`` (one entry per manager and
    subresource; the field sets themselves are not simulated)."""
    operation = "Apply" if content_type == APPLY else "Update"
    entries = [
        e
        for e in obj["metadata"].get("managedFields", [])
        if not (e["manager"] == manager and e.get("subresource") == sub)
    ]
    entry = {
        "manager": manager,
        "operation": operation,
        "apiVersion": _VERSION,
        "time": _now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": {},
    }
    if sub:
        entry["subresource"] = sub
    obj["metadata"]["managedFields"] = [*entries, entry]


def _device_key(entry: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(entry.get(k) or "") for k in ("driver", "pool", "device", "shareID"))


def _apply_devices(
    status: dict[str, Any],
    owners: Mapping[tuple[str, ...], str],
    applied: object,
    manager: str,
    force: bool,
) -> dict[tuple[str, ...], str]:
    """Server-side apply of ``status.devices`` by one manager; returns the new owners."""
    if not isinstance(applied, list) or not all(isinstance(d, dict) for d in applied):
        raise _bad_request("status.devices must be a list of objects")
    keys = [_device_key(d) for d in applied]
    if len(set(keys)) != len(keys):
        raise _invalid(
            "ResourceClaim", "", "status.devices: Duplicate value: an entry applied twice"
        )
    conflicts = [k for k in keys if owners.get(k, manager) not in (manager, "unknown")]
    if conflicts and not force:
        named = ", ".join(f'"{owners[k]}": {"/".join(k)}' for k in conflicts)
        raise _Refusal(409, "Conflict", f"Apply failed with {len(conflicts)} conflict(s): {named}")
    mine = dict(zip(keys, applied, strict=True))
    kept = [
        d
        for d in status.get("devices", [])
        if _device_key(d) not in mine and owners.get(_device_key(d)) != manager
    ]
    status["devices"] = kept + [copy.deepcopy(d) for d in applied]
    new_owners = {k: v for k, v in owners.items() if v != manager and k not in mine}
    new_owners.update(dict.fromkeys(keys, manager))
    return new_owners


# -- helpers: validation -----------------------------------------------------------------


def _validate_claim_status(claim: Mapping[str, Any]) -> None:
    name = claim["metadata"]["name"]
    status = claim.get("status") or {}
    allocation = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    allocated = {_device_key(r) for r in allocation}
    problems = []
    for i, entry in enumerate(status.get("devices") or []):
        at = f"status.devices[{i}]"
        missing = [k for k in ("driver", "pool", "device") if not entry.get(k)]
        if missing:
            problems.append(f"{at}: Required value: {', '.join(missing)}")
            continue
        if _device_key(entry) not in allocated:
            problems.append(
                f"{at}: Invalid value: {'/'.join(_device_key(entry)[:3])}: "
                "must be an allocated device in the claim"
            )
        for j, condition in enumerate(entry.get("conditions") or []):
            lacking = [
                k
                for k in ("type", "status", "reason", "lastTransitionTime")
                if not condition.get(k)
            ]
            if lacking:
                problems.append(f"{at}.conditions[{j}]: Required value: {', '.join(lacking)}")
            elif condition["status"] not in _CONDITION_STATUS:
                problems.append(f"{at}.conditions[{j}].status: Unsupported value")
        for ip in (entry.get("networkData") or {}).get("ips") or []:
            try:
                ipaddress.ip_interface(ip)
                if "/" not in ip:
                    raise ValueError(ip)
            except ValueError:
                problems.append(f"{at}.networkData.ips: Invalid value: {ip!r}: must be a CIDR")
    if problems:
        raise _invalid("ResourceClaim", name, *problems)


def _validate_slice(obj: Mapping[str, Any]) -> None:
    name = obj["metadata"]["name"]
    spec = obj.get("spec") or {}
    problems = []
    if not spec.get("driver"):
        problems.append("spec.driver: Required value")
    pool = spec.get("pool") or {}
    if not pool.get("name"):
        problems.append("spec.pool.name: Required value")
    if not isinstance(pool.get("generation"), int) or pool["generation"] < 0:
        problems.append("spec.pool.generation: Invalid value: must be a whole number")
    if not isinstance(pool.get("resourceSliceCount"), int) or pool["resourceSliceCount"] < 1:
        problems.append("spec.pool.resourceSliceCount: Invalid value: must be at least 1")
    if not spec.get("nodeName") and not spec.get("allNodes"):
        problems.append("spec: Required value: exactly one of nodeName, allNodes")
    devices = spec.get("devices") or []
    if len(devices) > MAX_DEVICES_PER_SLICE:
        problems.append(
            f"spec.devices: Too many: {len(devices)}: must have at most {MAX_DEVICES_PER_SLICE} items"
        )
    seen: set[str] = set()
    for i, device in enumerate(devices):
        count = len(device.get("attributes") or {}) + len(device.get("capacity") or {})
        if count > MAX_ATTRIBUTES_AND_CAPACITIES:
            problems.append(
                f"spec.devices[{i}]: Invalid value: {count}: the total number of attributes "
                f"and capacities must not exceed {MAX_ATTRIBUTES_AND_CAPACITIES}"
            )
        if device.get("name") in seen:
            problems.append(f"spec.devices[{i}].name: Duplicate value: {device.get('name')!r}")
        seen.add(device.get("name", ""))
    if problems:
        raise _invalid("ResourceSlice", name, *problems)


def _selector(params: Mapping[str, str]) -> Callable[[Mapping[str, Any]], bool]:
    """The ``fieldSelector`` and ``labelSelector`` of a list or watch, as a predicate."""
    # (path to the value, negated, wanted value); a label test without a value is "exists"
    terms: list[tuple[tuple[str, ...], bool, str | None]] = []
    for term in filter(None, params.get("fieldSelector", "").split(",")):
        field, negate, value = _term(term)
        if field not in _SLICE_FIELDS:
            raise _bad_request(f'field label not supported: "{field}"')
        terms.append((_SLICE_FIELDS[field], negate, value))
    for term in filter(None, params.get("labelSelector", "").split(",")):
        if "=" not in term:
            terms.append((("metadata", "labels", term.strip()), False, None))
            continue
        label, negate, value = _term(term)
        terms.append((("metadata", "labels", label), negate, value))

    def selected(obj: Mapping[str, Any]) -> bool:
        return all(_holds(obj, path, negate, value) for path, negate, value in terms)

    return selected


def _holds(obj: Mapping[str, Any], path: tuple[str, ...], negate: bool, value: str | None) -> bool:
    found: Any = obj
    for part in path:
        found = found.get(part) if isinstance(found, Mapping) else None
    if value is None:
        return found is not None
    return ((found or "") == value) != negate


def _term(term: str) -> tuple[str, bool, str]:
    for op, negate in (("!=", True), ("==", False), ("=", False)):
        if op in term:
            left, _, right = term.partition(op)
            return left.strip(), negate, right.strip()
    raise _bad_request(f"invalid selector term {term!r}")
