"""Provisioning the SR-IOV lab's hosts: templates, playbooks, the wheel, and a real run.

The fast tests render every template with the role's defaults, syntax-check the playbooks
and look inside the wheel (ansible-lint runs with the other linters, in scripts/test). The ``sriov`` test runs on the session's SR-IOV
lab (``--lab sriov://...``: every host recorded, provisioned with ansible-runner and
checked with testinfra): a second provisioning of the same build changes nothing; the
lab's own close tears every host down and checks that no trace is left.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import jinja2
import pytest

from labs.sriov import (
    ANSIBLE_DIR,
    SriovLab,
    ansible_inventory,
    changes_since,
    check_provisioned,
    load_inventory,
    provision,
    role_defaults,
    snapshot,
    teardown,
)
from plugins.sdk import load_service_config
from plugins.services.units import render_unit

REPO = Path(__file__).resolve().parents[2]
ROLE = ANSIBLE_DIR / "roles" / "dranp"
BIN = Path(sys.executable).parent
EMULATED = REPO / "inventories" / "emulated.yml"


def _render(name: str, **extra: Any) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    return env.get_template(name).render({**role_defaults(), **extra})


@pytest.mark.parametrize("netns", [None, "/run/netns/host"])
def test_every_service_config_renders_to_a_valid_config(tmp_path: Path, netns: str | None) -> None:
    defaults = role_defaults()
    extra = {} if netns is None else {"sriov_host_netns": netns}
    for service in defaults["dranp_services"]:
        path = tmp_path / f"{service['name']}.yaml"
        path.write_text(_render("service.yaml.j2", dranp_service=service, **extra))
        config = load_service_config(path)  # the services' own loader and schema
        assert config["kernel"] == f"linux://{netns or '/proc/1/ns/net'}"
        assert config["socketDir"] == f"/run/dra-networkplugins/{service['name']}"
        assert config["stateDir"] == f"/var/lib/dra-networkplugins/{service['name']}"
        assert config["tokenFile"] == f"/etc/dra-networkplugins/{service['name']}.token"


def test_the_unit_and_token_templates_render() -> None:
    # The role renders the product's unit (plugins.services.units) with these variables.
    defaults = role_defaults()
    unit = render_unit(
        bin_dir=f"{defaults['dranp_venv']}/bin",
        config_dir=defaults["dranp_config_dir"],
        shutdown_grace_seconds=defaults["dranp_shutdown_grace_seconds"],
    )
    lines = set(unit.splitlines())
    assert {
        "ExecStart=/opt/dra-networkplugins/venv/bin/networkplugin-%i "
        "--config /etc/dra-networkplugins/%i.yaml",
        "Restart=on-failure",
        "RuntimeDirectory=dra-networkplugins/%i",
        "RuntimeDirectoryMode=0700",
        "StateDirectory=dra-networkplugins/%i",
        "StateDirectoryMode=0700",
        "TimeoutStopSec=15",
    } <= lines
    assert _render("token.j2", dranp_token="abc") == "abc\n"


def test_the_health_check_asks_every_socket_of_every_service() -> None:
    asked = role_defaults()["dranp_health_sockets"].split()
    assert asked == [
        "/run/dra-networkplugins/vf/sriov.sock=/etc/dra-networkplugins/vf.token",
        "/run/dra-networkplugins/bond/bond.sock=/etc/dra-networkplugins/bond.token",
        "/run/dra-networkplugins/links/vlan.sock=/etc/dra-networkplugins/links.token",
        "/run/dra-networkplugins/links/ipvlan.sock=/etc/dra-networkplugins/links.token",
        "/run/dra-networkplugins/links/macvlan.sock=/etc/dra-networkplugins/links.token",
    ]


@pytest.mark.parametrize("playbook", ["provision.yml", "teardown.yml"])
def test_the_playbooks_pass_the_syntax_check(playbook: str) -> None:
    subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "-i", str(EMULATED), playbook],
        capture_output=True,
        check=True,
        cwd=ANSIBLE_DIR,
    )


def test_the_wheels_ship_the_playbooks_templates_and_schema(tmp_path: Path) -> None:
    """The test kit's wheel holds the lab (its role refers to the product's unit template
    beside it in site-packages), the product's the template."""
    uv = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    build = [uv, "build", "--wheel", "--quiet", "--out-dir", str(tmp_path)]
    subprocess.run(build, check=True, cwd=REPO)
    subprocess.run([*build, "--package", "dra-networkplugins-testkit"], check=True, cwd=REPO)
    wheels = list(tmp_path.glob("*.whl"))
    assert len(wheels) == 2
    names = {name for wheel in wheels for name in zipfile.ZipFile(wheel).namelist()}
    shipped = {
        "labs/sriov/schemas/sriov-inventory.schema.json",
        "labs/sriov/ansible/provision.yml",
        "labs/sriov/ansible/teardown.yml",
        "labs/sriov/ansible/roles/dranp/defaults/main.yml",
        "labs/sriov/ansible/roles/dranp/library/dranp_sriov.py",
        "labs/sriov/ansible/roles/dranp/files/health.py",
        "labs/sriov/ansible/roles/dranp/templates/service.yaml.j2",
        "labs/sriov/ansible/roles/dranp/templates/token.j2",
        "plugins/services/systemd/dra-networkplugin@.service.j2",
    }
    for tasks in ("provision", "install", "configure", "services", "teardown"):
        shipped.add(f"labs/sriov/ansible/roles/dranp/tasks/{tasks}.yml")
    assert shipped <= names


def test_ansible_runs_on_the_checked_inventory() -> None:
    inventory = load_inventory(EMULATED).reached_at("emulated-igb", "127.0.0.1", 40022)
    hosts = ansible_inventory(inventory, {})["all"]["children"]["sriov_hosts"]["hosts"]
    variables = hosts["emulated-igb"]
    assert (variables["ansible_host"], variables["ansible_port"]) == ("127.0.0.1", 40022)
    assert variables["sriov_host_netns"] == "/proc/1/ns/net"
    assert [pf["pci"] for pf in variables["sriov_pfs"]] == ["0000:01:00.0", "0000:02:00.0"]


def test_an_unreachable_host_is_one_line_naming_it(tmp_path: Path) -> None:
    # Nothing listens on port 1 of this machine; teardown needs no wheel, so no network.
    inventory = load_inventory(EMULATED).reached_at("emulated-igb", "127.0.0.1", 1)
    result = teardown(inventory)
    assert not result.ok
    (line,) = result.failures
    assert line.startswith("emulated-igb: unreachable: ")
    assert "port 1" in line
    assert "\n" not in line


# -- on the run's SR-IOV lab ----------------------------------------------------------------
# The session's lab (harness.pytest_plugin's sriov_lab) recorded every host, provisioned
# it and checked it; when the session ends it tears every host down and checks that no
# trace is left (a failure there fails the run).


@pytest.mark.sriov
@pytest.mark.timeout(1800)
def test_a_second_provisioning_of_the_same_build_changes_nothing(sriov_lab: SriovLab) -> None:
    assert sriov_lab.provisioning is not None
    assert sriov_lab.provisioning.changed > 0, "the first provisioning changed nothing"
    again = provision(sriov_lab.inventory, builds=sriov_lab.builds).check()
    assert again.changed == 0, [(o.host, o.changed) for o in again.hosts]
    for host in sriov_lab.inventory:
        remote = sriov_lab.remote[host.name]
        assert check_provisioned(host, remote) == []
        assert changes_since(sriov_lab.provisioned[host.name], snapshot(host, remote)) == []
