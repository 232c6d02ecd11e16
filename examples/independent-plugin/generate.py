"""Generate this plugin's own gRPC stubs from the project's wire contract.

    python generate.py          # write stubs/networkplugin_pb2.py and stubs/networkplugin_pb2_grpc.py
    python generate.py --check  # exit 1, naming the stale files, if the committed stubs differ

The plugin shares the contract (the .proto) with the project and nothing else: the
stubs are compiled here, into this directory, with the .proto's own directory as the
include path, so they import each other as top-level modules and no project package.
Needs ``grpcio-tools`` of the same release line as the ``grpcio`` the plugin runs on.
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from importlib import resources
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = (
    HERE.parent.parent / "plugins" / "api" / "networkplugin" / "v1alpha1" / "networkplugin.proto"
)
STUBS = HERE / "stubs"
GENERATED = ("networkplugin_pb2.py", "networkplugin_pb2_grpc.py")


def generate(out_dir: Path) -> None:
    from grpc_tools import protoc  # type: ignore[import-untyped]

    well_known = resources.files("grpc_tools") / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO.parent}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        PROTO.name,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    if not args.check:
        generate(STUBS)
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        generate(Path(scratch))
        stale = [
            name
            for name in GENERATED
            if not (STUBS / name).is_file()
            or not filecmp.cmp(Path(scratch) / name, STUBS / name, shallow=False)
        ]
    for name in stale:
        print(f"stale: {STUBS / name} (run python {Path(__file__).name})", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
