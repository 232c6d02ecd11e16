"""Provision and tear down the lab's hosts: the playbooks of ``ansible/``, run by ansible-runner.

The inventory handed to Ansible is built from the checked :class:`Inventory` (the same
keys, the key path resolved, plus where the wheel and wheelhouse are), so Ansible acts
on exactly what was validated. A host's outcome is its task counts from the run's stats
and, when it failed, one line naming the cause: the failing task and its message (the
preflight's, before any change; or a later task's, once the playbook has torn the host
down), or why SSH could not reach it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._artifacts import CACHE_DIR, Distribution, build_distribution
from ._inventory import HOST_GROUP, Inventory
from ._role import ANSIBLE_DIR

__all__ = [
    "ANSIBLE_DIR",
    "HostOutcome",
    "ProvisionError",
    "ProvisionResult",
    "provision",
    "teardown",
]


class ProvisionError(RuntimeError):
    """A run that failed for some host (or before any host): one line per cause."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.lines = tuple(lines)
        super().__init__("; ".join(self.lines))


@dataclass(frozen=True)
class HostOutcome:
    host: str
    changed: int
    failed: bool = False
    unreachable: bool = False
    cause: str = ""  # one line, when failed or unreachable

    @property
    def ok(self) -> bool:
        return not (self.failed or self.unreachable)


@dataclass(frozen=True)
class ProvisionResult:
    playbook: str
    hosts: tuple[HostOutcome, ...]

    @property
    def ok(self) -> bool:
        return all(outcome.ok for outcome in self.hosts)

    @property
    def changed(self) -> int:
        return sum(outcome.changed for outcome in self.hosts)

    @property
    def failures(self) -> tuple[str, ...]:
        """``<host>: <cause>`` for each host that failed or could not be reached."""
        return tuple(f"{o.host}: {o.cause}" for o in self.hosts if not o.ok)

    def outcome(self, host: str) -> HostOutcome:
        for outcome in self.hosts:
            if outcome.host == host:
                return outcome
        raise KeyError(host)

    def check(self) -> ProvisionResult:
        if not self.ok:
            raise ProvisionError(self.failures)
        return self


def distributions(inventory: Inventory, cache: Path = CACHE_DIR) -> dict[str, Distribution]:
    """The build each of the inventory's Python versions gets, made now from the tree."""
    return {py: build_distribution(py, cache) for py in sorted({h.python for h in inventory})}


def provision(
    inventory: Inventory,
    *,
    builds: Mapping[str, Distribution] | None = None,
    cache: Path = CACHE_DIR,
) -> ProvisionResult:
    """Run provision.yml: the preflight on every host (a failure there changes no host),
    then provisioning, in which a host that fails is torn down by the playbook.

    ``builds`` (from :func:`distributions`): what to install; default a fresh build of
    the working tree. A session passes the same builds to every run, so an edit to the
    tree between two runs is not a change the second run makes.
    """
    return _run(
        "provision.yml", inventory, builds if builds is not None else distributions(inventory)
    )


def teardown(inventory: Inventory) -> ProvisionResult:
    """Run teardown.yml: every host back to its recorded state, the record removed last."""
    return _run("teardown.yml", inventory, {})


def ansible_inventory(inventory: Inventory, dists: Mapping[str, Distribution]) -> dict[str, Any]:
    """The inventory Ansible runs on: the checked hosts' variables and their build."""
    hosts: dict[str, Any] = {}
    for host in inventory:
        variables = {
            **host.variables,
            "ansible_port": host.port,
            "sriov_host_netns": host.host_netns,
        }
        dist = dists.get(host.python)
        if dist is not None:
            variables |= {
                "dranp_dist_source": str(dist.directory),
                "dranp_dist_digest": dist.digest,
                "dranp_wheel": dist.wheel,
                "dranp_kit_wheel": dist.kit_wheel,
            }
        hosts[host.name] = variables
    return {"all": {"children": {HOST_GROUP: {"hosts": hosts}}}}


def _one_line(text: object) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else "no message"


def _cause(data: Mapping[str, Any]) -> str:
    """``<task>: <why>`` of a failed task's event. A host's last failure is the one kept:
    after a rescue, the rescue's own ``fail``, whose message the playbook composed from
    the first failure's task and cause; a failure with no rescue (the preflight's) is
    that task's module message, named here by its task."""
    message = _one_line(data.get("res", {}).get("msg"))
    if str(data.get("task_action", "")).rpartition(".")[2] == "fail":
        return message
    return f"{data.get('task', 'a task')}: {message}"


def _output(runner: Any) -> str:
    """What Ansible printed: ``Runner.stdout`` opens the file anew at each access (and
    raises if the run left none), so it is opened once here, and closed."""
    import ansible_runner

    try:
        stdout = runner.stdout
    except ansible_runner.AnsibleRunnerException:  # "stdout missing"
        return ""
    with stdout:
        return str(stdout.read())


def _run(playbook: str, inventory: Inventory, dists: Mapping[str, Distribution]) -> ProvisionResult:
    import ansible_runner  # the rig extra's; imported here so loading an inventory needs none

    with tempfile.TemporaryDirectory(prefix="dranp-sriov-") as private:
        runner = ansible_runner.run(
            private_data_dir=private,
            project_dir=str(ANSIBLE_DIR),
            playbook=playbook,
            inventory=ansible_inventory(inventory, dists),
            envvars={
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_RETRY_FILES_ENABLED": "0",
                "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
                "ANSIBLE_ROLES_PATH": str(ANSIBLE_DIR / "roles"),
            },
            quiet=True,
        )
        causes: dict[str, str] = {}
        unreachable: set[str] = set()
        for event in runner.events:
            data = event.get("event_data", {})
            host = data.get("host")
            if event.get("event") == "runner_on_unreachable" and host:
                unreachable.add(host)
                causes[host] = "unreachable: " + _one_line(data.get("res", {}).get("msg"))
            elif (
                event.get("event") == "runner_on_failed" and host and not data.get("ignore_errors")
            ):
                causes[host] = _cause(data)
        stats = runner.stats or {}
        outcomes = tuple(
            HostOutcome(
                host=host.name,
                changed=stats.get("changed", {}).get(host.name, 0),
                failed=bool(stats.get("failures", {}).get(host.name)),
                unreachable=host.name in unreachable or bool(stats.get("dark", {}).get(host.name)),
                cause=causes.get(host.name, ""),
            )
            for host in inventory
        )
        if runner.rc != 0 and all(o.ok for o in outcomes):
            # Nothing ran on any host (a playbook or inventory Ansible refused).
            output = _output(runner)
            last = [line for line in output.splitlines() if line.strip()][-1:] or ["no output"]
            raise ProvisionError([f"{playbook}: ansible-runner {runner.status}: {last[0].strip()}"])
    return ProvisionResult(playbook, outcomes)
