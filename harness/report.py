"""Allure reporting: each plugin call as a step, with its request, response, the plugin's
journal record and the kernel diff attached; environment metadata for the run, with the
run's counters (the report's overview lists them).

The rest of the report lives beside it: ``harness.report_labels`` (where each test sits
in the tree, its host label), ``harness.crash_log`` (a step per crash run),
``harness.crash_matrix`` (each topology's crash matrix), ``harness.report_check`` (the
rendered report loads nothing from another host)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import allure

from fakekernel.model import diff
from plugins.sdk import to_json_value

from .labs import lab_slug


def _json(value: Any) -> str:
    return json.dumps(to_json_value(value), indent=2, sort_keys=True, default=str)


class AllureObserver:
    """A coordinator observer: ``Coordinator(..., observer=AllureObserver(...))``."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]], clients: Mapping[str, Any]) -> None:
        self._snapshot = snapshot
        self._clients = clients

    @contextmanager
    def __call__(
        self, hook: str, step: str, plugin: str, request: Any
    ) -> Iterator[Callable[[Any], None]]:
        before = self._snapshot()
        outcome: list[Any] = []
        with allure.step(f"{hook} {step} -> {plugin}"):
            allure.attach(_json(request), "request", allure.attachment_type.JSON)
            yield outcome.append
            if outcome:
                allure.attach(_json(outcome[0]), "response", allure.attachment_type.JSON)
            operation = request.envelope.operation_id
            try:
                record = self._clients[plugin].inspect(operation, "")
                allure.attach(
                    _json(record),
                    "plugin journal record (plan progress)",
                    allure.attachment_type.JSON,
                )
            except Exception as exc:  # a dead service has no journal to show; say so in the report
                allure.attach(str(exc), "plugin journal record", allure.attachment_type.TEXT)
            changes = diff(before, self._snapshot())
            allure.attach(
                "\n".join(changes) or "(no change)", "kernel diff", allure.attachment_type.TEXT
            )


def model_version() -> str:
    """The fake kernel model's version: the project's, whose ``fakekernel`` it is."""
    try:
        return metadata.version("dra-networkplugins")
    except metadata.PackageNotFoundError:
        return "unknown"


def kernel_of(scheme: str, facts: Mapping[str, Any]) -> str:
    """The kernel a lab's plugins called: the fake tier calls no Linux kernel at all."""
    if scheme == "fake":
        return f"none: the fakekernel model (dra-networkplugins {model_version()})"
    here = f"{platform.system()} {platform.release()}"
    if scheme == "vm":
        return f"Linux {facts.get('kernel_release', 'unknown')} (guest; host {here})"
    if scheme == "sriov":
        return "per host (below)"
    return f"{here} (this machine)"


def counters(summary: Mapping[str, Any]) -> dict[str, str]:
    """The run's counters as the report's overview lists them (the summary's figures,
    ``harness.rig.summarize``)."""
    if not summary:
        return {}
    kinds = (
        ("crash_runs_inprocess", "in-process"),
        ("compound_crash_runs", "compound"),
        ("coordinator_crash_runs", "coordinator"),
        ("crash_runs_sigkill", "SIGKILL"),
    )
    runs = sum(summary.get(key, 0) for key, _ in kinds)
    each = ", ".join(f"{summary.get(key, 0)} {name}" for key, name in kinds)
    return {
        "crash_points": str(summary.get("crash_points_enumerated", 0)),
        "crash_runs": f"{runs} ({each})",
        "invariant_violations": str(summary.get("invariant_violations", 0)),
        "io_faults": (
            f"{summary.get('io_faults_injected', 0)} injected, "
            f"{summary.get('io_fault_violations', 0)} violations"
        ),
        "tests": (
            f"{summary.get('tests_passed', 0)} passed, {summary.get('tests_failed', 0)} failed, "
            f"{summary.get('tests_skipped', 0)} skipped in {summary.get('seconds', 0)} s"
        ),
    }


def write_environment(
    results: Path,
    lab: str,
    facts: Mapping[str, Any] | None = None,
    summary: Mapping[str, Any] | None = None,
) -> None:
    """environment.properties for the report (its overview lists it): per lab, the lab,
    the kernel its plugins called, the backend, the NIC model and the run's counters
    (``summary``: crash points, crash runs, invariant violations, I/O faults, tests);
    the commit and the machine. ``facts`` are the run's (``RigStats.fact``): a vm run
    names the guest's kernel release and the QEMU that emulated its NICs."""
    facts = facts or {}
    results.mkdir(parents=True, exist_ok=True)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        ).stdout.strip()
    except OSError:
        commit = "unknown"
    scheme = lab.split("://", 1)[0]
    nic = {
        "fake": "fake kernel model (fakekernel/labs/default.yaml)",
        "netns": "veth (host kernel)",
        "vm": f"igb x2, emulated SR-IOV (QEMU {facts.get('qemu_version', 'unknown')})",
    }.get(scheme, "per inventory")
    backend = {
        "fake": "fakekernel",
        "netns": "linux (pyroute2)",
        "vm": "linux in a QEMU TCG guest, through the guest's kernel agent",
        "sriov": "linux on each host, through its kernel agent over SSH",
    }.get(scheme, scheme)
    # One report may hold several labs' runs (scripts/rig vm:// 'vm://?kernel=6.12'):
    # each lab's keys carry its name, the machine's are shared.
    name = lab_slug(lab)
    props = {
        f"{name}.lab": lab,
        f"{name}.kernel": kernel_of(scheme, facts),
        **{f"{name}.{key}": value for key, value in counters(summary or {}).items()},
        f"{name}.backend": backend,
        f"{name}.nic.model": nic,
        "commit": commit or "unknown",
        "python": platform.python_version(),
        "cpus": str(os.cpu_count()),
    }
    if "boot_seconds" in facts:
        props[f"{name}.boot_seconds"] = str(facts["boot_seconds"])
    # An SR-IOV lab's testbed, host by host (labs.sriov.SriovLab.testbeds).
    for host, bed in sorted(facts.get("hosts", {}).items()):
        props[f"{name}.{host}.kernel"] = f"Linux {bed.get('kernel', 'unknown')}"
        props[f"{name}.{host}.emulated"] = str(bool(bed.get("emulated"))).lower()
        for pf in bed.get("pfs", []):
            # Keyed by netdev: a PCI address's colons separate keys in a properties file.
            props[f"{name}.{host}.pf.{pf['netdev']}"] = (
                f"{pf['model']} at PCI {pf['pci']}, driver {pf['driver']} "
                f"{pf['driver_version']}, firmware {pf['firmware'] or 'none'}, {pf['vfs']} VFs"
            )
    path = results / "environment.properties"
    earlier = path.read_text().splitlines() if path.is_file() else []
    kept = [line for line in earlier if line.split("=", 1)[0] not in props]
    path.write_text(
        "".join(f"{line}\n" for line in kept) + "".join(f"{k}={v}\n" for k, v in props.items())
    )
