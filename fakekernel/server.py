"""Serve a FakeKernelModel on a Unix socket, outside the service under test.

A real kernel survives a service crash; so does this process. Protocol (the kernel
wire, version ``plugins.kernel.PROTOCOL_VERSION``): one JSON object per line each way.
Request ``{"v": version, "id": n, "method": str, "params": {...}}``; answer ``{"id": n,
"result": ...}`` or ``{"id": n, "error": {"errno": int, "message": str, "kind":
"kernel" | "lab" | "protocol" | "internal"}}``. The methods are the calls of
``fakekernel.LAB_CALLS`` (the Kernel protocol's and the lab's), their parameters the
calls' own by name, their types the calls' declared ones; dataclasses travel as objects.
One lock around the model plays the role of rtnl: calls never interleave.

Test only (control requests no production code sends): ``stall`` makes the next call of
one method (``name``) take effect as usual and then hold its answer back for some
seconds, as a kernel call that hangs; ``stall_nth`` does it to the ``n``-th lab call
from now (of any method, or counting only the calls the seam declares mutating), which
is how a crash can be placed at every kernel change of a program the suite cannot
instrument; ``wait_stalled`` answers once a method's answer is held, ``wait_held``
with the method of whichever answer is held first (None: none within the timeout), and
``release_held`` disarms everything and lets every held answer go at once.
"""

from __future__ import annotations

import errno
import json
import math
import os
import socketserver
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plugins.kernel import PROTOCOL_VERSION, KernelError
from plugins.sdk import JSONCodecError, from_json_value, to_json_value

from ._protocol import LAB_CALLS
from .lab import LabError, build_model, load_lab
from .model import FakeKernelModel

__all__ = [
    "FakeKernelServer",
    "ProtocolError",
    "answer",
    "dispatch",
    "error_message",
]


def _seconds(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _lab_call(value: Any) -> bool:
    return isinstance(value, str) and value in LAB_CALLS


# The test-only controls (no production code sends them): each parameter's check and
# what the error says it must be.
TEST_METHODS: dict[str, dict[str, tuple[Callable[[Any], bool], str]]] = {
    "stall": {"name": (_lab_call, "a lab call"), "seconds": (_seconds, "a number >= 0")},
    "stall_nth": {
        "n": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an int >= 0"),
        "seconds": (_seconds, "a number >= 0"),
        "mutating": (lambda v: isinstance(v, bool), "a bool"),
    },
    "wait_stalled": {"name": (_lab_call, "a lab call"), "timeout": (_seconds, "a number >= 0")},
    "wait_held": {"timeout": (_seconds, "a number >= 0")},
    "release_held": {},
}


class ProtocolError(Exception):
    """A request this protocol cannot carry out (malformed, unknown method or parameter)."""


def answer(line: bytes, call: Callable[[str, dict[str, Any]], Any], who: str) -> dict[str, Any]:
    """The reply to one request line: ``call(method, params)``'s result, or the error.

    Every server of this protocol (this one, the VM lab's guest agent) answers through
    here, so the envelope and the error kinds are one thing: a ``KernelError`` travels
    with its errno (``kernel``), a lab file problem as ``lab``, a request this protocol
    cannot carry as ``protocol``, and a bug as ``internal`` (logged as ``who``; the
    server keeps serving).
    """
    req_id: Any = None
    try:
        try:
            req = json.loads(line)
        except ValueError as e:
            raise ProtocolError(f"not JSON: {e}") from None
        if not isinstance(req, dict) or not isinstance(req.get("method"), str):
            raise ProtocolError("a request is an object with a string 'method'")
        req_id = req.get("id")
        if req.get("v") != PROTOCOL_VERSION:
            raise ProtocolError(
                f"the request speaks kernel wire version {req.get('v')!r}; "
                f"this server speaks {PROTOCOL_VERSION}"
            )
        params = req.get("params") or {}
        if not isinstance(params, dict):
            raise ProtocolError("'params' must be an object")
        return {"id": req_id, "result": to_json_value(call(req["method"], params))}
    except KernelError as e:
        return _error(req_id, e.code, error_message(e), "kernel")
    except LabError as e:
        return _error(req_id, errno.EINVAL, str(e), "lab")
    except (ProtocolError, JSONCodecError) as e:
        return _error(req_id, errno.EPROTO, str(e), "protocol")
    except Exception as e:  # a bug: report it to the caller, keep serving
        print(f"{who}: internal error: {e!r}", file=sys.stderr, flush=True)
        return _error(req_id, errno.EPROTO, f"internal error: {e!r}", "internal")


def _error(req_id: Any, code: int, message: str, kind: str) -> dict[str, Any]:
    return {"id": req_id, "error": {"errno": code, "message": message, "kind": kind}}


def dispatch(target: object, method: str, params: dict[str, Any]) -> Any:
    """Carry out the lab call ``method`` on ``target`` with the request's ``params``,
    decoded by the call's declared types. An unknown method, an unknown parameter or a
    missing required one is a ProtocolError."""
    call = LAB_CALLS.get(method)
    if call is None:
        raise ProtocolError(f"unknown method {method!r}")
    types = call.params
    unknown = set(params) - set(types)
    if unknown:
        raise ProtocolError(f"{method}: unknown parameters {sorted(unknown)}")
    args = {name: from_json_value(types[name], value) for name, value in params.items()}
    try:
        call.signature.bind(**args)
    except TypeError as e:  # a required parameter is missing
        raise ProtocolError(f"{method}: {e}") from None
    return getattr(target, method)(**args)


def error_message(e: KernelError) -> str:
    """The message without the "EEXIST: " prefix KernelError adds (the client adds it back)."""
    text = str(e.strerror or "")
    prefix = f"{errno.errorcode.get(e.code, str(e.code))}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


class FakeKernelServer:
    def __init__(self, socket_path: str | Path, model: FakeKernelModel) -> None:
        self.socket_path = str(socket_path)
        self.model = model
        self.lock = threading.Lock()  # rtnl
        self._server: socketserver.ThreadingUnixStreamServer | None = None
        # Test only (see the module docstring): armed stalls and the answers held back.
        self._stalls = threading.Condition()
        self._armed: dict[str, float] = {}
        # stall_nth: (calls left until the one held, how long, counting mutations only)
        self._countdown: tuple[int, float, bool] | None = None
        self._holding: list[str] = []
        self._released = 0  # release_held's count: a hold ends when it changes
        self._closing = threading.Event()

    # -- requests --------------------------------------------------------------------------

    def handle(self, line: bytes) -> dict[str, Any]:
        return answer(line, self.call, "fakekernel")

    def call(self, method: str, params: dict[str, Any]) -> Any:
        if method == "load_lab":
            return self._load_lab(params)
        if method in TEST_METHODS:
            return self._test_control(method, params)
        with self.lock:
            result = dispatch(self.model, method, params)
        self._hold_if_stalled(method)  # outside rtnl: other callers go on
        return result

    def _load_lab(self, params: dict[str, Any]) -> None:
        """Replace the whole model, as if the node rebooted into the described host."""
        if set(params) == {"path"} and isinstance(params["path"], str):
            model = load_lab(params["path"])
        elif set(params) == {"lab"} and isinstance(params["lab"], dict):
            model = build_model(params["lab"])
        else:
            raise ProtocolError("load_lab takes exactly one of 'path' (str) or 'lab' (object)")
        with self.lock:
            self.model = model

    # -- test only: answers held back -------------------------------------------------------

    def _test_control(self, method: str, params: dict[str, Any]) -> Any:
        shape = TEST_METHODS[method]
        if set(params) != set(shape) or not all(
            check(params[name]) for name, (check, _) in shape.items()
        ):
            wanted = ", ".join(f"'{name}' ({what})" for name, (_, what) in shape.items())
            raise ProtocolError(f"{method} takes {wanted}")
        with self._stalls:
            if method == "stall":
                self._armed[params["name"]] = float(params["seconds"])
                return None
            if method == "stall_nth":
                count, seconds = int(params["n"]), float(params["seconds"])
                self._countdown = (count, seconds, bool(params["mutating"])) if count else None
                return None
            if method == "wait_stalled":
                name = params["name"]
                return self._stalls.wait_for(lambda: name in self._holding, params["timeout"])
            if method == "wait_held":
                self._stalls.wait_for(lambda: bool(self._holding), params["timeout"])
                return self._holding[0] if self._holding else None
            # release_held
            self._armed.clear()
            self._countdown = None
            self._released += 1
            self._stalls.notify_all()
            return None

    def _hold_if_stalled(self, method: str) -> None:
        with self._stalls:
            seconds = self._armed.pop(method, None)
            if seconds is None and self._countdown is not None:
                count, held_s, mutating_only = self._countdown
                if not mutating_only or LAB_CALLS[method].mutating:
                    self._countdown = None if count == 1 else (count - 1, held_s, mutating_only)
                    seconds = held_s if count == 1 else None
            if seconds is None:
                return
            self._holding.append(method)
            self._stalls.notify_all()
            released = self._released
            deadline = time.monotonic() + seconds
            try:
                while self._released == released and not self._closing.is_set():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._stalls.wait(left)  # release_held and shutdown notify
            finally:
                self._holding.remove(method)

    # -- socket ----------------------------------------------------------------------------

    def bind(self) -> None:
        path = self.socket_path
        if os.path.lexists(path):
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                raise FileExistsError(f"{path} exists and is not a socket")
            os.unlink(path)  # a stale socket from a previous run
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                for line in self.rfile:
                    if not line.strip():
                        continue
                    reply = outer.handle(line)
                    try:
                        self.wfile.write(json.dumps(reply).encode() + b"\n")
                        self.wfile.flush()
                    except OSError:
                        return  # the caller hung up (e.g. died during a stalled answer)

        old = os.umask(0o177)  # the socket is born 0600: only our user may talk to the kernel
        try:
            server = socketserver.ThreadingUnixStreamServer(path, Handler)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        server.daemon_threads = True
        self._server = server

    def serve_forever(self) -> None:
        assert self._server is not None, "bind() first"
        self._server.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        """Stop serving (from another thread than serve_forever) and remove the socket."""
        self._closing.set()  # release stalled answers
        with self._stalls:
            self._stalls.notify_all()
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._server = None
        if os.path.lexists(self.socket_path):
            os.unlink(self.socket_path)
