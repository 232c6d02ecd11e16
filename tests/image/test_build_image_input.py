"""scripts/build-image's bad input: one line naming what is wrong, nothing written. An
image built without the lock is refused: the lock is the only source of its dependencies.
These run without root (the checks come before anything is installed or written)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-image"
IDENTITY = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}


def git(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return done.stdout.strip()


def commit_of(tmp_path: Path, change: dict[str, str | None]) -> str:
    """A commit object of HEAD's tree with ``change`` (path: new text, None: removed),
    on no branch: the work tree, the index and every ref stay as they are."""
    index = {"GIT_INDEX_FILE": str(tmp_path / "index"), **IDENTITY}
    git("read-tree", "HEAD", env=index)
    for path, text in change.items():
        if text is None:
            git("rm", "--cached", "--quiet", path, env=index)
            continue
        (tmp_path / "blob").write_text(text)
        blob = git("hash-object", "-w", str(tmp_path / "blob"))
        git("update-index", "--cacheinfo", f"100644,{blob},{path}", env=index)
    tree = git("write-tree", env=index)
    return git(
        "commit-tree", tree, "-p", "HEAD", "-m", "test: build-image's bad input", env=IDENTITY
    )


def build_image(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    uv = shutil.which("uv")
    path = os.environ["PATH"] if uv is None else f"{Path(uv).parent}:{os.environ['PATH']}"
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": path, "DRANP_IMAGE_DIR": str(tmp_path / "image")},
        timeout=120,
    )


def refused(tmp_path: Path, done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert not (tmp_path / "image").exists()  # nothing written
    return lines[0]


def test_a_commit_without_uv_lock_is_refused(tmp_path: Path) -> None:
    commit = commit_of(tmp_path, {"uv.lock": None})
    line = refused(tmp_path, build_image(tmp_path, "--commit", commit))
    assert line == (
        f"build-image: uv.lock is not in commit {commit[:12]}: the image's dependencies "
        "come from the lock alone (uv lock, then commit it)"
    )


def test_a_lock_that_no_longer_matches_pyproject_is_refused(tmp_path: Path) -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '    "pyyaml>=6.0",\n' in pyproject
    stale = pyproject.replace('    "pyyaml>=6.0",\n', '    "pyyaml>=6.0",\n    "six>=1.16",\n')
    commit = commit_of(tmp_path, {"pyproject.toml": stale})
    line = refused(tmp_path, build_image(tmp_path, "--commit", commit))
    assert line.startswith(
        f"build-image: uv.lock of commit {commit[:12]} does not match its pyproject.toml ("
    )
    assert line.endswith("): run uv lock")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--push"],
            "build-image: unknown argument '--push' "
            "(usage: scripts/build-image [--commit REV] [--no-cache])",
        ),
        (["--commit"], "build-image: --commit needs a revision"),
        (
            ["--commit", "no-such-revision"],
            "build-image: --commit no-such-revision: not a commit of this repository",
        ),
    ],
)
def test_bad_arguments_are_refused(tmp_path: Path, args: list[str], line: str) -> None:
    assert refused(tmp_path, build_image(tmp_path, *args)) == line
