"""Wait until every socket of the lab's services answers GetInfo with ready=true.

Run on the host by the project's venv (``health.py DEADLINE SOCKET=TOKENFILE ...``):
the check is the project's own client over the real socket, as the coordinator would
call it. One line per socket on success; one line naming the socket and why on failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

from plugins.sdk.host import PluginClient


def main(argv: list[str]) -> int:
    deadline_s = float(argv[0])
    for pair in argv[1:]:
        socket, token_file = pair.split("=", 1)
        token = Path(token_file).read_text().strip()
        with PluginClient(Path(socket), token, timeout=deadline_s) as client:
            try:
                info = client.wait_ready(deadline_s)
            except Exception as exc:
                print(f"{socket}: not ready within {deadline_s:.0f} s: {exc}", file=sys.stderr)
                return 1
        print(f"{socket}: {info.plugin_name} ready")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
