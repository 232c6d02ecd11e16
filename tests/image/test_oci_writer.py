"""deploy/image/oci.py, the writer of the image's bytes: the same root gives the same
digest whatever order its files were made in and whenever, and the layer holds what the
image needs and nothing of the build host (names, times, device nodes)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WRITER = ROOT / "deploy" / "image" / "oci.py"
EPOCH = 1_700_000_000  # the commit's time in scripts/build-image


def make_root(root: Path, *, reverse: bool, late: int) -> None:
    """A small root: files, a hard link, a symlink, runtime directories with leftovers.
    ``reverse`` makes them in the other order; ``late`` seconds after EPOCH they are
    touched, except one file that keeps an older time of its own."""
    entries = [
        ("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n"),
        ("opt/dranp/bin/networkplugin-links", b"#!/opt/dranp/bin/python\n"),
        ("usr/lib/python3.11/os.py", b"import abc\n"),
        ("tmp/build/leftover", b"from the build\n"),
        ("dev/null-like", b"a file debootstrap left\n"),
    ]
    for name, content in reversed(entries) if reverse else entries:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    os.link(root / "etc/passwd", root / "etc/passwd.link")
    (root / "usr/bin").mkdir(parents=True)
    os.symlink("../lib/python3.11", root / "usr/bin/python3.11-lib")
    for path in [*root.rglob("*"), root]:
        os.utime(path, (EPOCH + late, EPOCH + late), follow_symlinks=False)
    os.utime(root / "usr/lib/python3.11/os.py", (EPOCH - 86400, EPOCH - 86400))


def write(root: Path, out: Path, version: str = "0.1.0") -> dict[str, object]:
    done = subprocess.run(
        [
            sys.executable,
            str(WRITER),
            *("--root", str(root), "--epoch", str(EPOCH), "--version", version),
            *("--revision", "0" * 40, "--source", "urn:test", "--debian", "bookworm"),
            *("--user", "65532:65532", "--repository", "localhost/test", "--tag", version),
            *("--layout", str(out / "layout"), "--archive", str(out / "image.oci.tar")),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    record: dict[str, object] = json.loads(done.stdout)
    return record


def layer_members(out: Path, record: dict[str, object]) -> list[tarfile.TarInfo]:
    digest = str(record["layer_digest"]).removeprefix("sha256:")
    with (
        gzip.open(out / "layout/blobs/sha256" / digest) as stream,
        tarfile.open(fileobj=stream) as tar,
    ):
        return tar.getmembers()


def test_the_same_root_made_twice_differently_gives_the_same_bytes(tmp_path: Path) -> None:
    make_root(tmp_path / "a", reverse=False, late=10)
    make_root(tmp_path / "b", reverse=True, late=5000)
    first = write(tmp_path / "a", tmp_path / "out-a")
    second = write(tmp_path / "b", tmp_path / "out-b")
    assert first == second
    archives = [(tmp_path / out / "image.oci.tar").read_bytes() for out in ("out-a", "out-b")]
    assert archives[0] == archives[1]


def test_a_changed_file_or_label_changes_the_digest(tmp_path: Path) -> None:
    make_root(tmp_path / "root", reverse=False, late=10)
    base = write(tmp_path / "root", tmp_path / "base")
    relabelled = write(tmp_path / "root", tmp_path / "relabelled", version="0.2.0")
    (tmp_path / "root/etc/hostname").write_text("localhost\n")
    changed = write(tmp_path / "root", tmp_path / "changed")
    assert base["layer_digest"] == relabelled["layer_digest"]
    assert len({base["digest"], relabelled["digest"], changed["digest"]}) == 3


def test_the_layer_is_sorted_clamped_numeric_and_holds_no_runtime_leftovers(
    tmp_path: Path,
) -> None:
    make_root(tmp_path / "root", reverse=True, late=10)
    record = write(tmp_path / "root", tmp_path / "out")
    members = layer_members(tmp_path / "out", record)
    names = [m.name for m in members]
    assert names == sorted(names, key=lambda n: n.split("/"))
    assert "dev" in names
    assert "tmp" in names
    assert not [n for n in names if n.startswith(("dev/", "tmp/"))]
    assert all(m.mtime <= EPOCH for m in members)
    by_name = {m.name: m for m in members}
    assert by_name["usr/lib/python3.11/os.py"].mtime == EPOCH - 86400  # older kept
    assert {(m.uname, m.gname) for m in members} == {("", "")}
    assert by_name["etc/passwd.link"].islnk()
    assert by_name["etc/passwd.link"].linkname == "etc/passwd"
    assert by_name["usr/bin/python3.11-lib"].issym()


def test_the_config_names_user_labels_and_times(tmp_path: Path) -> None:
    make_root(tmp_path / "root", reverse=False, late=10)
    record = write(tmp_path / "root", tmp_path / "out")
    blobs = tmp_path / "out/layout/blobs/sha256"
    config = json.loads((blobs / str(record["config_digest"]).removeprefix("sha256:")).read_text())
    labels = config["config"]["Labels"]
    assert config["config"]["User"] == "65532:65532"
    assert config["created"] == "2023-11-14T22:13:20Z" == labels["org.opencontainers.image.created"]
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    assert labels["org.opencontainers.image.revision"] == "0" * 40
    assert config["rootfs"]["diff_ids"] == [record["diff_id"]]
    index = json.loads((tmp_path / "out/layout/index.json").read_text())
    (manifest,) = index["manifests"]
    assert manifest["digest"] == record["digest"]
    assert manifest["annotations"] == {
        "org.opencontainers.image.ref.name": "0.1.0",
        "io.containerd.image.name": "localhost/test:0.1.0",
    }


def test_a_device_node_in_the_root_is_refused(tmp_path: Path) -> None:
    """debootstrap's /dev is left out; a device anywhere else is a build error."""
    if os.geteuid() != 0:
        pytest.skip("mknod of a device node needs root")
    make_root(tmp_path / "root", reverse=False, late=10)
    os.mknod(tmp_path / "root/etc/console", 0o600 | 0o020000, os.makedev(5, 1))
    done = subprocess.run(
        [
            *(sys.executable, str(WRITER), "--root", str(tmp_path / "root"), "--epoch", "1"),
            *("--version", "v", "--revision", "r", "--source", "s", "--debian", "d"),
            *("--user", "0:0", "--repository", "r", "--tag", "t"),
            *("--layout", str(tmp_path / "l")),
            *("--archive", str(tmp_path / "a.tar")),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "oci.py: etc/console: a device or socket in the image's root"
