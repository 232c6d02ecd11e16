"""The services' systemd unit: one hardened template, rendered for operators and the lab."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

from labs.sriov import role_defaults
from plugins.services.units import UNIT_TEMPLATE, main, render_unit

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "labs" / "sriov" / "ansible" / "roles" / "dranp"
DOCUMENTED_EXPOSURE = {
    ("dra-networkplugin@links.service", ()): 2.2,
    ("dra-networkplugin@links.service", ("--metrics-textfile-dir", "/var/lib/prom")): 2.2,
    ("dra-networkplugin@links.service", ("--metrics-port",)): 2.5,
    ("dra-networkplugin-coordinator.service", ("--coordinator",)): 0.7,
    ("dra-networkplugin-coordinator.service", ("--coordinator", "--metrics-port")): 1.5,
}
"""systemd-analyze's exposure score of each rendering, as docs/deploying.md quotes them
(systemd 252; 0 is locked down, 10 unprotected)."""
EXPOSURE_MARGIN = 0.3
"""How far above its documented score a rendering may drift (another systemd's weights)."""


def directives(unit: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in unit.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def test_the_unit_names_the_paths_and_the_grace_it_is_given() -> None:
    unit = directives(
        render_unit(bin_dir="/opt/np/bin/", config_dir="/etc/np", shutdown_grace_seconds=7)
    )
    assert unit["ExecStart"] == ["/opt/np/bin/networkplugin-%i --config /etc/np/%i.yaml"]
    assert unit["TimeoutStopSec"] == ["12"]


def test_the_unit_is_bounded_to_the_capabilities_the_services_use() -> None:
    unit = directives(render_unit())
    assert unit["CapabilityBoundingSet"] == ["CAP_NET_ADMIN CAP_SYS_ADMIN CAP_SYS_PTRACE"]
    assert unit["ProtectSystem"] == ["strict"]
    assert unit["RestrictAddressFamilies"] == ["AF_UNIX AF_NETLINK"]
    assert unit["IPAddressDeny"] == ["any"]
    assert "IPAddressAllow" not in unit
    assert unit["RestrictNamespaces"] == ["net"]
    # What the services write is theirs only, and made 0700 by systemd; the socket
    # directory (and the journal lease in it) lasts until reboot.
    assert unit["RuntimeDirectory"] == ["dra-networkplugins/%i"]
    assert unit["StateDirectory"] == ["dra-networkplugins/%i"]
    assert unit["RuntimeDirectoryMode"] == unit["StateDirectoryMode"] == ["0700"]
    assert unit["RuntimeDirectoryPreserve"] == ["yes"]
    assert "ReadWritePaths" not in unit
    # A refused start (exit 2: one line saying why) is not restarted over and over.
    assert unit["Restart"] == ["on-failure"]
    assert unit["RestartPreventExitStatus"] == ["2"]


def test_a_metrics_port_adds_an_inet_socket_to_localhost_and_nothing_else() -> None:
    plain, port = directives(render_unit()), directives(render_unit(metrics_port=True))
    assert port["RestrictAddressFamilies"] == ["AF_UNIX AF_NETLINK AF_INET"]
    assert port["IPAddressDeny"] == ["any"]
    assert port["IPAddressAllow"] == ["localhost"]
    changed = {k for k in plain.keys() | port.keys() if plain.get(k) != port.get(k)}
    assert changed == {"RestrictAddressFamilies", "IPAddressAllow"}


def test_a_metrics_textfile_dir_is_made_writable_and_nothing_else() -> None:
    plain = directives(render_unit())
    textfile = directives(render_unit(textfile_dir="/var/lib/node_exporter/textfile/"))
    assert textfile["ReadWritePaths"] == ["/var/lib/node_exporter/textfile"]
    changed = {k for k in plain.keys() | textfile.keys() if plain.get(k) != textfile.get(k)}
    assert changed == {"ReadWritePaths"}


def test_the_coordinators_unit_runs_it_with_no_privilege_and_no_network() -> None:
    unit = directives(
        render_unit(bin_dir="/opt/np/bin", coordinator=True, shutdown_grace_seconds=3)
    )
    assert unit["ExecStart"] == [
        "/opt/np/bin/networkplugin-coordinator --config /etc/dra-networkplugins/coordinator.yaml"
    ]
    assert unit["RuntimeDirectory"] == unit["StateDirectory"] == ["dra-networkplugins/coordinator"]
    assert unit["RuntimeDirectoryMode"] == unit["StateDirectoryMode"] == ["0700"]
    assert unit["Type"] == ["notify"]
    assert unit["TimeoutStopSec"] == ["8"]
    assert unit["RestartPreventExitStatus"] == ["2"]
    assert unit["CapabilityBoundingSet"] == [""]
    assert unit["RestrictNamespaces"] == ["yes"]
    assert unit["RestrictAddressFamilies"] == ["AF_UNIX"]
    assert unit["PrivateNetwork"] == ["yes"]
    assert unit["ProtectSystem"] == ["strict"]
    assert not any("%i" in v for values in unit.values() for v in values)
    # With a metrics port it keeps the host's network (a scraper on 127.0.0.1 reaches it).
    port = directives(render_unit(coordinator=True, metrics_port=True))
    assert port["RestrictAddressFamilies"] == ["AF_UNIX AF_INET"]
    assert port["IPAddressAllow"] == ["localhost"]
    assert "PrivateNetwork" not in port


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"bin_dir": "venv/bin"}, "bin_dir 'venv/bin': must be an absolute path"),
        ({"config_dir": "etc"}, "config_dir 'etc': must be an absolute path"),
        ({"shutdown_grace_seconds": -1}, "shutdown_grace_seconds -1: must be >= 0"),
        ({"textfile_dir": "prom"}, "textfile_dir 'prom': must be an absolute path"),
        ({"textfile_dir": "/var/lib/my prom"}, "textfile_dir '/var/lib/my prom': must not hold"),
        ({"bin_dir": "/opt/%n/bin"}, "bin_dir '/opt/%n/bin': must not hold white space or '%'"),
    ],
)
def test_a_bad_parameter_is_named(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        render_unit(**arguments)  # type: ignore[arg-type]


def test_the_command_prints_the_unit_or_one_line_why_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--bin-dir", "/usr/bin", "--grace", "3"]) == 0
    assert capsys.readouterr().out == render_unit(bin_dir="/usr/bin", shutdown_grace_seconds=3)
    assert main(["--config-dir", "relative"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "python -m plugins.services.units: config_dir 'relative': must be an absolute path\n"
    )
    assert main(["--coordinator", "--metrics-port", "--metrics-textfile-dir", "/prom"]) == 0
    assert capsys.readouterr().out == render_unit(
        coordinator=True, metrics_port=True, textfile_dir="/prom"
    )


def test_the_lab_role_renders_the_unit_as_the_renderer_does() -> None:
    """The role's template task, with Ansible's Jinja options as the task leaves them
    (Ansible trims a block's newline unless told not to), gives the renderer's text:
    the lab runs the unit an operator installs, line for line."""
    tasks = yaml.safe_load((ROLE / "tasks" / "configure.yml").read_text())
    (task,) = [
        t["ansible.builtin.template"]
        for t in tasks
        if t.get("ansible.builtin.template", {}).get("src") == "{{ dranp_unit_template }}"
    ]
    environment = jinja2.Environment(
        trim_blocks=task.get("trim_blocks", True),  # Ansible's defaults
        lstrip_blocks=task.get("lstrip_blocks", False),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    lab = {"bin_dir": "/opt/lab/venv/bin", "config_dir": "/etc/lab", "shutdown_grace_seconds": 7}
    rendered = environment.from_string(UNIT_TEMPLATE.read_text()).render(**lab)
    assert rendered == render_unit(**lab)


def test_the_lab_role_renders_the_same_template() -> None:
    template = Path(role_defaults()["dranp_unit_template"])
    assert template.resolve() == UNIT_TEMPLATE.resolve()
    assert not (
        ROOT / "labs" / "sriov" / "ansible" / "roles" / "dranp" / "templates" / UNIT_TEMPLATE.name
    ).exists()  # no second copy


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
@pytest.mark.parametrize(("unit_name", "options"), list(DOCUMENTED_EXPOSURE))
def test_systemd_scores_the_unit_as_exposed_no_more_than_the_docs_say(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], unit_name: str, options: tuple[str, ...]
) -> None:
    # Offline analysis of an instance (a template itself is not scored).
    assert main(list(options)) == 0
    (tmp_path / unit_name).write_text(capsys.readouterr().out)
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", unit_name],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=60,
    )
    score = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert score is not None, result.stdout + result.stderr
    ceiling = DOCUMENTED_EXPOSURE[unit_name, options] + EXPOSURE_MARGIN
    assert float(score.group(1)) <= ceiling, result.stdout
    assert "Failed to" not in result.stderr, result.stderr
    assert "Unknown" not in result.stderr, result.stderr
