"""An SR-IOV inventory of several groups of hosts runs a worker per group: every case of
a host carries its group's xdist_group (so ``--dist loadgroup`` keeps a group on one
worker, which alone provisions it), the rig asks for a worker per group, and the
summary has each group's section beside the totals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.labs import parse_lab_url
from harness.pytest_plugin import (
    LAB_KEY,
    SRIOV_GROUP_PROPERTY,
    sriov_group_params,
    sriov_host_params,
)
from harness.rig import _Collector, parallel_args, sriov_groups, summarize
from harness.stats import gather

PF = """\
          sriov_pfs:
            - pci: "0000:01:00.0"
              vfs: 2
              model: Intel 82576
              driver: igb
              vf_driver: igbvf
              capabilities: []
"""
INVENTORY = f"""\
all:
  vars:
    ansible_user: root
    ansible_ssh_private_key_file: /keys/lab
  children:
    sriov_hosts:
      hosts:
        a1:
          ansible_host: 192.0.2.1
{PF}              peer: {{host: a2, netdev: eth1}}
        a2:
          ansible_host: 192.0.2.2
{PF}        b1:
          ansible_host: 192.0.2.3
{PF}"""


class _Config:
    """What the plugin's parameter functions read of a pytest config: the stash."""

    def __init__(self, url: str) -> None:
        self.stash = pytest.Stash()
        self.stash[LAB_KEY] = parse_lab_url(url)


@pytest.fixture
def url(tmp_path: Path) -> str:
    path = tmp_path / "two-groups.yml"
    path.write_text(INVENTORY)
    return f"sriov://{path}"


def _groups_of(params: list[Any]) -> dict[str, str]:
    found = {}
    for param in params:
        (group,) = [m.kwargs["name"] for m in param.marks if m.name == "xdist_group"]
        assert any(m.name == "sriov" for m in param.marks)
        found[param.id] = group
    return found


def test_each_hosts_cases_carry_its_groups_xdist_group(url: str) -> None:
    config = _Config(url)
    assert _groups_of(sriov_host_params(config)) == {  # type: ignore[arg-type]
        "sriov-a1": "a1+a2",
        "sriov-a2": "a1+a2",
        "sriov-b1": "b1",
    }
    assert _groups_of(sriov_group_params(config)) == {  # type: ignore[arg-type]
        "sriov-a1+a2": "a1+a2",
        "sriov-b1": "b1",
    }


def test_the_rig_asks_for_a_worker_per_group(url: str) -> None:
    groups = sriov_groups(parse_lab_url(url))
    assert groups == ["a1+a2", "b1"]
    assert parallel_args("sriov", [], len(groups)) == ["-n", "2", "--dist", "loadgroup"]
    assert parallel_args("sriov", [], 1) == []  # one group: one process, as before
    assert parallel_args("sriov", ["-n", "0"], 2) == []  # the caller's choice stands


def test_the_summary_has_each_groups_section(tmp_path: Path) -> None:
    """Two workers' figures are added up; each group's come from the worker that ran it,
    its outcomes from its cases' reports; the hosts' testbeds are merged, not replaced."""
    for worker, group, runs in (("gw0", "a1+a2", 3), ("gw1", "b1", 5)):
        (tmp_path / f"stats-{worker}.json").write_text(
            json.dumps(
                {
                    "counts": {"crash_runs_sigkill": runs},
                    "facts": {"sriov_groups": [group], "hosts": {group: {"kernel": "6.1"}}},
                }
            )
        )
    collector = _Collector(["a1+a2", "b1"])
    collector.stats = gather(tmp_path)
    for group, outcome in (("a1+a2", "passed"), ("a1+a2", "failed"), ("b1", "passed")):
        report = pytest.TestReport(
            "t.py::x",
            ("t.py", 0, "x"),
            {},
            outcome,  # type: ignore[arg-type]  # a literal of the three outcomes
            None,
            "call",
            user_properties=[(SRIOV_GROUP_PROPERTY, group)],
        )
        collector.pytest_runtest_logreport(report)
    summary = summarize("sriov", "sriov://x", collector, 10.0)
    assert summary["crash_runs_sigkill"] == 8
    assert summary["hosts"] == {"a1+a2": {"kernel": "6.1"}, "b1": {"kernel": "6.1"}}
    sections = summary["sriov_sections"]
    assert sections["a1+a2"]["crash_runs_sigkill"] == 3
    assert (sections["a1+a2"]["tests_passed"], sections["a1+a2"]["tests_failed"]) == (1, 1)
    assert sections["b1"]["crash_runs_sigkill"] == 5
    assert sections["b1"]["tests_passed"] == 1


def test_sizing_the_workers_imports_no_testinfra_before_pytest(url: str) -> None:
    """The rig reads the inventory before pytest starts; testinfra (a pytest plugin that
    pytest rewrites) imported then fails the run ('already imported so cannot be
    rewritten', an error under filterwarnings=error)."""
    probe = (
        "import sys\n"
        "from harness.labs import parse_lab_url\n"
        "from harness.rig import sriov_groups\n"
        f"assert sriov_groups(parse_lab_url({url!r})) == ['a1+a2', 'b1']\n"
        "assert 'testinfra' not in sys.modules, 'testinfra imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_a_group_whose_lab_cannot_be_made_fails_its_later_cases_at_once(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a session fixture's error would: one attempt per group (each is a boot and a
    provisioning), its error again for every later case of the group; other groups try
    their own."""
    import labs.sriov
    from harness.sriov_labs import SriovLabs

    attempts: list[tuple[str, ...]] = []

    class Unbootable:
        def __init__(self, path: Path, *, hosts: tuple[str, ...]) -> None:
            attempts.append(hosts)
            raise labs.sriov.SriovLabUnavailable(f"{'+'.join(hosts)}: no SSH banner")

    monkeypatch.setattr(labs.sriov, "SriovLab", Unbootable)
    made = SriovLabs(Path(url.removeprefix("sriov://")))
    for host in ("a1", "a2", "a1", "b1"):
        with pytest.raises(labs.sriov.SriovLabUnavailable, match="no SSH banner"):
            made.lab_of(host)
    assert attempts == [("a1", "a2"), ("b1",)]
