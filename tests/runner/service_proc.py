"""Run a plugin service as a real process and talk to it over its Unix socket."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from plugins.sdk.host import PluginClient
from plugins.sdk.runner._crash import ENV_ARM, ENV_MODE

REPO = Path(__file__).resolve().parents[2]


class ServiceProcess:
    """One service process at a time over a persistent state dir, socket dir and kernel."""

    def __init__(self, root: Path, module: str, kernel_url: str, socket_name: str) -> None:
        self.root = root
        self.module = module
        # Unix socket paths are limited to 107 bytes: keep the socket dir short.
        self.socket_dir = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp")) / "sock"
        self.token = secrets.token_hex(16)
        token_file = root / "token"
        token_file.write_text(self.token)
        token_file.chmod(0o600)
        self.config = root / "service.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "socketDir": str(self.socket_dir),
                    "stateDir": str(root / "state"),
                    "tokenFile": str(token_file),
                    "kernel": kernel_url,
                    "shutdownGraceSeconds": 5,
                }
            )
        )
        self.socket = self.socket_dir / socket_name
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "service.log"

    def start(self, crash_at: str | None = None) -> PluginClient:
        env = {k: v for k, v in os.environ.items() if k not in (ENV_ARM, ENV_MODE)}
        if crash_at:
            env[ENV_ARM], env[ENV_MODE] = crash_at, "sigkill"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    self.module,
                    "--config",
                    str(self.config),
                    "--log-level",
                    "WARNING",
                ],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        client = PluginClient(self.socket, self.token, timeout=30)
        try:
            client.wait_ready(30)
        except Exception:
            client.close()
            raise
        return client

    def wait_exit(self, timeout: float = 30) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.terminate()
        return self.proc.wait(30)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        shutil.rmtree(self.socket_dir.parent, ignore_errors=True)
