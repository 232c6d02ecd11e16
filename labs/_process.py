"""Launch plugin services as real processes, each with its own config, token and state.

A service is started with ``python -m <module> [args] --config FILE``: the very command a
deployment runs. To arm a crash point or trace the points reached, the same service
main is started through the test kit's launcher instead
(``python -m labs.crashing_service <module> [args] ...``), which reads
``NETWORKPLUGIN_CRASH_AT`` / ``_MODE`` / ``_TRACE``; a service program never does.
Readiness is waited for as a service manager does (the program's ``READY=1``, see
``_readiness``), then asked over the real socket (GetInfo ready=true), with a deadline.

Under the rig (``METRICS_DIR_ENV`` set), every start of a service publishes its metrics
to a textfile of its own in that directory, as a deployment with ``metrics: {textfile}``
does: a restarted process starts its counters from zero, so one file per process
lifetime keeps what the killed ones reported, and the rig adds them up afterwards.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from plugins.sdk import YAMLLoadError, load_yaml_mapping
from plugins.sdk.host import PluginCallError, PluginClient
from plugins.sdk.runner import ENV_ARM, ENV_MODE, ENV_TRACE, CrashPoint

from ._readiness import ReadyListener

REPO = Path(__file__).resolve().parent.parent
LAUNCHER = "labs.crashing_service"
METRICS_DIR_ENV = "RIG_METRICS_DIR"
METRICS_INTERVAL_S = 0.5  # a SIGKILLed process loses at most this much of its counts
EXIT_CHECK_S = 1.0  # how often a start that is not ready yet looks whether the process died


class ServiceProcess:
    """One service over a persistent state dir; start, crash and restart it at will."""

    publishes_metrics = True  # under the rig (METRICS_DIR_ENV); the coordinator has none

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        root: Path,
        socket_dir: Path,
        kernel_url: str,
        sockets: Sequence[str],
    ) -> None:
        self.name = name
        self.command = list(command)
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.socket_dir = socket_dir
        self.sockets = list(sockets)
        self.token = secrets.token_hex(16)
        token_file = root / "token"
        token_file.write_text(self.token)
        token_file.chmod(0o600)
        self.config = root / "service.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "socketDir": str(socket_dir),
                    "stateDir": str(root / "state"),
                    "tokenFile": str(token_file),
                    "kernel": kernel_url,
                    "shutdownGraceSeconds": 5,
                    # The rig's fake tier keeps journals on /dev/shm (harness.rig.scratch_root),
                    # which a deployment's service refuses.
                    "allowVolatileStateDir": True,
                }
            )
        )
        self._rig_metrics: dict[str, object] | None = None  # what the last start published to
        self.log = root / "service.log"
        # The rig's services log warnings only; a benchmark measuring the deployed
        # default (the service's own, INFO) sets this before a (re)start.
        self.log_level = "WARNING"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(
        self,
        crash_at: CrashPoint | None = None,
        trace: Path | None = None,
        timeout: float = 30,
        *,
        wait_ready: bool = True,
    ) -> None:
        """Start the process; wait until every socket reports ready (or only answers)."""
        # Bytecode is written and read back even where PYTHONDONTWRITEBYTECODE is set (as
        # scripts/_bootstrap.sh does for the entry scripts): a rig run starts hundreds of
        # services, each of which would otherwise compile every module whose bytecode is
        # missing or older than its source again (up to ~0.6 s of CPU per start).
        unset = (ENV_ARM, ENV_MODE, ENV_TRACE, "PYTHONDONTWRITEBYTECODE")
        env = {k: v for k, v in os.environ.items() if k not in unset}
        if crash_at is not None:
            env[ENV_ARM], env[ENV_MODE] = str(crash_at), "sigkill"
        if trace:
            env[ENV_TRACE] = str(trace)
        # Unarmed, the rig runs exactly the deployed command; only an armed or traced
        # run goes through the launcher, the one place that reads the crash variables.
        program = [LAUNCHER, *self.command] if crash_at is not None or trace else self.command
        self._publish_metrics_if_asked()
        deadline = time.monotonic() + timeout
        with ReadyListener() as listener:
            env.update(listener.env())
            with self.log.open("ab") as log:
                self.proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        *program,
                        "--config",
                        str(self.config),
                        "--log-level",
                        self.log_level,
                    ],
                    cwd=REPO,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if wait_ready:  # answering before ready (wait_ready=False) is not notified
                listener.wait(self.proc, timeout)
        for socket in self.sockets:
            with self.client(socket) as client:
                left = max(deadline - time.monotonic(), 0.001)
                self._wait_serving(client, left, wait_ready=wait_ready)

    def _publish_metrics_if_asked(self) -> None:
        """Under the rig, point this start's metrics at a textfile no other start uses.

        A config a test has damaged on purpose, or given metrics of its own, is left as it is."""
        directory = os.environ.get(METRICS_DIR_ENV)
        if not directory or not self.publishes_metrics:
            return
        try:
            config = load_yaml_mapping(self.config)
        except YAMLLoadError:
            return
        if config.get("metrics") not in (None, self._rig_metrics):
            return
        textfile = Path(directory) / f"{self.name}-{secrets.token_hex(6)}.prom"
        self._rig_metrics = {
            "textfile": str(textfile),
            "textfileIntervalSeconds": METRICS_INTERVAL_S,
        }
        self.config.write_text(yaml.safe_dump({**config, "metrics": self._rig_metrics}))

    def _wait_serving(self, client: PluginClient, timeout: float, *, wait_ready: bool) -> None:
        """Ready (or answering) within ``timeout``; a process that exits first fails at
        once, naming its exit status, instead of when the deadline has passed."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                if wait_ready:
                    client.wait_ready(min(left, EXIT_CHECK_S))
                else:
                    client.wait_answering(min(left, EXIT_CHECK_S))
                return
            except PluginCallError as exc:
                code = self.proc.poll()
                if code is not None:
                    raise RuntimeError(
                        f"{self.name} exited with status {code} before it was ready: see {self.log}"
                    ) from exc
                if exc.code != "DEADLINE_EXCEEDED" or left <= EXIT_CHECK_S:
                    raise RuntimeError(f"{self.name} did not become ready: see {self.log}") from exc

    def client(self, socket: str, timeout: float = 60) -> PluginClient:
        return PluginClient(self.socket_dir / socket, self.token, timeout=timeout)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_exit(self, timeout: float = 30) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
