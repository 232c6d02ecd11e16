"""The SR-IOV lab of a run, one group of hosts at a time, in whichever process runs it.

A run of ``sriov://INVENTORY`` with several hosts runs each group of hosts (a host with
the hosts its traffic peers name: ``Inventory.groups``) on an xdist worker of its own
(``harness.rig``: ``--dist loadgroup``, each case marked with its group). A worker makes
the ``SriovLab`` of a group when its first case asks for one of its hosts: it boots,
provisions, checks and at the end tears down only those hosts, so the groups' slow
parts (boots, Ansible, the cases) overlap. Without xdist one process makes every group
it is asked for, one after another, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from labs import HostLab
    from labs.sriov import Inventory, SriovLab

__all__ = ["SriovLabs", "group_name"]


def group_name(group: tuple[str, ...]) -> str:
    """The xdist group and the summary's section of a group of hosts."""
    return "+".join(group)


class SriovLabs:
    """The inventory at ``path``; ``lab_of(host)`` is the provisioned lab of the host's
    group, made on first use."""

    def __init__(self, path: Path) -> None:
        from labs.sriov import load_inventory

        self.path = path
        self.inventory: Inventory = load_inventory(path)
        self.labs: dict[tuple[str, ...], SriovLab] = {}
        # A group whose lab could not be made: every later case of it fails with the
        # same error at once, as a session fixture's would, not after a boot of its own.
        self.failed: dict[tuple[str, ...], BaseException] = {}

    def groups(self) -> list[tuple[str, ...]]:
        return self.inventory.groups()

    def lab_of(self, host: str) -> SriovLab:
        group = self.inventory.group_of(host)
        if group in self.failed:
            raise self.failed[group]
        lab = self.labs.get(group)
        if lab is None:
            from labs.sriov import SriovLab

            try:
                lab = self.labs[group] = SriovLab(self.path, hosts=group)
            except Exception as exc:
                self.failed[group] = exc
                raise
        return lab

    def host_lab(self, host: str) -> HostLab:
        return self.lab_of(host).host_lab(host)

    def close(self) -> None:
        """Close every group's lab (each tears its hosts down and checks they are left as
        found); one ``AssertionError`` with every group's problems."""
        problems: list[str] = []
        for group, lab in self.labs.items():
            try:
                lab.close()
            except AssertionError as exc:
                problems.append(f"{group_name(group)}: {exc}")
        self.labs = {}
        if problems:
            raise AssertionError("\n".join(problems))
