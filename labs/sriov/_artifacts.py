"""What provisioning copies to a host: this checkout's two wheels and an offline wheelhouse.

The wheels are built from the working tree (``uv build --wheel``; hatchling's builds are
reproducible, so an unchanged tree gives the same bytes and a host already holding them
is left alone): the product's, which the host's services run, and the test kit's, whose
kernel agent (``labs.kernel_agent``) serves the rig and whose crash launcher
(``labs.crashing_service``) runs the services armed when the rig runs them on the host.
The kit is installed without its own dependencies (pytest, Ansible: the controller's),
for the modules a host runs import the product's alone. The wheelhouse holds the locked runtime dependencies as binary wheels for
the host's Python on manylinux x86_64, and pip's own wheel (a Debian python3 has no
ensurepip); it is downloaded once per lock file and Python version, then cached.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CACHE_DIR", "Distribution", "DistributionError", "build_distribution"]

REPO = Path(__file__).resolve().parents[2]
CACHE_DIR = Path.home() / ".cache" / "dranp-sriov-lab"
ARCHIVE = "dist.tar"
KIT = "dra-networkplugins-testkit"  # the test kit's distribution (testkit/pyproject.toml)
# Every manylinux tag a Debian 12 (glibc 2.36) host accepts that the locked wheels use.
PLATFORMS = (
    "manylinux2014_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_34_x86_64",
)


class DistributionError(RuntimeError):
    """The wheel or the wheelhouse could not be made: one line saying which and why."""


@dataclass(frozen=True)
class Distribution:
    """A directory holding ``ARCHIVE``: ``wheel`` (the product), ``kit_wheel`` (the test
    kit), ``requirements.txt`` and ``wheelhouse/``."""

    directory: Path
    wheel: str
    kit_wheel: str
    digest: str  # of the wheels and the requirements: what a host records as installed


def _uv() -> str:
    found = shutil.which("uv") or shutil.which("uv", path=str(Path.home() / ".local" / "bin"))
    if found is None:
        raise DistributionError("uv is not installed (scripts/_bootstrap.sh installs it)")
    return found


def _run(what: str, command: list[str], cwd: Path = REPO) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise DistributionError(f"{what}: exit status {done.returncode}: {last}")
    return done.stdout


def _requirements() -> str:
    return _run(
        "uv export",
        [_uv(), "export", "--frozen", "--no-dev", "--no-hashes", "--no-emit-project"],
    )


def _wheelhouse(python: str, requirements: str, cache: Path) -> Path:
    key = hashlib.sha256("\n".join([python, *PLATFORMS, requirements]).encode()).hexdigest()[:16]
    target = cache / f"wheelhouse-py{python}-{key}"
    if target.is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as staging:
        listed = Path(staging) / "requirements.txt"
        listed.write_text(requirements)
        wheels = Path(staging) / "wheels"
        platforms = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
        _run(
            f"downloading the wheelhouse for Python {python}",
            [
                *(_uv(), "tool", "run", "pip", "download", "--quiet"),
                *("--only-binary=:all:", "--implementation", "cp", "--python-version", python),
                *platforms,
                *("--dest", str(wheels), "--requirement", str(listed), "pip"),
            ],
        )
        # Renamed whole: a cached wheelhouse is complete or absent.
        _publish(wheels, target, target.is_dir)
    return target


def _publish(staged: Path, target: Path, complete: Callable[[], bool]) -> None:
    """Rename ``staged`` to ``target``; a run beside this one that published the same
    thing first (the rename finds a full directory there) is as good as our own."""
    try:
        os.replace(staged, target)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not complete():
            raise


def _archive(sources: dict[str, Path], target: Path) -> None:
    """``target``: an uncompressed tar of ``sources`` (name in the archive -> file), the
    same bytes for the same files (sorted, no times or owners): Ansible copies one file
    (a round trip per file of a wheelhouse costs minutes under TCG), and an unchanged
    build is an unchanged file on the host."""

    def plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        return info

    with tarfile.open(target, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(sources):
            tar.add(sources[name], arcname=name, filter=plain)


def build_distribution(python: str = "3.11", cache: Path = CACHE_DIR) -> Distribution:
    """The wheels of this checkout and their wheelhouse for ``python``, in one archive."""
    requirements = _requirements()
    wheelhouse = _wheelhouse(python, requirements, cache)
    with tempfile.TemporaryDirectory(dir=cache) as staging:
        built = Path(staging) / "wheels"
        build = [_uv(), "build", "--wheel", "--quiet", "--out-dir", str(built)]
        _run("uv build --wheel", build)
        _run(f"uv build --wheel --package {KIT}", [*build, "--package", KIT])
        (kit,) = built.glob(f"{KIT.replace('-', '_')}-*.whl")
        (wheel,) = (w for w in built.glob("*.whl") if w != kit)
        digest = hashlib.sha256(
            wheel.read_bytes() + kit.read_bytes() + requirements.encode()
        ).hexdigest()
        target = cache / f"dist-py{python}-{digest[:16]}"
        if not (target / ARCHIVE).is_file():
            listed = Path(staging) / "requirements.txt"
            listed.write_text(requirements)
            sources = {wheel.name: wheel, kit.name: kit, "requirements.txt": listed}
            sources |= {f"wheelhouse/{p.name}": p for p in wheelhouse.iterdir()}
            assembling = Path(staging) / "dist"
            assembling.mkdir()
            _archive(sources, assembling / ARCHIVE)
            if not (target / ARCHIVE).is_file():
                shutil.rmtree(target, ignore_errors=True)  # an older layout, or a partial one
            _publish(assembling, target, (target / ARCHIVE).is_file)
    return Distribution(target, wheel.name, kit.name, digest)
