"""The public API boundary and the layer order of docs/architecture.md.

A module whose name starts with ``_`` belongs to the package that holds it; code
outside that package uses what the package root exports. Tests are white-box and
exempt. The check reads every product module's imports (relative ones resolved) and
fails naming each crossing; a planted violation proves it can fail.

The layers: each unit below may import only the units its row allows (the table in
docs/architecture.md, "Rules that hold the layers apart"). A new edge fails here,
naming the file and line, until the table (and the doc) say why it belongs. No file is
excepted from either rule.

The product (``plugins``, the wheel a node installs) imports nothing of the test kit
(``testkit/pyproject.toml``: ``fakekernel``, ``labs``, ``harness``, ``conformance``); the
kit plugs into it through entry points (``dra_networkplugins.kernels``, ``pytest11``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("plugins", "harness", "conformance", "fakekernel", "labs", "examples", "scripts")
# The test kit's distribution (testkit/pyproject.toml): what the product never imports.
TEST_KIT = ("fakekernel", "labs", "harness", "conformance")
# protoc output: the project's wire modules, and the independent example plugin's own stubs
GENERATED = ("plugins/api/", "examples/independent-plugin/stubs/")


# unit -> the units it may import (besides itself and the standard library/third parties)
LAYERS: dict[str, frozenset[str]] = {
    "plugins.api": frozenset(),
    "plugins.contracts": frozenset(),
    # the SDK: wire types, runner, store, host, and Linux's naming facts (IFNAMSIZ, ...)
    "plugins.sdk": frozenset({"plugins.api"}),
    # the kernel protocol: namespace handles and crash points from the SDK (other backends
    # than linux:// are entry points: the test kit's kernel+unix://)
    "plugins.kernel": frozenset({"plugins.sdk"}),
    "fakekernel": frozenset({"plugins.kernel", "plugins.sdk"}),
    "plugins.effects": frozenset({"plugins.kernel", "plugins.sdk"}),
    # handlers never touch the kernel: they return plans
    "plugins.vf": frozenset({"plugins.sdk"}),
    "plugins.bond": frozenset({"plugins.sdk"}),
    "plugins.links": frozenset({"plugins.sdk"}),
    # the coordinator program serves its own wire contract (plugins/api/coordinator)
    "plugins.coordinator": frozenset({"plugins.sdk", "plugins.api"}),
    "plugins.services": frozenset(
        {"plugins.sdk", "plugins.kernel", "plugins.effects", "plugins.vf", "plugins.bond"}
        | {"plugins.links"}
    ),
    # the operator's CLI reads journals and the kernel as the services do, and asks the
    # coordinator over its socket (its config and client); never the rig
    "plugins.ctl": frozenset(
        {"plugins.sdk", "plugins.kernel", "plugins.effects", "plugins.services"}
        | {"plugins.coordinator"}
    ),
    # the DaemonSet's renderer, readiness probe and pod setup: the coordinator's
    # inventory and contracts are what its DeviceClasses select
    "plugins.deploy": frozenset({"plugins.sdk", "plugins.coordinator"}),
    "examples": frozenset({"plugins.sdk", "plugins.kernel", "plugins.effects"}),
    # the test kit builds nodes from everything a node runs, never from the rig
    "labs": frozenset(
        {"plugins.sdk", "plugins.kernel", "plugins.effects", "plugins.coordinator"}
        | {"plugins.vf", "plugins.bond", "plugins.links", "plugins.services", "fakekernel"}
    ),
}
_PRODUCT_UNITS = (
    "plugins.api",
    "plugins.contracts",
    "plugins.sdk",
    "plugins.kernel",
    "plugins.effects",
    "plugins.vf",
    "plugins.bond",
    "plugins.links",
    "plugins.coordinator",
    "plugins.services",
    "plugins.ctl",
    "plugins.deploy",
    "fakekernel",
    "labs",
    "harness",
    "conformance",
    "examples",
    "scripts",
)


def _unit(module: str) -> str | None:
    for unit in sorted(_PRODUCT_UNITS, key=len, reverse=True):
        if module == unit or module.startswith(unit + "."):
            return unit
    return None


def layer_violations(root: Path, files: list[Path]) -> list[str]:
    """``file:line: a imports b`` for every import the layer table does not allow."""
    found = []
    for path in files:
        module = _module_of(path, root)
        me = _unit(".".join(module))
        if me not in LAYERS or path.name.startswith("test_"):
            # the rig, the conformance suite and scripts may import any layer; an example's
            # own tests (a third party's) use the test kit, which its plugin never imports
            continue
        tree = ast.parse(path.read_text(), str(path))
        for line, name in _imported(tree, module, path.name == "__init__.py"):
            other = _unit(name)
            if other is not None and other != me and other not in LAYERS[me]:
                found.append(f"{path.relative_to(root).as_posix()}:{line}: {me} imports {other}")
    return found


def _module_of(path: Path, root: Path) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imported(tree: ast.AST, module: list[str], is_package: bool) -> Iterator[tuple[int, str]]:
    package = module if is_package else module[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            yield node.lineno, name


def crossings(root: Path, files: list[Path]) -> list[str]:
    """``file:line imports a.b._c`` for every private module imported from outside its package."""
    found = []
    for path in files:
        module = _module_of(path, root)
        tree = ast.parse(path.read_text(), str(path))
        for line, name in _imported(tree, module, path.name == "__init__.py"):
            parts = name.split(".")
            for i, part in enumerate(parts):
                if not part.startswith("_") or part.startswith("__"):
                    continue
                owner = parts[:i]
                rel = path.relative_to(root).as_posix()
                if module[: len(owner)] != owner:
                    found.append(f"{rel}:{line} imports {name}")
                break
    return found


def _product_files(root: Path) -> list[Path]:
    files = []
    for top in PRODUCT:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if not rel.startswith(GENERATED) and ".venv" not in path.parts:
                files.append(path)
    return files


def test_product_code_imports_no_private_module_of_another_package() -> None:
    files = _product_files(REPO)
    assert len(files) > 50
    assert crossings(REPO, files) == []


def test_a_planted_violation_is_named(tmp_path: Path) -> None:
    (tmp_path / "harness").mkdir()
    (tmp_path / "plugins" / "sdk").mkdir(parents=True)
    planted = tmp_path / "harness" / "planted.py"
    planted.write_text(
        "from plugins.sdk._requests import CleanupStatus\n"
        "import plugins.kernel._crashing\n"
        "from plugins.sdk import CleanupStatus as Fine\n"
    )
    inside = tmp_path / "plugins" / "sdk" / "inside.py"
    inside.write_text("from ._requests import CleanupStatus\nfrom ..kernel._url import x\n")
    assert crossings(tmp_path, [planted, inside]) == [
        "harness/planted.py:1 imports plugins.sdk._requests",
        "harness/planted.py:2 imports plugins.kernel._crashing",
        "plugins/sdk/inside.py:2 imports plugins.kernel._url",
    ]


def test_every_import_follows_the_layer_order() -> None:
    assert layer_violations(REPO, _product_files(REPO)) == []


def kit_imports(root: Path, files: list[Path]) -> list[str]:
    """``file:line imports u`` for every import of a test-kit unit from ``plugins``."""
    found = []
    for path in files:
        module = _module_of(path, root)
        if module[0] != "plugins":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for line, name in _imported(tree, module, path.name == "__init__.py"):
            top = name.split(".")[0]
            if top in TEST_KIT:
                found.append(f"{path.relative_to(root).as_posix()}:{line} imports {top}")
    return found


def test_the_product_imports_nothing_of_the_test_kit() -> None:
    product = [path for path in _product_files(REPO) if _module_of(path, REPO)[0] == "plugins"]
    assert len(product) > 50
    assert kit_imports(REPO, product) == []


def test_a_planted_test_kit_import_is_named(tmp_path: Path) -> None:
    (tmp_path / "plugins" / "kernel").mkdir(parents=True)
    (tmp_path / "labs").mkdir()
    planted = tmp_path / "plugins" / "kernel" / "planted.py"
    planted.write_text(
        "from fakekernel.client import FakeKernelClient\n"
        "import labs\n"
        "from plugins.sdk import RegistrationError\n"
        "def later():\n"
        "    import harness.rig\n"
    )
    kit = tmp_path / "labs" / "fine.py"
    kit.write_text("from plugins.kernel import open_kernel\nimport fakekernel\n")
    assert kit_imports(tmp_path, [planted, kit]) == [
        "plugins/kernel/planted.py:1 imports fakekernel",
        "plugins/kernel/planted.py:2 imports labs",
        "plugins/kernel/planted.py:5 imports harness",
    ]


def test_a_planted_layer_violation_is_named(tmp_path: Path) -> None:
    (tmp_path / "plugins" / "vf").mkdir(parents=True)
    (tmp_path / "plugins" / "sdk").mkdir(parents=True)
    handler = tmp_path / "plugins" / "vf" / "planted.py"
    handler.write_text("from plugins.kernel import Kernel\nfrom plugins.sdk import Plan\n")
    sdk = tmp_path / "plugins" / "sdk" / "planted.py"
    sdk.write_text("import harness.rig\nfrom labs import Node\n")
    assert layer_violations(tmp_path, [handler, sdk]) == [
        "plugins/vf/planted.py:1: plugins.vf imports plugins.kernel",
        "plugins/sdk/planted.py:1: plugins.sdk imports harness",
        "plugins/sdk/planted.py:2: plugins.sdk imports labs",
    ]
