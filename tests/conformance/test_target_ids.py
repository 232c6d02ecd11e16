"""The suite cleans up the scope and step the target's own requests named.

A target is free to choose its scope and step ids (a coordinator does: claim and
attachment ids); the suite's removal and unprepare must name what the prepare and the
connect named, not ids of its own. A correct plugin under other ids passes every check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance import CHECKS, NotApplicable, Target, project_targets
from conformance.target import example_target


def renamed(request: Any, scope: str, step: str) -> Any:
    """The same request under another scope and step id."""
    envelope = dataclasses.replace(request.envelope, scope=scope, step=step)
    return dataclasses.replace(request, envelope=envelope)


def under_other_ids(target: Target) -> Target:
    connect = target.connect
    prepare = target.prepare

    def other_connect(host: Any, prepared: Any, op: str) -> Any:
        return renamed(connect(host, prepared, op), "attachment-7", "net-a")

    other_prepare: Callable[[Any, str], Any] | None = None
    if prepare is not None:

        def other_prepare(host: Any, op: str) -> Any:
            return renamed(prepare(host, op), "claim-7", "nic-a")

    return dataclasses.replace(target, connect=other_connect, prepare=other_prepare)


TARGETS = {
    t.name: under_other_ids(t)
    for t in [example_target(), *(t for t in project_targets() if t.name == "macvlan")]
}


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("plugin", list(TARGETS))
def test_a_plugin_under_other_ids_passes(plugin: str, check: str, tmp_path: Path) -> None:
    try:
        CHECKS[check](TARGETS[plugin], tmp_path)
    except NotApplicable as exc:
        pytest.skip(f"{check} does not apply to {plugin}: {exc}")
