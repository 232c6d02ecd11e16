"""docs/architecture.md's data path names real code: every file it cites exists, and every
``Owner.name`` it cites is defined in the product (``Owner`` a class or a module), so a
rename or a split that leaves the doc behind fails here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
PRODUCT = ("plugins", "fakekernel", "labs", "harness", "conformance")


def _data_path() -> str:
    text = DOC.read_text()
    start = text.index("## The data path of one ConnectNetwork")
    return text[start : text.index("\n## ", start + 1)]


def _sources() -> dict[str, str]:
    return {
        path.relative_to(REPO).as_posix(): path.read_text()
        for top in PRODUCT
        for path in (REPO / top).rglob("*.py")
        if ".venv" not in path.parts
    }


def _defined(owner: str, name: str, sources: dict[str, str]) -> bool:
    definition = re.compile(rf"^\s*(?:def|class)\s+{re.escape(name)}\b", re.MULTILINE)
    for rel, text in sources.items():
        module = Path(rel).stem
        in_module = module == owner
        in_class = re.search(rf"^class\s+{re.escape(owner)}\b", text, re.MULTILINE) is not None
        if (in_module or in_class) and definition.search(text):
            return True
    return False


def cited_but_missing(section: str, sources: dict[str, str]) -> list[str]:
    missing = []
    for token in re.findall(r"`([^`\s]+)`", section):
        if token.endswith(".py"):
            known = (REPO / token).is_file() or any(Path(r).name == token for r in sources)
            if not known:
                missing.append(f"file {token}")
        elif re.fullmatch(r"_?[A-Za-z]\w*\.[a-z_]\w*", token):
            owner, name = token.split(".")
            if not _defined(owner, name, sources):
                missing.append(f"definition {token}")
    return missing


def test_the_data_path_cites_code_that_exists() -> None:
    section = _data_path()
    assert section.count("`") > 40  # the section is there and cites code
    assert cited_but_missing(section, _sources()) == []


def test_a_stale_citation_is_named() -> None:
    sources = {"plugins/sdk/runner/_locks.py": "class Joins:\n    def join_or_lead(self): ..."}
    section = (
        "`Joins.join_or_lead` `Joins.vanished` `_locks.Joins` `_locks.py` `_gone.py`"
        " `plugins/nowhere.py`"
    )
    assert cited_but_missing(section, sources) == [
        "definition Joins.vanished",
        "file _gone.py",
        "file plugins/nowhere.py",
    ]
