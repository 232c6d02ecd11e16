"""Controlled handover, one writer: a new instance waits for the writer lock its previous
instance still holds, bounded, and two instances never write the same journal.

The holders are real processes (the lock is a ``flock``, dropped by the kernel when its
holder dies); the store-level tests open the journal in this process, the service tests
run ``networkplugin-links`` as a deployer would (docs/runner.md, "The writer lock and
handover").
"""

from __future__ import annotations

import itertools
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from plugins.sdk.service import ServiceConfig, await_writer, default_writer_wait
from plugins.sdk.store import LOCK_NAME, ScopeRecord, Store, StoreLocked, Txn, WriterLock

TIMEOUT_S = 60.0
REPO = Path(__file__).resolve().parents[2]
PROG = "networkplugin-links"
SCRIPT = Path(sys.executable).with_name(PROG)


# -- holders: real processes ----------------------------------------------------------------

# Opens the journal as a service would and holds it until its stdin closes.
_HOLD_STORE = """
import sys
from pathlib import Path
from plugins.sdk.store import Store
store = Store.open(Path(sys.argv[1]))
print("open", flush=True)
sys.stdin.read()
store.close()
"""

# Holds the writer lock of an existing state directory as a Store does (its pid in the
# file), without SQLite: nothing else of the directory is touched while it holds it.
_HOLD_LOCK = """
import fcntl, os, sys
fd = os.open(os.path.join(sys.argv[1], "writer.lock"), os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.pwrite(fd, f"{os.getpid()}\\n".encode(), 0)
print("open", flush=True)
sys.stdin.read()
"""


class Holder:
    """A process holding ``state_dir``'s writer lock until ``release``."""

    def __init__(self, state_dir: Path, code: str = _HOLD_STORE) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, str(state_dir)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line == "open\n", f"the holder did not open {state_dir}: {line!r}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> None:
        """Close its stdin: it closes the store (or just exits) and is waited for."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(TIMEOUT_S) == 0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(TIMEOUT_S)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    made: list[Holder] = []
    yield made
    for holder in made:
        holder.kill()


class LockLog(logging.Handler):
    """The store's lock messages, with an event per kind ("waiting", "taken")."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.waiting = threading.Event()
        self.taken = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        self.lines.append(line)
        if "waiting up to" in line:
            self.waiting.set()
        if " taken after " in line:
            self.taken.set()


@pytest.fixture
def lock_log() -> Iterator[LockLog]:
    handler = LockLog()
    logger = logging.getLogger("plugins.sdk.store")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def files_of(state_dir: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file of the directory: bytes, mode and mtime."""
    return {
        p.name: (p.read_bytes(), p.stat().st_mode, p.stat().st_mtime_ns)
        for p in sorted(state_dir.iterdir())
    }


_GENERATIONS = itertools.count(1)


def a_change(t: Txn) -> None:
    """One change, so that the write commits (a write that changes nothing does not)."""
    record = ScopeRecord(
        partition="handover/test", scope="scope", generation=next(_GENERATIONS), epoch=1
    )
    t.put_scope(record)


def a_journal(state_dir: Path) -> None:
    """A journal with a commit in it, closed."""
    with Store.open(state_dir) as store:
        store.write(a_change)


# -- the store ------------------------------------------------------------------------------


def test_an_open_waits_for_the_holder_and_gets_the_lock_when_it_exits(
    tmp_path: Path, holders: list[Holder], lock_log: LockLog
) -> None:
    state = tmp_path / "state"
    a_journal(state)
    holder = Holder(state)
    holders.append(holder)
    with ThreadPoolExecutor(1) as pool:
        opening = pool.submit(Store.open, state, writer_wait_s=TIMEOUT_S)
        assert lock_log.waiting.wait(TIMEOUT_S), lock_log.lines
        assert not opening.done(), "it opened the journal while another process held it"
        holder.release()
        store = opening.result(TIMEOUT_S)
    try:
        store.write(a_change)
    finally:
        store.close()
    waiting, taken = lock_log.lines
    assert f"writer lock {state / LOCK_NAME} is held by pid {holder.pid}: waiting up to" in waiting
    assert f"writer lock {state / LOCK_NAME} taken after " in taken
    assert f"(pid {holder.pid} released it)" in taken


def test_a_holder_killed_hands_the_lock_over_at_once(
    tmp_path: Path, holders: list[Holder], lock_log: LockLog
) -> None:
    state = tmp_path / "state"
    a_journal(state)
    holder = Holder(state)
    holders.append(holder)
    with ThreadPoolExecutor(1) as pool:
        opening = pool.submit(Store.open, state, writer_wait_s=TIMEOUT_S)
        assert lock_log.waiting.wait(TIMEOUT_S), lock_log.lines
        holder.proc.send_signal(signal.SIGKILL)
        store = opening.result(TIMEOUT_S)
    store.close()
    assert lock_log.taken.is_set()


def test_past_the_deadline_the_open_refuses_naming_the_holder_and_changes_nothing(
    tmp_path: Path, holders: list[Holder], lock_log: LockLog
) -> None:
    state = tmp_path / "state"
    a_journal(state)
    holder = Holder(state)
    holders.append(holder)
    before = files_of(state)
    started = time.monotonic()
    with pytest.raises(StoreLocked) as info:
        Store.open(state, writer_wait_s=0.5)
    assert time.monotonic() - started >= 0.5
    assert info.value.holder_pid == holder.pid
    assert str(info.value) == (
        f"journal store {state} is already open by another writer (pid {holder.pid}); "
        "still held after waiting 0.5s for it, nothing was changed"
    )
    assert files_of(state) == before
    assert len(lock_log.lines) == 1, lock_log.lines  # the wait began; it never ended
    # The thread that was left blocked in flock drops the lock the moment it gets it: the
    # next opener waits for the holder only.
    holder.release()
    with Store.open(state, writer_wait_s=TIMEOUT_S) as store:
        store.write(a_change)


def test_no_wait_refuses_at_once_as_before(tmp_path: Path, holders: list[Holder]) -> None:
    state = tmp_path / "state"
    a_journal(state)
    holders.append(Holder(state))
    with pytest.raises(StoreLocked) as info:
        Store.open(state)
    assert "waiting" not in str(info.value)


def test_awaiting_a_holder_where_none_ever_was_creates_nothing(tmp_path: Path) -> None:
    assert WriterLock.await_holder(tmp_path / "missing", wait_s=1.0) is None
    assert not (tmp_path / "missing").exists()
    (tmp_path / "empty").mkdir()
    assert await_writer(tmp_path / "empty", 1.0) is None
    assert list((tmp_path / "empty").iterdir()) == []


def test_a_lock_taken_first_is_the_one_the_store_keeps(tmp_path: Path) -> None:
    state = tmp_path / "state"
    a_journal(state)
    lock = WriterLock.await_holder(state, wait_s=1.0)
    assert lock is not None
    assert lock.held
    store = Store.open(state, lock=lock)
    try:
        with pytest.raises(StoreLocked):
            Store.open(state)
    finally:
        store.close()
    assert not lock.held


# Each opener, started together with the others: open (waiting for whoever holds it), note
# it in the shared ledger (O_APPEND: one write, one line), commit, note the close, close.
_WRITER = """
import os, sys
from pathlib import Path
from plugins.sdk.store import ScopeRecord, Store
state, ledger, commits = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def note(what):
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, f"{what} {os.getpid()}\\n".encode())
    os.close(fd)
store = Store.open(state, writer_wait_s=120)
note("open")
for n in range(commits):
    record = ScopeRecord(
        partition="handover/test", scope=f"scope-{os.getpid()}", generation=n + 1, epoch=1
    )
    store.write(lambda t: t.put_scope(record))
note(f"close {store.durable_commits}")
store.close()
"""


def test_instances_started_together_never_write_the_same_journal(tmp_path: Path) -> None:
    state, ledger = tmp_path / "state", tmp_path / "ledger"
    a_journal(state)
    with Store.open(state) as store:
        first = store.durable_commits
    instances, commits = 3, 40
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(state), str(ledger), str(commits)],
            cwd=REPO,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(instances)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=TIMEOUT_S * 2)
        assert proc.returncode == 0, err
    lines = [line.split() for line in ledger.read_text().splitlines()]
    assert len(lines) == 2 * instances, lines
    # Each open is followed by its own close before anyone else opens: one writer at a time.
    for opened, closed in zip(lines[::2], lines[1::2], strict=True):
        assert (opened[0], closed[0]) == ("open", "close"), lines
        assert opened[1] == closed[2], lines
    assert {line[1] for line in lines[::2]} == {str(p.pid) for p in procs}
    # Every commit of every instance is in the journal, each instance continuing the
    # count the previous one left.
    counts = [int(line[1]) for line in lines[1::2]]
    assert counts == [first + commits * (n + 1) for n in range(instances)], counts
    with Store.open(state) as store:
        assert store.durable_commits == first + commits * instances


# -- the service programs ---------------------------------------------------------------------


@dataclass
class Deployment:
    """One service's config, token, socket and state directories."""

    root: Path
    sockets: Path
    kernel: str

    @property
    def state(self) -> Path:
        return self.root / "state"

    def config(self, name: str = "service.yaml", **overrides: Any) -> Path:
        token = self.root / "token"
        if not token.exists():
            token.write_text("secret-token\n")
            token.chmod(0o600)
        data: dict[str, Any] = {
            "socketDir": str(self.sockets),
            "stateDir": str(self.state),
            "tokenFile": str(token),
            "kernel": self.kernel,
            "shutdownGraceSeconds": 5,
            "allowVolatileStateDir": True,
            **overrides,
        }
        path = self.root / name
        path.write_text(yaml.safe_dump(data))
        return path


@pytest.fixture
def node(tmp_path: Path, kernel_url: str) -> Iterator[Deployment]:
    sockets = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp")) / "sock"
    yield Deployment(tmp_path, sockets, kernel_url)
    shutil.rmtree(sockets.parent, ignore_errors=True)


class Program:
    """A running ``networkplugin-links``, its stderr read line by line."""

    def __init__(self, config: Path) -> None:
        assert SCRIPT.exists(), f"{SCRIPT} is not installed (uv sync)"
        self.proc = subprocess.Popen(
            [str(SCRIPT), "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.lines: list[str] = []
        self._partial = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read_until(self, *texts: str, deadline_s: float = TIMEOUT_S) -> str:
        """The first line (read so far or from now on) holding one of ``texts``."""
        assert self.proc.stderr is not None
        deadline = time.monotonic() + deadline_s
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stderr, selectors.EVENT_READ)
            while True:
                for line in self.lines:
                    if any(text in line for text in texts):
                        return line
                left = deadline - time.monotonic()
                assert left > 0, f"none of {texts} within {deadline_s}s: {self.lines}"
                if sel.select(left):
                    chunk = os.read(self.proc.stderr.fileno(), 65536)
                    assert chunk, f"exited before any of {texts}: {self.lines}"
                    *whole, self._partial = (self._partial + chunk).split(b"\n")
                    self.lines += [w.decode() for w in whole]

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait()

    def wait(self) -> int:
        code = self.proc.wait(TIMEOUT_S)
        assert self.proc.stderr is not None
        rest = self._partial + self.proc.stderr.read()
        self._partial = b""
        self.lines += [line for line in rest.decode().splitlines() if line]
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(TIMEOUT_S)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@pytest.fixture
def programs() -> Iterator[list[Program]]:
    started: list[Program] = []
    yield started
    for program in started:
        program.kill()


SERVING = " INFO plugins.sdk.service: serving "
WAITING = "waiting up to"
TAKEN = " taken after "


def test_a_new_service_waits_for_the_old_one_and_serves_once_it_stopped(
    node: Deployment, programs: list[Program]
) -> None:
    config = node.config()
    old = Program(config)
    programs.append(old)
    old.read_until(SERVING)
    new = Program(config)
    programs.append(new)
    waiting = new.read_until(WAITING)
    assert f"writer lock {node.state / LOCK_NAME} is held by pid {old.pid}" in waiting, waiting
    assert " WARNING plugins.sdk.store: " in waiting
    assert not any(SERVING in line for line in new.lines)
    assert old.stop() == 0
    taken = new.read_until(TAKEN)
    assert f"(pid {old.pid} released it)" in taken, taken
    new.read_until(SERVING)
    assert new.stop() == 0
    about_lock = [line for line in new.lines if str(node.state / LOCK_NAME) in line]
    assert about_lock == [waiting, taken], new.lines
    assert not any("Traceback" in line for line in new.lines), new.lines


def test_past_the_deadline_a_new_service_exits_with_one_line_and_changes_nothing(
    node: Deployment, holders: list[Holder], programs: list[Program]
) -> None:
    config = node.config()
    first = Program(config)
    programs.append(first)
    first.read_until(SERVING)
    assert first.stop() == 0
    holder = Holder(node.state, _HOLD_LOCK)
    holders.append(holder)
    before = files_of(node.state)
    sockets_before = sorted(os.listdir(node.sockets))
    program = Program(node.config("late.yaml", writerLockWaitSeconds=1))
    programs.append(program)
    assert program.wait() == 2
    waiting, refusal = program.lines
    assert WAITING in waiting, program.lines
    assert f"held by pid {holder.pid}" in waiting, program.lines
    assert refusal == (
        f"{PROG}: journal store {node.state} is already open by another writer "
        f"(pid {holder.pid}); still held after waiting 1s for it, nothing was changed"
    )
    assert files_of(node.state) == before
    assert sorted(os.listdir(node.sockets)) == sockets_before


def test_two_services_started_together_serve_one_at_a_time(
    node: Deployment, programs: list[Program]
) -> None:
    config = node.config()
    pair = [Program(config), Program(config)]
    programs.extend(pair)
    with ThreadPoolExecutor(2) as pool:
        # Each one serves, or waits for the other.
        said: list[Future[str]] = [pool.submit(p.read_until, SERVING, WAITING) for p in pair]
        first_lines = [f.result(TIMEOUT_S) for f in said]
    serving = [p for p, line in zip(pair, first_lines, strict=True) if WAITING not in line]
    waiting = [p for p, line in zip(pair, first_lines, strict=True) if WAITING in line]
    assert (len(serving), len(waiting)) == (1, 1), first_lines
    first, second = serving[0], waiting[0]
    first.read_until(SERVING)
    assert f"held by pid {first.pid}" in second.read_until(WAITING)
    assert first.stop() == 0
    second.read_until(SERVING)
    assert second.stop() == 0


def test_the_default_wait_is_the_pods_termination_grace(tmp_path: Path) -> None:
    path = tmp_path / "service.yaml"
    base = "socketDir: s\nstateDir: st\ntokenFile: t\nkernel: linux:///proc/1/ns/net\n"
    path.write_text(base + "shutdownGraceSeconds: 7\n")
    assert ServiceConfig.load(path).writer_wait == default_writer_wait(7) == 12
    path.write_text(base + "shutdownGraceSeconds: 7\nwriterLockWaitSeconds: 0\n")
    assert ServiceConfig.load(path).writer_wait == 0
    path.write_text(base + "writerLockWaitSeconds: -1\n")
    with pytest.raises(Exception, match=r"\$\.writerLockWaitSeconds: must be >= 0"):
        ServiceConfig.load(path)
