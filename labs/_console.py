"""A child program's output followed by a thread: logged, its tail kept, waited on."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

__all__ = ["AgentUnavailable", "Console", "reap", "tail_of"]

TAIL_LINES = 40
JOIN_DEADLINE_S = 60.0  # the program has exited or been killed: its output ends soon


class AgentUnavailable(RuntimeError):
    """A lab's agent did not start or is gone; the message says why."""


class Console:
    """A program's output (a guest's console, an agent's stderr): copied to a log file
    by a thread, its last lines kept for errors, and waited on for a marker line."""

    def __init__(self, log: Path, marker: str, program: str) -> None:
        self.log = log
        self.marker = marker
        self.program = program
        self.marked = False
        self.lines: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.changed = threading.Condition()
        self.ended = False
        self._thread: threading.Thread | None = None

    def follow(self, stream: IO[bytes]) -> None:
        self._thread = threading.Thread(target=self._copy, args=(stream,), daemon=True)
        self._thread.start()

    def _copy(self, stream: IO[bytes]) -> None:
        with self.log.open("wb") as log:
            for raw in stream:
                log.write(raw)
                log.flush()
                with self.changed:
                    line = raw.decode(errors="replace").rstrip()
                    self.lines.append(line)
                    self.marked = self.marked or line.endswith(self.marker)
                    self.changed.notify_all()
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def wait_marked(self, process: subprocess.Popen[Any], deadline: float) -> None:
        """Return once a line ended with the marker; raise if the output ends first or
        at the deadline."""
        with self.changed:
            self.changed.wait_for(lambda: self.marked or self.ended, deadline - time.monotonic())
            marked, ended = self.marked, self.ended
        if marked:
            return
        if ended:
            raise AgentUnavailable(
                f"{self.program} exited with {process.wait()} before {self.marker!r}"
            )
        raise TimeoutError(f"no {self.marker!r} within the boot deadline")

    def tail(self) -> str:
        with self.changed:
            return "\n".join(self.lines)

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=JOIN_DEADLINE_S)


def tail_of(log: Path, lines: int) -> str:
    """The last ``lines`` lines of the file ``log`` (a console or an agent's log, read
    whole: a guest's console is a few hundred kilobytes), or why it cannot be read."""
    try:
        text = log.read_text(errors="replace")
    except OSError as exc:
        return f"({log} unreadable: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or f"({log} is empty)"


def reap(process: subprocess.Popen[bytes] | None, console: Console, deadline_s: float) -> None:
    """Wait up to ``deadline_s`` for ``process`` (started in a session of its own) to
    exit, then kill its whole group; join the thread following its output, and close
    its pipes. Nothing of it is left running."""
    if process is not None and process.poll() is None:
        try:
            process.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    console.join()
    if process is not None:
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
