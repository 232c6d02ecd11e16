"""The provisioning role's defaults: where the lab puts things on a host, in one place.

``labs/sriov/ansible/roles/dranp/defaults/main.yml`` names every path provisioning
writes (the venv, configs, tokens, journals, sockets, the unit, the pre-run record) and
the services with their sockets; the checks, the lab and the tests read them here,
rendered as Ansible would (the defaults refer to each other:
``dranp_venv: "{{ dranp_prefix }}/venv"``), so the playbooks and the Python never
disagree.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from plugins.sdk import load_yaml_mapping

__all__ = ["ANSIBLE_DIR", "ROLE_DIR", "role_defaults"]

ANSIBLE_DIR = Path(str(resources.files("labs.sriov").joinpath("ansible")))
ROLE_DIR = ANSIBLE_DIR / "roles" / "dranp"


@functools.cache
def role_defaults() -> dict[str, Any]:
    """The role's defaults, their references to each other resolved."""
    values: dict[str, Any] = load_yaml_mapping(ROLE_DIR / "defaults" / "main.yml")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    for _ in range(5):  # references are a few levels deep at most
        values = {
            # role_path is Ansible's magic variable: the role's directory.
            k: env.from_string(v).render({**values, "role_path": str(ROLE_DIR)})
            if isinstance(v, str)
            else v
            for k, v in values.items()
        }
    return values
