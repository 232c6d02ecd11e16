"""docs/writing-a-plugin.md shows what the tests run: the third-party test file
verbatim, the pip install line, the pin tool and the lines a wrong ``--lab`` fails with."""

from __future__ import annotations

import re
from pathlib import Path

import labs.netns

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "writing-a-plugin.md").read_text()


def test_the_third_party_test_file_is_shown_verbatim() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC, re.DOTALL)
    shown = (ROOT / "examples" / "bridge-plugin" / "test_bridge_plugin.py").read_text()
    assert shown in blocks


def test_the_doc_names_the_install_the_entry_point_and_the_pin_tool() -> None:
    product = (ROOT / "pyproject.toml").read_text()
    kit = (ROOT / "testkit" / "pyproject.toml").read_text()
    assert "pip install dra-networkplugins-testkit\n" in DOC
    assert 'dra-networkplugins = "harness.pytest_plugin"' in kit
    assert "pytest11" not in product
    assert 'dra-networkplugins = "harness.pytest_plugin"' in DOC
    assert 'networkplugin-pin = "plugins.sdk.pin:main"' in product
    assert "networkplugin-pin examples/dummy_plugin/contracts" in DOC


def test_the_doc_quotes_the_lines_a_wrong_lab_fails_with() -> None:
    # The first is the exact line tests/conformance/test_lab_option.py expects.
    assert (
        "ERROR: --lab netns://: no selected test runs on it (none takes the lab_factory fixture "
        "or is marked netns); they would run on the fake kernel instead\n"
    ) in DOC
    as_non_root = "NetnsLab needs root (to create network namespaces and links)"
    assert as_non_root in Path(labs.netns.__file__).read_text()  # what non-root is told
    assert f"ERROR: --lab netns://: this machine cannot run it: {as_non_root}\n" in DOC
