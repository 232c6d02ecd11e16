"""Benchmark: each performance trick of the store, the runner and the package roots
against the plain code it replaced, in one run (docs/benchmarks.md, "Tricks kept and
removed").

Every row times the path the trick is for twice: as the code is, and with the plain
alternative swapped in for that run only (a module attribute set and restored). The two
alternate block by block (ABAB), and a row's figures are medians over the blocks. Not a
test: it asserts no timing.

    uv run python scripts/bench_tricks.py [--blocks 15] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plugins.sdk.store import ScopeRecord, Store, Txn, _image, _journal
from plugins.sdk.store import _sqlite as sqlite_store

SHM = Path("/dev/shm") if Path("/dev/shm").is_dir() else None


@contextlib.contextmanager
def swapped(target: object, name: str, value: object) -> Iterator[None]:
    saved = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, saved)


def ab(
    blocks: int,
    measure: Callable[[], float],
    plain: Callable[[], contextlib.AbstractContextManager[None]],
) -> tuple[float, float]:
    """Medians of ``measure()`` as the code is (A) and under ``plain()`` (B), alternated."""
    measure()  # warm-up
    with plain():
        measure()
    a, b = [], []
    for _ in range(blocks):
        a.append(measure())
        with plain():
            b.append(measure())
    return statistics.median(a), statistics.median(b)


# -- the store: concurrent writes through the writer thread ----------------------------


class _FutureRequest:
    """``_sqlite._Request``'s interface over a ``concurrent.futures.Future`` (the plain code)."""

    def __init__(self, fn: Callable[[Any], object]) -> None:
        self.fn = fn
        self.done = False
        self.value: object = None
        self.error: BaseException | None = None
        self._future: concurrent.futures.Future[object] = concurrent.futures.Future()

    def wait_here(self) -> None:
        pass

    def resolve(self, value: object, error: BaseException | None) -> None:
        if self.done:
            return
        self.done = True
        self.value, self.error = value, error
        if error is not None:
            self._future.set_exception(error)
        else:
            self._future.set_result(value)

    def result(self) -> object:
        return self._future.result()


def concurrent_write_rows(blocks: int) -> list[tuple[str, str, float, float, str]]:
    threads, per_thread = 16, 40
    with tempfile.TemporaryDirectory(dir=SHM) as root:
        store = Store.open(Path(root) / "state")
        counter = iter(range(10**9))

        def measure() -> float:
            barrier = threading.Barrier(threads)

            def worker() -> None:
                barrier.wait()
                for _ in range(per_thread):
                    record = ScopeRecord(
                        partition="p", scope=f"s{next(counter)}", generation=1, epoch=1
                    )
                    store.write(functools.partial(Txn.put_scope, record=record))

            start = time.process_time()
            pool = [threading.Thread(target=worker) for _ in range(threads)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
            return (time.process_time() - start) / (threads * per_thread) * 1e6

        a, b = ab(blocks, measure, lambda: swapped(sqlite_store, "_Request", _FutureRequest))
        store.close()
    return [
        (
            "write hand-off (`_sqlite._Request`, not a Future)",
            "CPU per write, 16 writers (tmpfs)",
            a,
            b,
            "us",
        )
    ]


# -- the store: the first commit after an idle checkpoint, on a disk --------------------


def _checkpoint_without_rewrite(self: Store) -> None:
    """``Store._checkpoint`` without the meta row rewritten after a full copy (plain)."""
    with self._cond:
        conn, failed = self._conn, self._failure is not None
        self._uncheckpointed = 0
    if failed:
        return
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    with self._cond:
        self._checkpoints += 1
        self._cond.notify_all()


def checkpoint_rows(blocks: int, directory: Path) -> list[tuple[str, str, float, float, str]]:
    with tempfile.TemporaryDirectory(dir=directory) as root:
        store = Store.open(Path(root) / "state", checkpoint_after=1, checkpoint_idle_s=0.02)
        counter = iter(range(10**9))

        def one_write() -> None:
            k = next(counter)
            store.write(
                lambda t: t.put_scope(
                    ScopeRecord(partition="p", scope=f"s{k}", generation=1, epoch=1)
                )
            )

        def measure() -> float:
            """Wall time of a hook's six commits right after an idle checkpoint, in ms."""
            samples = []
            for _ in range(5):
                one_write()
                assert store._wait_checkpoints(store.checkpoints + 1, 10.0)
                start = time.perf_counter()
                for _ in range(6):
                    one_write()
                samples.append((time.perf_counter() - start) * 1000)
            return statistics.median(samples)

        a, b = ab(
            blocks,
            measure,
            lambda: swapped(Store, "_checkpoint", _checkpoint_without_rewrite),
        )
        store.close()
    return [
        (
            "WAL restarted at an idle checkpoint (`Store._checkpoint`)",
            f"wall of 6 commits after an idle checkpoint ({directory}, ext4)",
            a,
            b,
            "ms",
        )
    ]


# -- the store: a fresh journal's open ---------------------------------------------------


def fresh_open_rows(blocks: int) -> list[tuple[str, str, float, float, str]]:
    rows = []
    with tempfile.TemporaryDirectory(dir=SHM) as root:
        counter = iter(range(10**9))

        def measure() -> float:
            start = time.process_time()
            for _ in range(40):
                Store.open(Path(root) / f"s{next(counter)}").close()
            return (time.process_time() - start) / 40 * 1000

        def uncached(fmt: Any, journal_id: str) -> bytes:
            return _image._Template(fmt).stamp(journal_id)

        original_initialise = _journal._initialise

        def read_back(state_dir: Path, fmt: Any, present: set[str]) -> str:
            journal_id = original_initialise(state_dir, fmt, present)
            _journal.validate(state_dir, state_dir / _journal.DB_NAME, journal_id, None, fmt)
            return journal_id

        for name, alternative in {
            "fresh image cached per process (`_image._templates`)": lambda: swapped(
                _journal, "fresh_image", uncached
            ),
            "fresh journal not read back (`_journal.prepare`)": lambda: swapped(
                _journal, "_initialise", read_back
            ),
        }.items():
            a, b = ab(blocks, measure, alternative)
            rows.append((name, "CPU of a fresh journal's open+close (tmpfs)", a, b, "ms"))
    return rows


# -- processes: imports through the lazy roots, the CEL parser table --------------------


def _child_cpu(code: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000


EAGER = (
    "import plugins.sdk as s, plugins.sdk.host as h\n"
    "for m in (s, h):\n"
    "    [getattr(m, x) for x in m.__all__]\n"
)


def process_rows(blocks: int) -> list[tuple[str, str, float, float, str]]:
    rows = []
    for program, module in (
        ("a plugin service", "import plugins.services"),
        ("the coordinator", "import plugins.coordinator"),
        ("networkplugin-ctl", "import plugins.ctl"),
        ("the fake kernel server (test kit)", "import fakekernel.server"),
    ):
        a, b = [], []
        _child_cpu(module)
        for _ in range(blocks):
            a.append(_child_cpu(module))
            b.append(_child_cpu(EAGER + module))
        rows.append(
            (
                "package roots import on first use (`plugins.sdk`, `plugins.sdk.host`)",
                f"CPU of a process importing {program}'s entry module",
                statistics.median(a),
                statistics.median(b),
                "ms",
            )
        )
    compile_one = (
        "from plugins.coordinator import _cel\n"
        '_cel.compile_selector(\'device.attributes["x"].y == "z"\')\n'
    )
    stale = "import plugins.coordinator._cel_table as t\nt.load = lambda path=t.TABLE: None\n"
    a, b = [], []
    _child_cpu(compile_one)
    for _ in range(blocks):
        a.append(_child_cpu(compile_one))
        b.append(_child_cpu(stale + compile_one))
    rows.append(
        (
            "CEL parser tables saved (`cel_parser.pickle`)",
            "CPU of a process compiling one selector",
            statistics.median(a),
            statistics.median(b),
            "ms",
        )
    )
    return rows


# -- the kernel's shared reads across a create (measured, not changed here) -------------


def sharing_rows(blocks: int) -> list[tuple[str, str, float, float, str]]:
    """A vf-bond-vlan attach (2 NodePrepare, 4 ConnectNetwork) on the fake kernel in this
    process, with ``ReadSharingKernel.shared_reads`` and with it a plain block; its kernel
    calls counted at the ``ReadSharingKernel``: asked inside a block, answered from it."""
    from plugins.kernel import ReadSharingKernel
    from tests.effects.node import FakeNode

    seen = {"asked": 0, "shared": 0}
    attach: dict[str, int] = {}
    original = ReadSharingKernel._kernel_call

    def counting(self: ReadSharingKernel, call: Any, arguments: dict[str, Any]) -> Any:
        answers = getattr(self._local, "answers", None)
        seen["asked"] += 1
        if (
            answers is not None
            and not call.mutating
            and (call.name, *arguments.values()) in answers
        ):
            seen["shared"] += 1
        return original(self, call, arguments)

    def measure() -> float:
        with tempfile.TemporaryDirectory(dir=SHM) as root:
            node = FakeNode(Path(root))
            try:
                seen.update(asked=0, shared=0)
                start = time.process_time()
                node.full_attach()
                spent = (time.process_time() - start) * 1000
                attach.update(seen)
                node.full_detach()
            finally:
                node.close()
        return spent

    with swapped(ReadSharingKernel, "_kernel_call", counting):
        measure()
        calls = dict(attach)
    a, b = ab(
        blocks,
        measure,
        lambda: swapped(ReadSharingKernel, "shared_reads", lambda self: contextlib.nullcontext()),
    )
    return [
        (
            "reads shared across a create (`ReadSharingKernel`; "
            f"{calls['shared']} of {calls['asked']} calls answered from the block)",
            "CPU of a vf-bond-vlan attach on the in-process fake kernel",
            a,
            b,
            "ms",
        )
    ]


SECTIONS: dict[str, Callable[[argparse.Namespace], list[tuple[str, str, float, float, str]]]] = {
    "writes": lambda o: concurrent_write_rows(o.blocks),
    "checkpoint": lambda o: checkpoint_rows(o.blocks, Path(o.disk)),
    "fresh": lambda o: fresh_open_rows(o.blocks),
    "processes": lambda o: process_rows(o.blocks),
    "sharing": lambda o: sharing_rows(o.blocks),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--only", default=",".join(SECTIONS))
    parser.add_argument("--disk", default=tempfile.gettempdir(), help="a directory on a disk")
    options = parser.parse_args()
    print("| trick | path measured | with it | plain | plain/with |")
    print("|---|---|---|---|---|")
    for section in options.only.split(","):
        for name, path, a, b, unit in SECTIONS[section](options):
            print(
                f"| {name} | {path} | {a:.3f} {unit} | {b:.3f} {unit} | {b / a:.3f}x |", flush=True
            )


if __name__ == "__main__":
    main()
