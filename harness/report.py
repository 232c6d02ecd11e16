"""Allure reporting: each plugin call as a step, with its request, response, the plugin's
journal record and the kernel diff attached; environment metadata for the run."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import allure

from fakekernel.model import diff
from plugins.sdk import to_json_value


def _json(value: Any) -> str:
    return json.dumps(to_json_value(value), indent=2, sort_keys=True, default=str)


class AllureObserver:
    """A coordinator observer: ``Coordinator(..., observer=AllureObserver(...))``."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]], clients: Mapping[str, Any]) -> None:
        self._snapshot = snapshot
        self._clients = clients

    @contextmanager
    def __call__(
        self, hook: str, step: str, plugin: str, request: Any
    ) -> Iterator[Callable[[Any], None]]:
        before = self._snapshot()
        outcome: list[Any] = []
        with allure.step(f"{hook} {step} -> {plugin}"):
            allure.attach(_json(request), "request", allure.attachment_type.JSON)
            yield outcome.append
            if outcome:
                allure.attach(_json(outcome[0]), "response", allure.attachment_type.JSON)
            operation = request.envelope.operation_id
            try:
                record = self._clients[plugin].inspect(operation, "")
                allure.attach(
                    _json(record),
                    "plugin journal record (plan progress)",
                    allure.attachment_type.JSON,
                )
            except Exception as exc:  # a dead service has no journal to show; say so in the report
                allure.attach(str(exc), "plugin journal record", allure.attachment_type.TEXT)
            changes = diff(before, self._snapshot())
            allure.attach(
                "\n".join(changes) or "(no change)", "kernel diff", allure.attachment_type.TEXT
            )


def write_environment(results: Path, lab: str) -> None:
    """environment.properties for the report: kernel, backend, NIC model, commit."""
    results.mkdir(parents=True, exist_ok=True)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        ).stdout.strip()
    except OSError:
        commit = "unknown"
    scheme = lab.split("://", 1)[0]
    nic = {
        "fake": "fake kernel model (fakekernel/labs/default.yaml)",
        "netns": "veth (host kernel)",
    }.get(scheme, "per inventory")
    props = {
        "lab": lab,
        "kernel": f"{platform.system()} {platform.release()}",
        "backend": {"fake": "fakekernel", "netns": "linux (pyroute2)"}.get(scheme, scheme),
        "nic.model": nic,
        "commit": commit or "unknown",
        "python": platform.python_version(),
        "cpus": str(os.cpu_count()),
    }
    (results / "environment.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
