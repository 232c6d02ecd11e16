#!/usr/bin/env python3
"""Writes the OCI image of a root filesystem, byte for byte the same from the same root.

scripts/build-image runs it (the host's python3, standard library only) on the root it
made. It writes an OCI image layout (one gzip layer, the config, the manifest, the index)
and the same layout as an OCI archive (a tar), and prints the digests as JSON.

Why not `buildah commit` or `podman import`: the digest is the proof of reproducibility,
and every byte of it is decided here: entries sorted by name, every mtime clamped to
SOURCE_DATE_EPOCH, owners numeric with no names, no access or change times, no device
nodes (the runtime makes /dev), gzip without a name or time, JSON with sorted keys.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import stat
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

# The runtime mounts these: what the build left in them is not part of the image.
RUNTIME_DIRS = ("dev", "proc", "sys", "run", "tmp")
GZIP_LEVEL = 9  # the archive is written once per build and read by every node
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
PATH = "/opt/dranp/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class HashingWriter(io.RawIOBase):
    """Counts and hashes what passes through it on its way to ``sink``."""

    def __init__(self, sink: IO[bytes]) -> None:
        self.sink = sink
        self.sha256 = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:  # tarfile asks where it starts
        return self.size

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.sha256.update(view)
        self.size += len(view)
        self.sink.write(view)
        return len(view)

    @property
    def digest(self) -> str:
        return f"sha256:{self.sha256.hexdigest()}"


def walk(root: Path) -> Iterator[Path]:
    """Every path under ``root``, parents first, siblings sorted by their bytes."""
    entries = sorted(os.listdir(root), key=os.fsencode)
    for name in entries:
        path = root / name
        yield path
        if path.is_dir() and not path.is_symlink():
            yield from walk(path)


def normalized(tar: tarfile.TarFile, path: Path, arcname: str, epoch: int) -> tarfile.TarInfo:
    info = tar.gettarinfo(str(path), arcname)
    info.mtime = min(int(info.mtime), epoch)
    info.uname = info.gname = ""  # the build host's user names are not the image's
    info.pax_headers = {}
    return info


def write_layer(root: Path, epoch: int, sink: IO[bytes]) -> tuple[str, int]:
    """The root as a tar (PAX, sorted, clamped) into ``sink``: (its digest, its size)."""
    uncompressed = HashingWriter(sink)
    with tarfile.open(fileobj=uncompressed, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in walk(root):
            arcname = path.relative_to(root).as_posix()
            top = arcname.split("/", 1)[0]
            if top in RUNTIME_DIRS and "/" in arcname:
                continue
            mode = path.lstat().st_mode
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
                raise SystemExit(f"oci.py: {arcname}: a device or socket in the image's root")
            info = normalized(tar, path, arcname, epoch)
            if info.isreg():
                with path.open("rb") as content:
                    tar.addfile(info, content)
            else:
                tar.addfile(info)
    return uncompressed.digest, uncompressed.size


def canonical(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Blob:
    media_type: str
    digest: str
    size: int

    def descriptor(self, **extra: Any) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size, **extra}


def put(blobs: Path, media_type: str, content: bytes) -> Blob:
    digest = hashlib.sha256(content).hexdigest()
    (blobs / digest).write_bytes(content)
    return Blob(media_type, f"sha256:{digest}", len(content))


def image_config(args: argparse.Namespace, diff_id: str, created: str) -> dict[str, Any]:
    labels = {
        "org.opencontainers.image.title": "dra-networkplugins",
        "org.opencontainers.image.description": (
            "Node-local DRA NetworkPlugins: networkplugin-vf, -bond, -links, "
            "-coordinator and -ctl (the command picks the program)"
        ),
        "org.opencontainers.image.version": args.version,
        "org.opencontainers.image.revision": args.revision,
        "org.opencontainers.image.source": args.source,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.base.name": f"debian:{args.debian}-minbase (debootstrap)",
    }
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "author": "dra-networkplugins scripts/build-image",
        "config": {
            "User": args.user,
            "Env": [
                f"PATH={PATH}",
                "LANG=C.UTF-8",  # glibc's built-in locale: no locale data in the image
                "PYTHONUNBUFFERED=1",  # log lines reach the container's log at once
                # The root is read-only for the non-root user, and its bytecode is built in.
                "PYTHONDONTWRITEBYTECODE=1",
            ],
            "Cmd": ["networkplugin-ctl", "--help"],
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [
            {
                "created": created,
                "created_by": f"scripts/build-image (debootstrap {args.debian} minbase, python3, "
                f"dra-networkplugins {args.version} at {args.revision})",
            }
        ],
    }


def write_archive(layout: Path, archive: Path, epoch: int) -> None:
    """The layout as an OCI archive: a tar of its files, sorted and clamped like the layer."""
    with tarfile.open(archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in walk(layout):
            info = normalized(tar, path, path.relative_to(layout).as_posix(), epoch)
            info.uid = info.gid = 0
            if info.isreg():
                with path.open("rb") as content:
                    tar.addfile(info, content)
            else:
                tar.addfile(info)


def build(args: argparse.Namespace) -> dict[str, Any]:
    epoch: int = args.epoch
    created = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    layout: Path = args.layout
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    staging = blobs / "layer.partial"
    with staging.open("wb") as raw:
        compressed = HashingWriter(raw)
        # No file name and time 0 in the gzip header: the bytes depend on the tar alone.
        with gzip.GzipFile(
            filename="", mode="wb", compresslevel=GZIP_LEVEL, fileobj=compressed, mtime=0
        ) as stream:
            diff_id, tar_size = write_layer(args.root, epoch, stream)  # type: ignore[arg-type]
    layer = Blob(MEDIA_LAYER, compressed.digest, compressed.size)
    staging.rename(blobs / layer.digest.removeprefix("sha256:"))
    config = put(blobs, MEDIA_CONFIG, canonical(image_config(args, diff_id, created)))
    manifest_document = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": config.descriptor(),
        "layers": [layer.descriptor()],
        "annotations": {"org.opencontainers.image.created": created},
    }
    manifest = put(blobs, MEDIA_MANIFEST, canonical(manifest_document))
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            manifest.descriptor(
                annotations={
                    # the tag: podman load, skopeo's oci-archive:FILE:TAG
                    "org.opencontainers.image.ref.name": args.tag,
                    # the whole name: ctr images import names the image with it
                    "io.containerd.image.name": f"{args.repository}:{args.tag}",
                }
            )
        ],
    }
    (layout / "index.json").write_bytes(canonical(index))
    (layout / "oci-layout").write_bytes(canonical({"imageLayoutVersion": "1.0.0"}))
    write_archive(layout, args.archive, epoch)
    return {
        "digest": manifest.digest,
        "config_digest": config.digest,
        "layer_digest": layer.digest,
        "diff_id": diff_id,
        "layer_bytes": layer.size,
        "uncompressed_bytes": tar_size,
        "created": created,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="oci.py", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="the image's root filesystem")
    parser.add_argument("--epoch", type=int, required=True, help="SOURCE_DATE_EPOCH")
    parser.add_argument("--version", required=True)
    parser.add_argument("--revision", required=True, help="the git commit built")
    parser.add_argument("--source", required=True, help="the repository's URL")
    parser.add_argument("--debian", required=True, help="the Debian suite of the root")
    parser.add_argument("--user", required=True, help="the default user, uid:gid")
    parser.add_argument("--repository", required=True, help="the image's name in index.json")
    parser.add_argument("--tag", required=True, help="the image's tag in index.json")
    parser.add_argument("--layout", type=Path, required=True, help="a new directory")
    parser.add_argument("--archive", type=Path, required=True, help="the OCI archive to write")
    args = parser.parse_args(argv)
    if args.layout.exists():
        parser.error(f"--layout {args.layout} exists: it must be a new directory")
    print(json.dumps(build(args), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
