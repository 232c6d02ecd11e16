"""Talk to a fake kernel process: FakeKernelClient (a ``Kernel``) and FakeKernelProcess."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from plugins.kernel import PROTOCOL_VERSION, KernelCall, KernelError
from plugins.sdk import from_json_value, to_json_value

from ._errors import LabError
from ._lab_methods import LabMethods
from ._protocol import LabKernel

__all__ = ["FakeKernelClient", "FakeKernelProcess", "FakeKernelProtocolError"]

_REPO_ROOT = Path(__file__).resolve().parent.parent


class FakeKernelProtocolError(RuntimeError):
    """The request was malformed or the server hit a bug; never a kernel answer."""


class FakeKernelClient(LabMethods):
    """A ``LabKernel`` whose state lives in a fake kernel process (or behind any server of
    the kernel wire: the VM lab's guest agent). Every call of the seam is one request
    whose parameters are the call's, by name, and whose answer decodes to the call's
    result type. Thread-safe: one connection, one request at a time (the server
    serializes calls anyway)."""

    def __init__(self, socket_path: str | Path, *, timeout: float = 30.0) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(str(socket_path))
        except BaseException:
            self._sock.close()  # a refused connect must not leak the socket
            raise
        self._rfile = self._sock.makefile("rb")
        self._lock = threading.Lock()
        self._next_id = 0
        self._broken = False

    def close(self) -> None:
        with self._lock:
            self._rfile.close()
            self._sock.close()

    def __enter__(self) -> FakeKernelClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _kernel_call(self, call: KernelCall, arguments: dict[str, Any]) -> Any:
        result = self._call(call.name, **arguments)
        return None if call.result is type(None) else from_json_value(call.result, result)

    def _call(self, method: str, **params: Any) -> Any:
        with self._lock:
            if self._broken:
                raise FakeKernelProtocolError("the connection failed earlier; open a new client")
            self._next_id += 1
            req_id = self._next_id
            req = {
                "v": PROTOCOL_VERSION,
                "id": req_id,
                "method": method,
                "params": to_json_value(params),
            }
            try:
                self._sock.sendall(json.dumps(req).encode() + b"\n")
                line = self._rfile.readline()
            except OSError as e:
                # A timeout or reset is not a kernel answer (and would leave a stray reply
                # on the stream), so it must not look like a KernelError to callers.
                self._broken = True
                raise FakeKernelProtocolError(f"{method}: transport failed: {e!r}") from e
            except BaseException:
                # Cut off mid-exchange (a signal handler's exception: pytest-timeout, ^C):
                # the answer may still come, and the next caller would read it as its own.
                self._broken = True
                raise
        if not line:
            raise FakeKernelProtocolError("the fake kernel closed the connection")
        reply = json.loads(line)
        if reply.get("id") != req_id:
            raise FakeKernelProtocolError(f"reply {reply.get('id')} to request {req_id}")
        err = reply.get("error")
        if err is None:
            return reply.get("result")
        kind, message = err.get("kind"), str(err.get("message"))
        if kind == "lab":
            raise LabError(message)
        if kind in ("protocol", "internal"):
            raise FakeKernelProtocolError(f"{method}: {message}")
        raise KernelError(int(err["errno"]), message)

    # -- test only -------------------------------------------------------------------------

    def stall(self, method: str, seconds: float) -> None:
        """The next ``method`` call (from any client) takes effect, then its answer is held
        back for ``seconds``: a kernel call that hangs. Test only."""
        self._call("stall", name=method, seconds=seconds)

    def wait_stalled(self, method: str, timeout: float) -> bool:
        """Block until an answer to ``method`` is being held back (True) or ``timeout``."""
        return bool(self._call("wait_stalled", name=method, timeout=timeout))

    def stall_nth(self, n: int, seconds: float, *, mutating: bool = True) -> None:
        """Hold back, for ``seconds``, the answer to the ``n``-th lab call from now, from
        any client (``mutating``: counting only the calls the seam declares mutating);
        ``n`` 0 disarms. The call takes effect; its caller does not hear. Test only."""
        self._call("stall_nth", n=n, seconds=seconds, mutating=mutating)

    def wait_held(self, timeout: float) -> str | None:
        """The method whose answer is being held back, once one is (None: none within
        ``timeout``)."""
        held = self._call("wait_held", timeout=timeout)
        return None if held is None else str(held)

    def release_held(self) -> None:
        """Disarm every stall and let every held answer go now."""
        self._call("release_held")

    def load_lab(
        self, *, path: str | Path | None = None, lab: dict[str, Any] | None = None
    ) -> None:
        """Replace the server's whole model with a lab (a file on the server's side, or a dict)."""
        if (path is None) == (lab is None):
            raise ValueError("load_lab takes exactly one of path and lab")
        if path is not None:
            self._call("load_lab", path=str(path))
        else:
            self._call("load_lab", lab=lab)


class FakeKernelProcess:
    """Run ``python -m fakekernel`` for the duration of a ``with`` block.

    Waits (with a deadline, by reading its stdout) until it says ``ready``;
    terminates it with SIGTERM on exit, SIGKILL if it does not go in time.
    """

    def __init__(
        self,
        socket_path: str | Path,
        lab: str | Path | None = None,
        *,
        ready_timeout: float = 20.0,
        stop_timeout: float = 10.0,
        python: str = sys.executable,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.lab = Path(lab) if lab is not None else None
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def __enter__(self) -> FakeKernelProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def client(self, *, timeout: float = 30.0) -> FakeKernelClient:
        return FakeKernelClient(self.socket_path, timeout=timeout)

    def start(self) -> None:
        cmd = [self.python, "-m", "fakekernel", "--socket", str(self.socket_path)]
        if self.lab is not None:
            cmd += ["--lab", str(self.lab)]
        env = dict(os.environ)
        # Bytecode is written and read back even where PYTHONDONTWRITEBYTECODE is set (as
        # scripts/_bootstrap.sh does for the entry scripts): a test run starts a fake
        # kernel per lab, each of which would otherwise compile every module whose
        # bytecode is missing or older than its source again.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
        # Imported here: a service on kernel+unix:// imports this module for the client only,
        # and tempfile (with shutil) was ~4 ms of CPU at each of its starts.
        import tempfile

        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self._stderr, env=env, cwd=_REPO_ROOT
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        assert self.proc is not None
        assert self.proc.stdout is not None
        deadline = time.monotonic() + self.ready_timeout
        seen = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"ready\n" not in seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"fake kernel not ready after {self.ready_timeout}s")
                if not sel.select(timeout=left):
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    self.proc.wait(timeout=self.stop_timeout)
                    raise RuntimeError(
                        f"fake kernel exited with {self.proc.returncode}: {self._stderr_text()}"
                    )
                seen += chunk

    def _stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return str(self._stderr.read().decode(errors="replace").strip())

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        with contextlib.suppress(FileNotFoundError):
            if self.socket_path.is_socket():
                self.socket_path.unlink()


def _is_a_lab_kernel(client: FakeKernelClient) -> LabKernel:
    return client  # mypy proves FakeKernelClient satisfies the lab's kernel protocol
