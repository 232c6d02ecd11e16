"""ansible-runner's output is read and closed when Ansible refused a playbook outright.

``Runner.stdout`` opens the run's stdout file anew at each access; a provisioning that
read it without closing it leaked the file (a ResourceWarning, an error under this
project's ``filterwarnings = error`` wherever the collector ran).
"""

from __future__ import annotations

import gc
import shutil
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from labs.sriov import ProvisionError, load_inventory
from labs.sriov._provision import _run


def test_a_refused_playbook_is_one_line_and_its_output_file_is_closed(tmp_path: Path) -> None:
    pytest.importorskip("ansible_runner")
    if shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("ansible-playbook is not installed beside this interpreter (the rig extra)")
    host = {
        "ansible_host": "192.0.2.1",  # TEST-NET-1: never reached, the playbook is refused first
        "ansible_user": "root",
        "ansible_ssh_private_key_file": "key",
        "sriov_pfs": [
            {
                "pci": "0000:3b:00.0",
                "vfs": 2,
                "model": "E810",
                "driver": "ice",
                "vf_driver": "iavf",
                "capabilities": ["vf_mac"],
            }
        ],
    }
    path = tmp_path / "lab.yml"
    path.write_text(
        yaml.safe_dump({"all": {"children": {"sriov_hosts": {"hosts": {"e810": host}}}}})
    )
    inventory = load_inventory(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ProvisionError) as refused:
            _run("no-such-playbook.yml", inventory, {})
        gc.collect()
    assert "no-such-playbook.yml: ansible-runner failed: " in str(refused.value)
    leaked = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaked == [], [str(w.message) for w in leaked]
