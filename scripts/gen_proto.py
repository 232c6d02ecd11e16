"""Generate the wire contracts' Python modules from their .proto files.

Usage::

    uv run python scripts/gen_proto.py          # regenerate the committed modules
    uv run python scripts/gen_proto.py --check  # fail if the committed modules are stale

Every ``.proto`` under ``plugins/api`` (``PROTOS``): the plugins' contract
(``networkplugin.proto``), the coordinator program's (``coordinator.proto``), and the
Kubernetes protocols the coordinator speaks (kubelet DRA and plugin registration, NRI),
written from their public definitions. Each proto is compiled with ``-I <repo root>`` so the
generated modules live next to the .proto and import each other package-absolutely
(``plugins.api.networkplugin.v1alpha1.networkplugin_pb2``). Besides protobuf's well-known
types, googleapis-common-protos' .proto files are importable (``google/rpc/status.proto``),
and a proto importing one gets the installed ``google.rpc.status_pb2`` rather than a copy.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_REL = Path("plugins/api/networkplugin/v1alpha1/networkplugin.proto")
COORDINATOR_PROTO_REL = Path("plugins/api/coordinator/v1alpha1/coordinator.proto")
PROTOS = tuple(
    sorted(p.relative_to(REPO_ROOT) for p in (REPO_ROOT / "plugins/api").rglob("*.proto"))
)
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


class GenerationError(RuntimeError):
    """protoc failed or a required protoc plugin is missing."""


def generated_names(proto_rel: Path = PROTO_REL) -> list[Path]:
    """Repo-relative paths of every module generated from ``proto_rel``."""
    stem = proto_rel.with_suffix("")
    return [stem.parent / f"{stem.name}{suffix}" for suffix in GENERATED_SUFFIXES]


def _find_plugin(name: str) -> Path:
    """Locate a protoc plugin executable, preferring the running interpreter's venv."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file():
        return candidate
    found = shutil.which(name)
    if found is None:
        raise GenerationError(f"protoc plugin {name!r} not found (is mypy-protobuf installed?)")
    return Path(found)


def googleapis_proto_root() -> Path:
    """The directory holding googleapis-common-protos' ``google/rpc/*.proto``.

    The package installs each .proto beside its generated module, so the include root is
    the directory above ``google/`` (site-packages); protoc resolves only the imported
    paths under it, and the well-known types' directory, listed first, still wins for
    ``google/protobuf/*``.
    """
    from google.rpc import status_pb2  # type: ignore[import-untyped, unused-ignore]

    root = Path(status_pb2.__file__).resolve().parents[2]
    if not (root / "google/rpc/status.proto").is_file():
        raise GenerationError(
            f"googleapis-common-protos installs no google/rpc/status.proto under {root}"
        )
    return root


def generate(out_dir: Path, root: Path = REPO_ROOT, proto_rel: Path = PROTO_REL) -> list[Path]:
    """Compile ``root/proto_rel`` into ``out_dir``; return the generated file paths."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    well_known = resources.files("grpc_tools") / "_proto"
    googleapis = googleapis_proto_root()
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"-I{well_known}",
        f"-I{googleapis}",
        f"--plugin=protoc-gen-mypy={_find_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_find_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out=quiet:{out_dir}",
        f"--mypy_grpc_out=quiet:{out_dir}",
        # Path relative to the -I root keeps generated imports package-absolute.
        proto_rel.as_posix(),
    ]
    rc: int = protoc.main(args)
    if rc != 0:
        raise GenerationError(f"protoc exited with status {rc}")
    paths = [out_dir / rel for rel in generated_names(proto_rel)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise GenerationError(f"protoc did not produce: {', '.join(missing)}")
    return paths


def stale_files(root: Path = REPO_ROOT, proto_rel: Path = PROTO_REL) -> list[Path]:
    """Generate into a temporary directory; return committed files that differ or are missing."""
    stale: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="gen_proto-") as tmp:
        generate(Path(tmp), root, proto_rel)
        for rel in generated_names(proto_rel):
            fresh = (Path(tmp) / rel).read_bytes()
            committed = root / rel
            if not committed.is_file() or committed.read_bytes() != fresh:
                stale.append(rel)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare freshly generated code with the committed files; exit 1 if stale",
    )
    opts = parser.parse_args(argv)
    try:
        if opts.check:
            stale = [rel for proto in PROTOS for rel in stale_files(proto_rel=proto)]
            if stale:
                for rel in stale:
                    print(f"stale: {rel.as_posix()}", file=sys.stderr)
                print("run: uv run python scripts/gen_proto.py", file=sys.stderr)
                return 1
            print("generated code is up to date")
            return 0
        for path in (p for proto in PROTOS for p in generate(REPO_ROOT, proto_rel=proto)):
            print(f"wrote {path.relative_to(REPO_ROOT).as_posix()}")
    except GenerationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
