"""The rig can fail: deliberately broken variants of the product each make the suite fail.

Each variant is patched in for one test only (pytest's monkeypatch undoes it), then the
conformance check that should catch it is run and must raise ConformanceError.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from conformance import CHECKS, ConformanceError, project_targets
from plugins.effects.linux import _common, _links
from plugins.effects.linux._vf import SetVFConfig
from plugins.kernel import Kernel, Link, NsRef
from plugins.sdk import EffectState
from plugins.sdk.runner import EffectContext, UndoOutcome, UndoResult, _runner, _transitions
from plugins.sdk.store import EffectRecord

TARGETS = {t.name: t for t in project_targets()}


def run_check(name: str, plugin: str, tmp_path: Path) -> None:
    CHECKS[name](TARGETS[plugin], tmp_path)


def test_unbroken_product_passes_the_checks_used_below(tmp_path: Path) -> None:
    for check, plugin in [
        ("repeated-cleanup", "sriov"),
        ("crash-at-every-boundary", "vlan"),
        ("fencing", "macvlan"),
        ("foreign-object", "vlan"),
        ("external-change", "sriov"),
    ]:
        run_check(check, plugin, tmp_path / f"{check}-{plugin}")


def test_skipping_the_before_image_capture_is_caught(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The "before-image" records what we intend, not what was there.
    monkeypatch.setattr(SetVFConfig, "capture", lambda self, ctx: dict(ctx.payload["settings"]))
    with pytest.raises(ConformanceError, match="not as it was"):
        run_check("repeated-cleanup", "sriov", tmp_path)


def test_applying_before_applying_is_durable_is_caught(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The record written before each effect's first mutation keeps the before-image but
    # not Applying: every mutation runs while the journal still says Planned.
    def planned(rec: EffectRecord, before_json: str) -> EffectRecord:
        return dataclasses.replace(rec, before_json=before_json)

    def applied(rec: EffectRecord, outputs_json: str) -> EffectRecord:
        return dataclasses.replace(rec, state=EffectState.APPLIED, outputs_json=outputs_json)

    monkeypatch.setattr(_transitions, "start_applying", planned)
    monkeypatch.setattr(_transitions, "applied", applied)
    with pytest.raises(ConformanceError, match="crash at"):
        run_check("crash-at-every-boundary", "vlan", tmp_path)


def test_forgetting_the_removal_fence_is_caught(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_runner, "check_fence", lambda scope, name: None)
    with pytest.raises(ConformanceError, match="delayed past its removal was executed"):
        run_check("fencing", "macvlan", tmp_path)


def test_adopting_a_link_by_its_name_alone_is_caught(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = _common.find_owned_and_named

    def by_name(
        kernel: Kernel, ns: NsRef, ctx: EffectContext, kind: str, name: str
    ) -> tuple[Link | None, Link | None]:
        ours, named = real(kernel, ns, ctx, kind, name)
        return named or ours, named

    monkeypatch.setattr(_links, "find_owned_and_named", by_name)
    with pytest.raises(ConformanceError, match="was adopted"):
        run_check("foreign-object", "vlan", tmp_path)


def test_restoring_a_vf_without_checking_for_external_change_is_caught(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def blind_undo(self: SetVFConfig, ctx: EffectContext, before: Any, outputs: Any) -> UndoResult:
        self._set(
            ctx, {k: v for k, v in before.items() if v is not None}
        )  # overwrite, whatever is there
        return UndoResult(UndoOutcome.UNDONE)

    monkeypatch.setattr(SetVFConfig, "undo", blind_undo)
    with pytest.raises(ConformanceError, match="not QUARANTINED"):
        run_check("external-change", "sriov", tmp_path)
