"""The pin tool ships with the package: ``networkplugin-pin ROOT`` and
``python -m plugins.sdk.pin ROOT`` pin a bundle root, ``--check`` says whether the pins
are current, and a root or bundle that is wrong is refused with one line, exit 2,
writing nothing. (The fresh-venv test runs it from an installed wheel.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from plugins.sdk import BundleStore
from plugins.sdk.pin import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "dummy_plugin" / "contracts"


@pytest.mark.parametrize("root", ["plugins/contracts", "examples/dummy_plugin/contracts"])
def test_the_committed_pins_are_current(root: str) -> None:
    assert main(["--check", str(ROOT / root)]) == 0


def test_python_dash_m_runs_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "plugins.sdk.pin", "--check", str(EXAMPLE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert shutil.which("networkplugin-pin", path=str(Path(sys.executable).parent))


def copy_example(tmp_path: Path) -> Path:
    root = tmp_path / "contracts"
    shutil.copytree(EXAMPLE, root)
    (root / "pins.json").unlink()
    return root


def test_it_pins_what_registration_then_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_example(tmp_path)
    assert main(["--check", str(root)]) == 1
    assert capsys.readouterr().err == (
        f"networkplugin-pin: {root}/pins.json is missing; run: networkplugin-pin {root}\n"
    )
    assert main([str(root)]) == 0
    assert (root / "pins.json").read_text() == (EXAMPLE / "pins.json").read_text()
    assert main(["--check", str(root)]) == 0
    assert BundleStore(root).load("dummy/v1alpha1").descriptor.name == "dummy"
    assert sorted(p.name for p in root.iterdir()) == ["dummy", "pins.json"]  # no staging file


def test_a_changed_bundle_makes_the_pins_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_example(tmp_path)
    assert main([str(root)]) == 0
    bundle = root / "dummy" / "v1alpha1.json"
    data = json.loads(bundle.read_text())
    data["profile"] = "example, narrower"
    bundle.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["--check", str(root)]) == 1
    assert "pins.json is stale; run: networkplugin-pin" in capsys.readouterr().err


def break_schema_id(root: Path) -> None:
    bundle = root / "dummy" / "v1alpha1.json"
    bundle.write_text(
        bundle.read_text().replace('"schemaId": "dummy/v1alpha1"', '"schemaId": "x/v1"')
    )


@pytest.mark.parametrize(
    ("spoil", "says"),
    [
        (shutil.rmtree, "not a directory of contract bundles"),
        (lambda root: shutil.rmtree(root / "dummy"), "no contract bundles"),
        (lambda root: (root / "dummy" / "v1alpha1.json").write_text("{"), "v1alpha1.json: "),
        (break_schema_id, "file declares schemaId 'x/v1'"),
        (
            lambda root: (root / "dummy" / "v1alpha1.json").write_text('{"plugin": "dummy"}'),
            "v1alpha1.json: contract bundle 'dummy/v1alpha1'",
        ),
    ],
    ids=["no-root", "no-bundles", "not-json", "wrong-schema-id", "not-a-bundle"],
)
@pytest.mark.parametrize("check", [False, True], ids=["pin", "check"])
def test_a_wrong_root_or_bundle_is_refused_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    spoil: Callable[[Path], object],
    says: str,
    check: bool,
) -> None:
    root = copy_example(tmp_path)
    spoil(root)
    assert main([*(["--check"] if check else []), str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("networkplugin-pin: "), err
    assert err.count("\n") == 1, err
    assert says in err
    assert not (root / "pins.json").exists()
