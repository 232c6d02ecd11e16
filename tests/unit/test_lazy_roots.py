"""Package roots that import their names on first use keep their three lists in step.

``plugins.sdk``, ``fakekernel`` and ``plugins.kernel`` re-export names whose modules are
imported when a name is first used (a module ``__getattr__``), so a process pays only for
what it uses at start-up. Each name is then written three times: in the
``TYPE_CHECKING`` imports (what mypy sees), in the table ``__getattr__`` reads (what runs)
and in ``__all__``. A name in one list but not another is a name mypy accepts that fails
at run time, or the reverse; this test reads the three and resolves every name.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAZY_ROOTS = (
    "plugins.sdk",
    "fakekernel",
    "plugins.kernel",
    "plugins.sdk.host",
    "labs.sriov",
    "plugins.deploy",
)
MECHANISM = "first_use_exports"  # what each imports to install its __getattr__, no export


def imported_names(root: str) -> set[str]:
    """Every name the root's source imports, at top level or under ``TYPE_CHECKING``."""
    path = REPO / root.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        body = [node]
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            body = node.body
        for statement in body:
            if isinstance(statement, ast.ImportFrom) and statement.module != "__future__":
                if statement.module == "typing" and statement.level == 0:
                    continue
                names.update(alias.asname or alias.name for alias in statement.names)
    return names


@pytest.mark.parametrize("root", LAZY_ROOTS)
def test_every_exported_name_is_imported_for_mypy_and_resolves(root: str) -> None:
    module = importlib.import_module(root)
    exported = set(module.__all__) - {MECHANISM}
    imported = imported_names(root) - {MECHANISM}
    assert imported == exported, (
        f"{root}: names imported (for mypy) and __all__ differ: {sorted(imported ^ exported)}"
    )
    # In a fresh interpreter, where nothing was imported yet by other tests.
    script = (
        f"import {root} as m\n"
        "missing = [n for n in m.__all__ if not hasattr(m, n)]\n"
        "assert not missing, missing\n"
        "print(len(m.__all__))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(module.__all__)


@pytest.mark.parametrize("root", LAZY_ROOTS)
def test_an_unknown_name_is_an_attribute_error(root: str) -> None:
    module = importlib.import_module(root)
    with pytest.raises(AttributeError, match="no_such_name"):
        getattr(module, "no_such_name")  # noqa: B009
