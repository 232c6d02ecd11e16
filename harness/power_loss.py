"""Pulling the plug: services and journals in a guest, killed at seeded random moments.

Two halves, one protocol (JSON lines over the guest's virtio-serial port):

- **the driver** (``python -m harness.power_loss`` in the guest, ``Driver``): one
  long-lived process (Python's start is the cost under TCG) that mounts the guest's
  virtio disk, builds a ``labs.Node`` on a ``labs.NetnsLab`` in the guest's kernel with
  in-process services and the coordinator, their state directories on that disk, and
  reports ``recovered`` (every operation in every journal with its state, and the
  journals that refused to open, with their reasons). Commands: ``cleanup`` (remove every
  attachment and unprepare every claim the coordinator's journal still holds, then the
  rig's invariants on the guest's kernel: ``cleaned`` with the violations), ``workload``
  (prepare/connect/remove/unprepare cycles of the macvlan and ipvlan topologies under
  fresh ids until the plug is pulled: ``started``, then a ``phase`` event before each
  phase and an ``ack`` after each plugin response the coordinator has journaled),
  ``shutdown`` (close, unmount, ``bye``; the guest powers off).
- **the host** (``run``): formats a disk image, then boots ``pulls + 1`` times on it.
  Each boot checks the acknowledgements received so far against what the guest
  recovered (``lost_acks``), cleans up and counts invariant violations, then (except
  the last) starts the workload and SIGKILLs QEMU a seeded delay after ``started``.

An acknowledged operation is one whose ``ack`` the host received: the driver sends it
only once the plugin's response and the coordinator's record of it are committed, so
every one of them must be in both journals after any power loss, in the acknowledged
state or a later one of the same lifecycle. docs/power-loss.md has the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labs import Lab, Node, start_state_seed
from labs.power import (
    DISK_SERIAL,
    PORT_NAME,
    GuestGone,
    PowerGuest,
    guest_python,
    make_bundle,
    make_disk,
    nofsync_library,
    unflushed,
)

PULLS_ENV = "DRANP_POWER_LOSS_PULLS"
CACHE_ENV = "DRANP_POWER_LOSS_CACHE"
NOFSYNC_ENV = "DRANP_POWER_LOSS_NOFSYNC"  # 1: run the manual check that the rig can fail
DEFAULT_PULLS = 3  # the vm tier's CI sample; DRANP_POWER_LOSS_PULLS=30 is the full run
TOPOLOGIES = ("macvlan", "ipvlan")  # what a NetnsLab's veth parents carry in any kernel
MOUNT = Path("/run/dranp-power")  # tmpfs in the guest: the disk's mount point
MAX_CYCLES = 10_000  # a workload runs until the plug is pulled
# Deadlines (a loaded 2-core machine; figures in docs/power-loss.md).
RECOVER_DEADLINE_S = 900.0  # boot + imports + mount + recovery
STEP_DEADLINE_S = 600.0  # cleanup with invariants; a workload's start
SHUTDOWN_DEADLINE_S = 120.0
# The kill moment: a seeded offset in [0, KILL_OFFSET_S) after the driver announced a
# seeded connect or remove of one of the first KILL_CYCLES cycles. A phase takes about
# a second under TCG (docs/power-loss.md), so most kills land inside the call and some
# just after it, between calls.
KILL_PHASES = ("connect", "remove")
KILL_CYCLES = 4
KILL_OFFSET_S = 2.0
# What the guest imports, compiled on the host first (the guest's root is read-only).
GUEST_IMPORTS = (
    "harness.power_loss",
    "harness.invariants",
    "harness.scenarios",
    "labs",
    "labs.netns",
    "plugins.kernel.linux",
    "plugins.kernel.linux.netns",
    "pyroute2",
)
CREATE_HOOKS = ("NodePrepare", "ConnectNetwork")
# Plugin operation states at or after a successful create, in its lifecycle.
AFTER_CREATE = ("Succeeded", "CleanupPending", "Cleaned")
ACKED = ("succeeded", "CLEANED")  # the results that promise something


# -- the guest's driver -------------------------------------------------------------------


class Driver:
    """The guest's side: a node on ``make_lab()`` with its state under ``disk``; every
    event goes to ``emit``. Also runs in-process over a fake lab (the tests of the check)."""

    def __init__(
        self, disk: Path, make_lab: Callable[[], Lab], emit: Callable[[dict[str, Any]], None]
    ) -> None:
        self.disk = disk
        self.make_lab = make_lab
        self.emit = emit
        self.node: Node | None = None
        self.before: dict[str, Any] = {}
        self.phase = ""
        self.cycle = -1

    # -- recovery ---------------------------------------------------------------------------

    def generation(self) -> int:
        marker = self.disk / "generation"
        return int(marker.read_text()) if marker.exists() else 0

    def next_generation(self) -> int:
        """Start over in fresh state directories (a journal refused: nothing is recreated
        in place), durably."""
        marker = self.disk / "generation"
        gen = self.generation() + 1
        with marker.open("w") as out:
            out.write(str(gen))
            out.flush()
            os.fsync(out.fileno())
        fd = os.open(self.disk, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return gen

    def recover(self) -> dict[str, Any]:
        """Open the node on the disk (every journal recovers), report what it holds."""
        from plugins.sdk.store import JournalUnavailable

        started = time.monotonic()
        refused: dict[str, str] = {}
        gen = self.generation()
        while True:
            root = self.disk / f"gen-{gen}"
            try:
                node = Node(self.make_lab(), root, observer=self.observe)
            except JournalUnavailable as exc:  # the coordinator's journal (the lab is closed)
                refused[f"gen-{gen}/coordinator"] = " ".join(str(exc).split())
                gen = self.next_generation()
                continue
            unavailable = {
                f"gen-{gen}/{name}": runner.unavailable_reason
                for name, runner in node.services.runners.items()
                if runner.unavailable_reason
            }
            if not unavailable:
                break
            refused.update(unavailable)
            node.close()
            gen = self.next_generation()
        self.node = node
        self.before = node.snapshot()
        report = self.journals()
        return {
            "ev": "recovered",
            "generation": gen,
            "boot_id": node.lab.boot_id(),
            "refused": refused,
            "recovery_notes": list(node.services.recovery_notes),
            "seconds": round(time.monotonic() - started, 2),
            **report,
        }

    def journals(self) -> dict[str, Any]:
        """Every operation in every plugin journal, every call in the coordinator's."""
        node = self._node()
        operations: dict[str, dict[str, Any]] = {}
        damaged: list[str] = []
        for service, store in node.services.stores.items():
            damaged += [f"{service}: {d.describe()}" for d in store.damaged]
            for row in store.read(lambda r: r.select("operations", order_by="seq")):
                operations[row["operation_id"]] = {
                    "service": service,
                    "partition": row["partition"],
                    "hook": row["hook"],
                    "state": row["state"],
                    "cleanup": row["cleanup_status"],
                }
        calls = {c.operation_id: c.state for c in node.journal.calls()}
        return {"operations": operations, "calls": calls, "damaged": damaged}

    # -- cleanup ----------------------------------------------------------------------------

    def cleanup(self) -> dict[str, Any]:
        """Close every unit the coordinator's journal holds, then check the invariants."""
        from harness.invariants import violations

        node = self._node()
        started = time.monotonic()
        self.phase = "cleanup"
        units = node.journal.read(lambda r: r.select("units"))
        closed = []
        for kind, done, close in (
            ("attachment", "removed", node.coordinator.remove),
            ("preparation", "unprepared", node.coordinator.unprepare),
        ):
            for unit in units:
                if unit["kind"] == kind and unit["state"] != done:
                    close(unit["unit"])
                    closed.append(f"{unit['unit']} ({unit['state']})")
        found = violations(self.before, node.kernel, node.journal, dict(node.coordinator.clients))
        self.before = node.snapshot()  # the pod is gone now; the workload makes it again
        return {
            "ev": "cleaned",
            "closed": closed,
            "violations": found,
            "seconds": round(time.monotonic() - started, 2),
        }

    # -- the workload -----------------------------------------------------------------------

    @contextlib.contextmanager
    def observe(
        self, hook: str, step: str, plugin: str, request: Any
    ) -> Iterator[Callable[[Any], None]]:
        """The coordinator's observer: ``seen`` runs once the plugin's response and the
        coordinator's record of it are committed, so an ack sent then is durable."""

        def seen(outcome: Any) -> None:
            status = getattr(outcome, "status", None)
            if isinstance(outcome, str):
                result = "error"
            elif status is not None:
                result = str(status.value)
            else:
                result = "succeeded"
            self.emit(
                {
                    "ev": "ack",
                    "op": request.envelope.operation_id,
                    "hook": hook,
                    "plugin": plugin,
                    "result": result,
                    "phase": self.phase,
                    "cycle": self.cycle,
                    "detail": outcome if isinstance(outcome, str) else "",
                }
            )

        yield seen

    def workload(self, seed: int, cycles: int, tag: str) -> dict[str, Any]:
        """``cycles`` lifecycles under fresh ids (``tag`` keeps boots apart), topologies
        drawn from ``seed``; events as it goes."""
        from harness.scenarios import PHASES, Lifecycle, allocate, compiled

        node = self._node()
        rng = random.Random(seed)
        warm = time.monotonic()
        for topology in TOPOLOGIES:  # compiled once, before the kill clock starts
            compiled(topology)
            allocate(topology)
        self.emit({"ev": "started", "seed": seed, "warm_s": round(time.monotonic() - warm, 2)})
        for k in range(cycles):
            self.cycle = k
            topology = rng.choice(TOPOLOGIES)
            life = Lifecycle(topology, node, claim=f"c{tag}-{k}", attachment=f"a{tag}-{k}")
            for name in PHASES:
                self.phase = name
                self.emit(
                    {
                        "ev": "phase",
                        "phase": name,
                        "cycle": k,
                        "topology": topology,
                        "t": round(time.monotonic() - warm, 2),
                    }
                )
                life.results[name] = life.phase(name)()
        self.phase = ""
        return {"ev": "done", "cycles": cycles}

    def _node(self) -> Node:
        assert self.node is not None, "recover() first"
        return self.node

    def serve(self, commands: Iterator[dict[str, Any]]) -> None:
        """Recover, then answer commands until ``shutdown``."""
        self.emit(self.recover())
        for command in commands:
            name = command.get("cmd")
            if name == "cleanup":
                self.emit(self.cleanup())
            elif name == "workload":
                self.emit(
                    self.workload(int(command["seed"]), int(command["cycles"]), command["tag"])
                )
            elif name == "shutdown":
                break
            else:
                self.emit({"ev": "error", "error": f"unknown command {command!r}"})
        self.close()

    def close(self) -> None:
        if self.node is not None:
            self.node.close()
            self.node = None


def _mount(serial: str, target: Path, options: str = "") -> float:
    """Mount the virtio disk whose serial is ``serial`` on ``target``; its seconds."""
    started = time.monotonic()
    for block in sorted(Path("/sys/block").glob("vd*")):
        serial_file = block / "serial"
        if serial_file.exists() and serial_file.read_text().strip() == serial:
            target.mkdir(parents=True, exist_ok=True)
            flags = ["-o", options] if options else []
            subprocess.run(
                ["mount", "-t", "ext4", *flags, f"/dev/{block.name}", str(target)],
                check=True,
                capture_output=True,
                text=True,
            )
            return time.monotonic() - started
    raise RuntimeError(f"no virtio disk with serial {serial!r} in /sys/block")


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def main(argv: list[str] | None = None) -> int:
    """The guest's driver (``python -m harness.power_loss --seed N``)."""
    parser = argparse.ArgumentParser(prog="python -m harness.power_loss", description=__doc__)
    parser.add_argument("--port", default=PORT_NAME)
    parser.add_argument("--serial", default=DISK_SERIAL)
    parser.add_argument("--seed", type=int, default=start_state_seed())
    parser.add_argument("--started", type=float, default=0.0, help="guest uptime at exec")
    parser.add_argument("--mount-options", default="", help="the disk's mount options")
    args = parser.parse_args(argv)
    fd = os.open(f"/dev/virtio-ports/{args.port}", os.O_RDWR | os.O_CLOEXEC)

    def emit(event: dict[str, Any]) -> None:
        data = json.dumps(event).encode() + b"\n"
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    try:
        imported = _uptime()
        mounted = _mount(args.serial, MOUNT, args.mount_options)
        emit(
            {
                "ev": "hello",
                "uptime": imported,
                "import_s": round(imported - args.started, 2) if args.started else None,
                "mount_s": round(mounted, 2),
            }
        )
        from labs import NetnsLab

        driver = Driver(MOUNT, lambda: NetnsLab(randomize=True, start_seed=args.seed), emit)
        with os.fdopen(os.dup(fd), "rb") as incoming:
            driver.serve(json.loads(line) for line in incoming if line.strip())
        subprocess.run(["umount", str(MOUNT)], check=True, capture_output=True)
        emit({"ev": "bye"})
    except BaseException:
        emit({"ev": "error", "error": traceback.format_exc()})
        raise
    finally:
        os.close(fd)
    return 0


# -- the host -----------------------------------------------------------------------------


def lost_acks(acks: list[dict[str, Any]], recovered: dict[str, Any]) -> list[str]:
    """Every acknowledged success the recovered journals do not hold as acknowledged (or
    in a later state of its lifecycle), each with its reason."""
    operations: dict[str, dict[str, Any]] = recovered["operations"]
    calls: dict[str, str] = recovered["calls"]
    lost = []
    for ack in acks:
        op, result = ack["op"], ack["result"]
        if result not in ACKED:
            continue  # nothing was promised
        create = ack["hook"] in CREATE_HOOKS
        record = operations.get(op)
        call = calls.get(op)
        where = f"{ack['hook']} {op} (acked {result} in {ack['phase']} of cycle {ack['cycle']})"
        if record is None:
            lost.append(f"{where}: not in the {ack['plugin']} plugin's journal")
        elif create and record["state"] not in AFTER_CREATE:
            lost.append(f"{where}: the plugin's journal says {record['state']}")
        elif not create and (record["state"], record["cleanup"]) != ("Cleaned", "CLEANED"):
            lost.append(f"{where}: the plugin's journal says {record['state']}/{record['cleanup']}")
        if call is None:
            lost.append(f"{where}: not in the coordinator's journal")
        elif call != ("succeeded" if create else "cleaned"):
            lost.append(f"{where}: the coordinator's journal says {call}")
    return lost


@dataclass
class Pull:
    """One plug pull: when, and what the next boot found."""

    index: int
    seed: int
    moment: KillMoment
    acks: int = 0
    phase: str = ""  # the phase the kill landed in ("cycle:phase")
    boot_s: float = 0.0  # vng start -> the driver's "recovered"
    lost: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    seed: int
    cache: str
    pulls: list[Pull] = field(default_factory=list)
    acks_checked: int = 0  # checks made: every boot checks every ack received before it
    acked_operations: int = 0  # distinct acknowledged successes, all checked at least once
    lost: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    boots: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    emulator_aborts: list[str] = field(default_factory=list)  # boots made again (start)


def emulator_abort(failure: str) -> str | None:
    """QEMU's own assertion line in a failure's console tail, if QEMU aborted."""
    for line in failure.splitlines():
        if line.startswith("qemu-system") and "Assertion" in line:
            return line.strip()
    return None


@dataclass(frozen=True)
class KillMoment:
    """When a pull kills: ``offset_s`` after the driver announced ``phase`` of ``cycle``."""

    cycle: int
    phase: str
    offset_s: float

    def __str__(self) -> str:
        return f"{self.offset_s} s after cycle {self.cycle}'s {self.phase} began"


def kill_moments(seed: int, pulls: int) -> list[KillMoment]:
    """Each pull's kill moment, drawn from ``seed``."""
    rng = random.Random(f"power-loss:{seed}")
    return [
        KillMoment(
            rng.randrange(KILL_CYCLES),
            rng.choice(KILL_PHASES),
            round(rng.uniform(0.0, KILL_OFFSET_S), 2),
        )
        for _ in range(pulls)
    ]


def run(
    pulls: int,
    disk: Path,
    *,
    seed: int | None = None,
    kernel: str = "6.1",
    cache: str = "none",
    bundle: bool = True,
    nofsync: bool = False,
    log: Callable[[str], None] = print,
) -> Outcome:
    """``pulls`` plug pulls on a fresh ``disk`` image (pulls + 1 boots); see the module.
    ``bundle``: the guest reads Python from a disk image (``labs.power.make_bundle``)
    rather than over 9p. ``nofsync``: the fault that proves the check can fail (the guest's
    flushes do nothing and its page cache is never written back, so the kill loses what
    the journals acknowledged; see docs/power-loss.md)."""
    return PowerLossRun(pulls, disk, seed, kernel, cache, bundle, nofsync, log).run()


class PowerLossRun:
    """The host's loop: boot i checks what boot i-1's acks promised, cleans up, then (but
    the last) runs the workload and pulls the plug."""

    def __init__(
        self,
        pulls: int,
        disk: Path,
        seed: int | None,
        kernel: str,
        cache: str,
        bundle: bool,
        nofsync: bool,
        log: Callable[[str], None],
    ) -> None:
        self.pulls = pulls
        self.bundle = bundle
        self.nofsync = nofsync
        self.prefix = ""  # guest shell commands before the driver's
        self.disk = disk
        self.seed = start_state_seed() if seed is None else seed
        self.kernel = kernel
        self.cache = cache
        self.moments = kill_moments(self.seed, pulls)
        self.log = log
        self.outcome = Outcome(self.seed, cache)
        self.acks: list[dict[str, Any]] = []  # every ack received so far

    def run(self) -> Outcome:
        from labs.power import warm_bytecode

        self.log(
            f"power loss: {self.pulls} pulls, seed {self.seed} (reproduce: "
            f"RIG_SEED={self.seed}), cache={self.cache}, kill moments: "
            + "; ".join(f"pull {i}: {m}" for i, m in enumerate(self.moments, 1))
        )
        started = time.monotonic()
        warm_bytecode(GUEST_IMPORTS)
        bundle = make_bundle(self.disk.with_suffix(".bundle.img")) if self.bundle else None
        make_disk(self.disk)
        if self.nofsync:
            self.prefix = unflushed(nofsync_library(self.disk.parent)) + "; "
        try:
            for boot in range(self.pulls + 1):
                self.boot(boot, bundle)
        finally:
            if bundle is not None:
                bundle.unlink(missing_ok=True)
        self.outcome.wall_s = round(time.monotonic() - started, 1)
        return self.outcome

    def boot(self, boot: int, bundle: Path | None) -> None:
        """One boot on the disk: recover and check, clean up, then pull the plug (or,
        the last, shut down)."""
        command = guest_python("harness.power_loss", "--seed", str(self.seed + boot))
        if self.nofsync:  # nor does ext4 commit its own journal before the kill
            command += " --mount-options commit=86400"
        # The guest's uptime at exec, so the driver can tell its imports' cost.
        command = f'{self.prefix}T0=$(cut -d" " -f1 /proc/uptime); {command} --started "$T0"'
        guest = self.start(command, bundle, boot)
        try:
            self.recover(guest, boot)
            if boot == self.pulls:
                guest.send({"cmd": "shutdown"})
                guest.wait_kind("bye", SHUTDOWN_DEADLINE_S)
                guest.close()
            else:
                self.pull(guest, boot)
        finally:
            guest.kill()
            guest.remove_files()

    def start(self, command: str, bundle: Path | None, boot: int) -> PowerGuest:
        """A guest booted on the disk whose driver said hello. QEMU itself aborting
        before that (seen once under TCG: an assertion in its MSI-X emulation while the
        guest kernel enumerated PCI) is the emulator's failure, not the code's, and to
        the disk no more than one more pulled plug: the boot is made again, once."""
        for attempt in (1, 2):
            guest = PowerGuest(
                self.disk, command, kernel=self.kernel, cache=self.cache, bundle=bundle
            )
            try:
                guest.wait_kind("hello", RECOVER_DEADLINE_S)
                return guest
            except GuestGone as exc:
                guest.kill()
                guest.remove_files()
                abort = emulator_abort(str(exc))
                if abort is None or attempt == 2:
                    raise
                self.outcome.emulator_aborts.append(f"boot {boot}: {abort}")
                self.log(f"power loss: boot {boot}: QEMU aborted ({abort}); booting again")
        raise AssertionError("unreachable")

    def recover(self, guest: PowerGuest, boot: int) -> None:
        """Check the acks against what the guest recovered, then clean up."""
        outcome = self.outcome
        hello = guest.wait_kind("hello", RECOVER_DEADLINE_S)
        recovered = guest.wait_kind("recovered", RECOVER_DEADLINE_S)
        lost = lost_acks(self.acks, recovered)
        checked = sum(a["result"] in ACKED for a in self.acks)
        outcome.acks_checked += checked
        outcome.acked_operations = max(outcome.acked_operations, checked)
        outcome.lost += lost
        outcome.refused.update(recovered["refused"])
        if recovered["refused"]:
            self.acks = []  # counted; the driver started a new generation of journals
        guest.send({"cmd": "cleanup"})
        cleaned = guest.wait_kind("cleaned", STEP_DEADLINE_S)
        outcome.leaks += cleaned["violations"]
        self.acks += guest.received("ack")  # the cleanup's
        outcome.boots.append(
            {
                "boot": boot,
                "hello_s": round(hello["host_t"], 1),
                "import_s": hello["import_s"],
                "mount_s": hello["mount_s"],
                "recovered_s": round(recovered["host_t"], 1),
                "recovery_s": recovered["seconds"],
                "operations": len(recovered["operations"]),
                "cleanup_s": cleaned["seconds"],
                "closed": len(cleaned["closed"]),
            }
        )
        if boot == 0:
            return
        pull = outcome.pulls[boot - 1]
        pull.boot_s = round(recovered["host_t"], 1)
        pull.lost, pull.refused = lost, dict(recovered["refused"])
        pull.violations = list(cleaned["violations"])
        self.log(
            f"pull {pull.index}: killed {pull.moment}, landed in {pull.phase}, after "
            f"{pull.acks} acks; next boot recovered at {pull.boot_s} s: "
            f"{checked} acks checked, lost {len(lost)}, journals refused "
            f"{len(pull.refused)}, violations after cleanup {len(pull.violations)}"
        )

    def pull(self, guest: PowerGuest, boot: int) -> None:
        """Start the workload and pull the plug at this boot's seeded moment."""
        pull = Pull(boot + 1, self.seed + boot, self.moments[boot])
        self.outcome.pulls.append(pull)
        before = len(guest.received("ack"))
        guest.send({"cmd": "workload", "seed": pull.seed, "cycles": MAX_CYCLES, "tag": boot})
        guest.wait_kind("started", STEP_DEADLINE_S)
        moment = pull.moment

        def announced(event: dict[str, Any]) -> bool:
            if event.get("ev") in ("error", "done"):
                raise GuestGone(f"the driver ended the workload: {event}\n{guest.tail()}")
            return event.get("ev") == "phase" and (event["cycle"], event["phase"]) == (
                moment.cycle,
                moment.phase,
            )

        phase = guest.wait_event(announced, STEP_DEADLINE_S, f"cycle {moment.cycle}'s phase")
        # The kill moment: a seeded delay after the phase began (the driver failing
        # first ends the wait at once).
        early = guest.idle_until(
            phase["host_t"] + moment.offset_s, lambda e: e.get("ev") in ("error", "done")
        )
        if early is not None:
            raise GuestGone(f"the workload ended before the kill: {early}\n{guest.tail()}")
        guest.kill()
        phases = guest.received("phase")
        last = phases[-1] if phases else {"cycle": -1, "phase": "start"}
        pull.phase = f"cycle {last['cycle']} {last['phase']}"
        mine = guest.received("ack")[before:]
        pull.acks = sum(a["result"] in ACKED for a in mine)
        self.acks += mine


def pulls_setting() -> int:
    """``DRANP_POWER_LOSS_PULLS`` (default ``DEFAULT_PULLS``)."""
    value = os.environ.get(PULLS_ENV, "")
    return int(value) if value else DEFAULT_PULLS


if __name__ == "__main__":
    sys.exit(main())
