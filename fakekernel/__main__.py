"""python -m fakekernel --socket PATH [--lab FILE.yaml]: serve a fake kernel until SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from .lab import DEFAULT_LAB, LabError, load_lab
from .server import FakeKernelServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fakekernel", description=__doc__)
    parser.add_argument("--socket", required=True, help="Unix socket path to serve on")
    parser.add_argument("--lab", default=str(DEFAULT_LAB), help="host description (YAML)")
    args = parser.parse_args(argv)
    try:
        model = load_lab(args.lab)
    except LabError as e:
        print(f"fakekernel: {e}", file=sys.stderr)
        return 2
    server = FakeKernelServer(args.socket, model)
    server.bind()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker = threading.Thread(target=server.serve_forever, name="fakekernel", daemon=True)
    worker.start()
    print("ready", flush=True)
    stop.wait()
    server.shutdown()
    worker.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
