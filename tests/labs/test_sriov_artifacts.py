"""The SR-IOV lab's build cache when two runs fill it at once (seen: two sessions
downloading the same wheelhouse, the second's rename failing with ENOTEMPTY)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.sriov._artifacts import _publish


def _staged(root: Path, name: str, content: str) -> Path:
    staged = root / name
    staged.mkdir()
    (staged / "wheel.whl").write_text(content)
    return staged


def test_a_rename_onto_what_another_run_published_is_as_good(tmp_path: Path) -> None:
    target = _staged(tmp_path, "target", "theirs")
    ours = _staged(tmp_path, "ours", "ours")
    _publish(ours, target, target.is_dir)
    assert (target / "wheel.whl").read_text() == "theirs"


def test_a_rename_onto_something_incomplete_still_fails(tmp_path: Path) -> None:
    target = _staged(tmp_path, "target", "partial")
    ours = _staged(tmp_path, "ours", "ours")
    with pytest.raises(OSError, match="Directory not empty"):
        _publish(ours, target, lambda: False)


def test_a_rename_to_a_free_name_publishes(tmp_path: Path) -> None:
    ours = _staged(tmp_path, "ours", "ours")
    _publish(ours, tmp_path / "target", lambda: False)
    assert (tmp_path / "target" / "wheel.whl").read_text() == "ours"
    assert not ours.exists()
