"""python -m fakekernel --socket PATH [--lab FILE.yaml]: serve a fake kernel until SIGTERM."""

from __future__ import annotations

import argparse
import sys
import threading

from plugins.sdk.signals import SignalStop

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
    # Not a handler that sets ``stop`` itself: it could interrupt ``stop.wait()`` while
    # that holds the event's lock, and wait for it forever (plugins.sdk.signals).
    signals = SignalStop.install(stop)
    worker = threading.Thread(target=server.serve_forever, name="fakekernel", daemon=True)
    worker.start()
    print("ready", flush=True)
    stop.wait()
    server.shutdown()
    worker.join()
    signals.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
