"""The wire suite against a plugin that shares no code with the SDK, and its broken copies.

``examples/independent-plugin`` is a separate program speaking the proto (its own stubs,
journal and fake kernel client). Its target passes every check the wire driver can run
(crash-at-every-boundary a SIGKILL at each kernel call it makes); each broken copy
(one ``--broken`` fault) fails exactly the checks named here, and passes the rest, so a
check that cannot fail, or one that fails for the wrong reason, shows. Every (variant,
check) pair is its own test, so each verdict is its own entry in the rig's report.
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import allure
import pytest

from conformance import (
    WIRE_CHECKS,
    WireDriver,
    WireLabs,
    WireTarget,
    load_wire_target,
    run_check,
)
from conformance.suite import check_crash_at_every_boundary
from conformance.wire_plugin import KernelCallCrashes
from conformance.wire_target import Tamper

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "independent-plugin"
VARIANTS: dict[str, tuple[str, frozenset[str]]] = {
    "independent": ("target.yaml", frozenset()),
    # RemoveNetwork answers CLEANED and leaves the macvlan: the checks that look at the
    # host after a removal fail, the crashes over the wire among them.
    "skip-release": (
        "broken-release.yaml",
        frozenset(
            {
                "repeated-cleanup",
                "kill-and-restart",
                "crash-at-every-boundary",
                "cleanup-without-response",
            }
        ),
    ),
    "ignore-token": ("broken-token.yaml", frozenset({"authentication"})),
    # The intent is journaled after the link is created: only a crash in between (a
    # SIGKILL while the kernel holds an answer) leaves a link no record owns.
    "late-intent": (
        "broken-crash.yaml",
        frozenset({"crash-at-every-boundary", "cleanup-without-response"}),
    ),
}


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, tuple[WireTarget, WireLabs]]]:
    """One target and one set of labs (one fake kernel server) per variant, for the module."""
    opened: dict[str, tuple[WireTarget, WireLabs]] = {}
    try:
        for name, (filename, _) in VARIANTS.items():
            target = load_wire_target(EXAMPLE / filename)
            opened[name] = (target, WireLabs(target))
        yield opened
    finally:
        for _, labs in opened.values():
            labs.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("check", list(WIRE_CHECKS))
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_wire_check(variant: str, check: str, runs: dict[str, tuple[WireTarget, WireLabs]]) -> None:
    target, labs = runs[variant]
    verdict = run_check(target, check, labs)
    print(verdict.line())
    # The report shows each variant's verdict per check, the failure's detail included.
    allure.dynamic.title(f"wire {target.name} ({target.source.rsplit('/', 1)[-1]}): {check}")
    allure.attach(verdict.line(), "verdict", allure.attachment_type.TEXT)
    if check in VARIANTS[variant][1]:
        assert verdict.failed, f"the broken copy ({variant}) passed {check}: {verdict.line()}"
    elif verdict.outcome == "not applicable":
        pytest.skip(f"{check} does not apply to {target.name}: {verdict.detail}")
    else:
        assert verdict.outcome == "passed", verdict.line()


@pytest.mark.timeout(300)
def test_the_independent_plugin_is_crashed_at_each_kernel_call_it_makes(
    runs: dict[str, tuple[WireTarget, WireLabs]],
) -> None:
    """Every hook's kernel calls, each a SIGKILL while its answer is held, then recovery
    and cleanup: NodePrepare reads the parent (3 calls), ConnectNetwork opens the pod,
    reads, creates and sets up the macvlan (6), RemoveNetwork finds and deletes it (3).
    Every call counts, a later call of a method already crashed at too (the second
    get_link of the connect)."""
    target, labs = runs["independent"]
    plan = KernelCallCrashes()
    driver = WireDriver(target, labs)
    driver.crash_plan = lambda pick=None: plan  # type: ignore[method-assign]
    crash_runs = check_crash_at_every_boundary(driver)
    killed = [str(b) for b in plan.boundaries()]
    print(f"{crash_runs} crash runs: {killed}")
    assert crash_runs == len(killed) == 12
    per_hook = {hook: [p for p in killed if p.startswith(hook)] for hook in HOOKS}
    assert [len(per_hook[h]) for h in HOOKS] == [3, 6, 3]
    for hook, points in per_hook.items():  # each hook's calls 1..n, in order, none skipped
        assert points == [
            f"{hook}: kernel call #{i + 1} ({p.rsplit('(', 1)[1]}" for i, p in enumerate(points)
        ]
    for boundary in (
        "ConnectNetwork: kernel call #4 (get_link)",
        "ConnectNetwork: kernel call #5 (create_link)",
        "ConnectNetwork: kernel call #6 (set_link)",
        "RemoveNetwork: kernel call #3 (delete_link)",
    ):
        assert boundary in killed


HOOKS = ("NodePrepare", "ConnectNetwork", "RemoveNetwork")


@pytest.mark.timeout(300)
def test_external_change_over_the_wire_is_the_target_files_tamper() -> None:
    """The project's sriov service over the wire: after the removal an administrator
    changes VF 0's trust and VLAN (the file's tamper) and NodeUnprepare quarantines the
    VF. A tamper of a link the plugin never set is not quarantined: the check fails."""
    target = load_wire_target(REPO / "conformance" / "targets" / "sriov.yaml")
    untouched = dataclasses.replace(target, tamper=Tamper({"alias": "admin"}, link="enp3s0f1"))
    with WireLabs(target) as labs:
        verdict = run_check(target, "external-change", labs)
        assert verdict.outcome == "passed", verdict.line()
        verdict = run_check(untouched, "external-change", labs)
    assert verdict.failed, verdict.line()
    assert "not QUARANTINED" in verdict.detail, verdict.line()


def _conformance(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conformance", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.timeout(300)
def test_command_line_names_the_failed_check_and_exits_non_zero() -> None:
    good = _conformance("--target", str(EXAMPLE / "target.yaml"), "--check", "authentication")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "PASS  authentication" in good.stdout
    bad = _conformance("--target", str(EXAMPLE / "broken-token.yaml"), "--check", "authentication")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "FAIL  authentication: a wrong token: it was served" in bad.stdout
    assert "FAILED: authentication" in bad.stdout


def test_the_independent_plugin_imports_nothing_of_the_project() -> None:
    """Only the standard library, grpc, pyroute2 (its linux:// kernel) and its own stubs:
    it proves the wire, not the SDK."""
    tree = ast.parse((EXAMPLE / "plugin.py").read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            assert node.module is not None
            roots.add(node.module.split(".")[0])
    outside = (
        roots
        - set(sys.stdlib_module_names)
        - {"grpc", "pyroute2", "networkplugin_pb2", "networkplugin_pb2_grpc"}
    )
    assert outside == set(), f"plugin.py imports {sorted(outside)}"
    assert "__future__" in roots  # the walk saw the imports at all


def test_the_independent_plugins_stubs_are_current() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
