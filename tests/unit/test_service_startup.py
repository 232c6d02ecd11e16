"""Startup refusals of the real console entry: one line naming the path and the cause, exit 2.

Each test runs ``networkplugin-links --config FILE`` as a deployer would, with exactly
one thing wrong, and checks that nothing was created or changed: no socket directory,
no journal, every file left as it was.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from plugins.sdk.service import ServiceConfig, package_version

PROG = "networkplugin-links"
SCRIPT = Path(sys.executable).with_name(PROG)
REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534


@dataclass
class Deployment:
    """A deployment of one service: its config, token, socket and state directories (none created yet)."""

    root: Path
    sockets: Path
    config: Path
    token: Path
    state: Path
    kernel: str

    def write_config(self, **overrides: Any) -> None:
        data: dict[str, Any] = {
            "socketDir": str(self.sockets),
            "stateDir": str(self.state),
            "tokenFile": str(self.token),
            "kernel": self.kernel,
            "shutdownGraceSeconds": 5,
            # The rig keeps a run's temporary files on /dev/shm (harness.rig.scratch_root);
            # the tests of that refusal say False.
            "allowVolatileStateDir": True,
        }
        data.update(overrides)
        self.config.write_text(yaml.safe_dump({k: v for k, v in data.items() if v is not None}))

    def tree(self) -> dict[str, tuple[int, int, int, int]]:
        """Every path under the node with its mode, owner, size and mtime."""
        seen = {}
        for top in (self.root, self.sockets):
            if not os.path.lexists(top):
                continue
            for path in [top, *sorted(top.rglob("*"))]:
                st = path.lstat()
                seen[str(path)] = (st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns)
        return seen

    def refuse(self, *expected: str) -> str:
        """Run the service; it must refuse with one stderr line holding ``expected``."""
        assert SCRIPT.exists(), f"{SCRIPT} is not installed (uv sync)"
        before = self.tree()
        had_sockets = os.path.lexists(self.sockets)
        result = subprocess.run(
            [str(SCRIPT), "--config", str(self.config)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        lines = result.stderr.splitlines()
        assert result.returncode == 2, (result.returncode, result.stderr)
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"{PROG}: "), lines[0]
        for text in expected:
            assert text in lines[0], (text, lines[0])
        assert result.stdout == ""
        if not had_sockets:
            assert not os.path.lexists(self.sockets), "a socket directory was created"
        assert self.tree() == before, "a file was created or changed"
        return lines[0]


@pytest.fixture
def node(tmp_path: Path, kernel_url: str) -> Iterator[Deployment]:
    sockets = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp")) / "sock"
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    token.chmod(0o600)
    n = Deployment(
        tmp_path, sockets, tmp_path / "service.yaml", token, tmp_path / "state", kernel_url
    )
    n.write_config()
    yield n
    shutil.rmtree(sockets.parent, ignore_errors=True)


def needs_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"needs root to {what}")


@contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    """A tiny tmpfs at ``path`` (root and a working mount(8) only)."""
    needs_root("mount a tmpfs")
    if shutil.which("mount") is None:
        pytest.skip("needs mount(8) to mount a tmpfs")
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {' '.join(done.stderr.split())}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


# -- the config -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"shutdownGraceSeconds": "soon"},
            '$.shutdownGraceSeconds: must be of type number or null, got string "soon" [type]',
        ),
        ({"shutdownGraceSeconds": -1}, "$.shutdownGraceSeconds: must be >= 0, got -1 [range]"),
        ({"shutdownGraceSeconds": True}, "$.shutdownGraceSeconds: must be of type number"),
        ({"runtimeDir": 7}, "$.runtimeDir: must be of type string or null, got integer 7 [type]"),
        ({"stateDirectory": "/x"}, "$.stateDirectory: unknown key 'stateDirectory' [unknown-key]"),
        ({"tokenFile": None}, "$.tokenFile: missing required field 'tokenFile' [required]"),
        (
            {"kernel": "", "bootId": 3},
            "$.bootId: must be of type string or null, got integer 3 [type]; $.kernel: ",
        ),
    ],
)
def test_a_bad_config_is_refused(node: Deployment, change: dict[str, Any], expected: str) -> None:
    node.write_config(**change)
    node.refuse(f"service config {node.config}: ", expected)


def test_a_config_that_is_not_yaml_is_refused(node: Deployment) -> None:
    node.config.write_text("socketDir: [unclosed\n")
    node.refuse(f"service config {node.config}: not valid YAML")


def test_a_config_with_a_duplicate_key_is_refused_with_its_place(node: Deployment) -> None:
    """PyYAML would keep the second value silently: the service must not guess."""
    text = node.config.read_text()
    node.config.write_text(text + "stateDir: /somewhere/else\n")
    line = len(text.splitlines()) + 1
    node.refuse(
        f"service config {node.config}: not valid YAML: duplicate key 'stateDir' (first at line ",
        f"(line {line}, column 1)",
    )


def test_a_config_with_an_alias_is_refused(node: Deployment) -> None:
    node.config.write_text(node.config.read_text() + "bootId: &b x\nextra: *b\n")
    node.refuse(f"service config {node.config}: not valid YAML: alias *b is not allowed")


def test_a_missing_config_is_refused(node: Deployment) -> None:
    node.config.unlink()
    node.refuse(f"service config {node.config}: No such file or directory (ENOENT)")


# -- the token --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spoil", "expected"),
    [
        (lambda p: p.unlink(), "does not exist"),
        (lambda p: p.chmod(0o644), "mode 0644 gives group/other access"),
        (lambda p: (p.unlink(), p.mkdir()), "is not a regular file"),
    ],
    ids=["missing", "group-readable", "directory"],
)
def test_an_unusable_token_file_is_refused(
    node: Deployment, spoil: Callable[[Path], object], expected: str
) -> None:
    spoil(node.token)
    node.refuse(f"token file {node.token}: {expected}")


# -- the kernel -------------------------------------------------------------------------------


def test_a_namespace_mount_that_does_not_exist_is_refused(node: Deployment) -> None:
    mount = node.root / "netns" / "host"  # docs/deploying.md: linux:///run/netns/host
    node.write_config(kernel=f"linux://{mount}")
    node.refuse(f"kernel linux://{mount}: {mount}: No such file or directory (ENOENT)")


def test_a_fake_kernel_socket_that_does_not_exist_is_refused(node: Deployment) -> None:
    socket = node.root / "kernel.sock"
    node.write_config(kernel=f"kernel+unix://{socket}")
    node.refuse(f"{socket}: No such file or directory (ENOENT)")


# -- the state directory ----------------------------------------------------------------------


def test_a_state_dir_that_is_a_file_is_refused(node: Deployment) -> None:
    node.state.write_text("")
    node.refuse(f"state directory {node.state}: exists and is not a directory")


def test_a_state_dir_under_a_file_is_refused(node: Deployment) -> None:
    (node.root / "file").write_text("")
    node.write_config(stateDir=str(node.root / "file" / "state"))
    node.refuse(f"state directory {node.root / 'file' / 'state'}: Not a directory (ENOTDIR)")


def test_a_group_accessible_state_dir_is_refused(node: Deployment) -> None:
    node.state.mkdir(mode=0o700)
    node.state.chmod(0o750)
    node.refuse(f"state directory {node.state}: mode 0750 gives group/other access")


def test_a_state_dir_of_another_owner_is_refused(node: Deployment) -> None:
    needs_root("chown")
    node.state.mkdir(mode=0o700)
    os.chown(node.state, NOBODY, NOBODY)
    node.refuse(
        f"state directory {node.state}: owned by uid {NOBODY}, not the service uid {os.geteuid()}"
    )


def test_a_state_dir_of_another_owner_and_a_wide_mode_names_both(node: Deployment) -> None:
    needs_root("chown")
    node.state.mkdir(mode=0o700)
    node.state.chmod(0o777)
    os.chown(node.state, NOBODY, NOBODY)
    node.refuse(f"owned by uid {NOBODY}, not the service uid {os.geteuid()}", "mode 0777")


def test_a_group_accessible_socket_dir_is_refused(node: Deployment) -> None:
    node.sockets.mkdir(mode=0o700)
    node.sockets.chmod(0o755)
    node.refuse(f"socket directory {node.sockets}: mode 0755 gives group/other access")


def test_a_socket_dir_of_another_owner_is_refused(node: Deployment) -> None:
    needs_root("chown")
    node.sockets.mkdir(mode=0o700)
    os.chown(node.sockets, NOBODY, NOBODY)
    node.refuse(f"socket directory {node.sockets}: owned by uid {NOBODY}")


def test_a_world_writable_runtime_dir_is_refused(node: Deployment) -> None:
    runtime = node.root / "run"
    runtime.mkdir(mode=0o700)
    runtime.chmod(0o1777)
    node.write_config(runtimeDir=str(runtime))
    node.refuse(f"runtime directory {runtime}: mode 1777 gives group/other access")


def test_a_read_only_state_dir_is_refused(node: Deployment) -> None:
    # A tmpfs is a small file system to fill or mount read-only (the config allows a
    # journal on one, which would be refused otherwise).
    with tmpfs(node.state, "ro,mode=0700,size=64k"):
        node.refuse(f"state directory {node.state}: ", "Read-only file system (EROFS)")


def test_a_full_state_dir_is_refused(node: Deployment) -> None:
    # nr_inodes=1: the root inode is the only one; no journal file fits.
    with tmpfs(node.state, "mode=0700,size=4k,nr_inodes=1"):
        node.refuse(f"state directory {node.state}: ", "No space left on device (ENOSPC)")


def test_a_state_dir_whose_parent_is_missing_is_refused(node: Deployment) -> None:
    """A mistyped parent would start an empty journal beside the real one."""
    state = node.root / "mistyped" / "state"
    node.write_config(stateDir=str(state))
    node.refuse(
        f"state directory {state}: its parent {state.parent} does not exist",
        "start once with --init to create a new one",
    )


def test_init_creates_a_state_dir_whose_parent_is_missing(node: Deployment) -> None:
    state = node.root / "new" / "state"
    node.write_config(stateDir=str(state))
    lines = _serve_then_stop(node, "--init")
    assert "Traceback" not in "\n".join(lines)
    assert (state / "journal.db").is_file()
    assert stat.S_IMODE(state.stat().st_mode) == 0o700


def test_a_state_dir_on_a_tmpfs_is_refused(node: Deployment) -> None:
    with tmpfs(node.root / "ram", "mode=0700,size=1m") as ram:
        node.write_config(stateDir=str(ram / "state"), allowVolatileStateDir=False)
        node.refuse(
            f"state directory {ram / 'state'}: on a tmpfs mounted at {ram}, which is emptied "
            "at every boot"
        )
        (ram / "state").mkdir(mode=0o700)  # an existing one is refused as well
        node.refuse(f"state directory {ram / 'state'}: on a tmpfs mounted at {ram}")


def test_a_state_dir_under_run_is_refused(node: Deployment) -> None:
    # Under a symlink into /run: the path the directory resolves to is what counts. Nothing
    # is created in /run (the refusal comes first).
    link = node.root / "var-run"
    link.symlink_to("/run")
    state = link / "dra-networkplugins-test-h4" / "state"
    node.write_config(stateDir=str(state), allowVolatileStateDir=False)
    node.refuse(
        f"state directory {state}: under /run (/run/dra-networkplugins-test-h4/state), "
        "which is emptied at every boot"
    )
    assert not Path("/run/dra-networkplugins-test-h4").exists()


# -- the endpoints ----------------------------------------------------------------------------


def test_a_socket_path_too_long_to_bind_is_refused_before_anything_is_created(
    node: Deployment,
) -> None:
    # macvlan.sock, the links service's longest name, passes 97 bytes; vlan.sock fits.
    sockets = Path("/tmp") / ("s" * (97 - len("/tmp/") - len("/macvlan.sock") + 1))
    assert len(str(sockets / "vlan.sock")) <= 97 < len(str(sockets / "macvlan.sock"))
    node.sockets = sockets
    node.write_config(socketDir=str(sockets), metrics={"textfile": str(node.root / "m.prom")})
    node.refuse(
        f"socket directory {sockets}: socket path {sockets / 'macvlan.sock'} is 98 bytes; "
        "at most 97 fit"
    )
    assert not node.state.exists()


# -- paths that are not paths -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("socketDir", "/run/dra-networkplugins/links-${ARTIFACT_ID}"),
        ("stateDir", "${STATE_DIRECTORY}"),
        ("tokenFile", "${CREDENTIALS_DIRECTORY}/token"),
        ("runtimeDir", "/run/${NAME}"),
        ("kernel", "linux:///run/netns/${NETNS}"),
        ("metrics.textfile", "/var/lib/node_exporter/${NAME}.prom"),
    ],
)
def test_an_unexpanded_variable_in_a_path_is_refused(
    node: Deployment, key: str, value: str
) -> None:
    if key == "metrics.textfile":
        node.write_config(metrics={"textfile": value})
    else:
        node.write_config(**{key: value})
    node.refuse(
        f"service config {node.config}: $.{key}: {value!r} holds an unexpanded ${{...}}: "
        "the service expands no variables"
    )


# -- the runtime directory ---------------------------------------------------------------------


def test_runtime_dir_defaults_to_the_socket_dir_and_resolves_like_the_others(
    tmp_path: Path,
) -> None:
    config = tmp_path / "service.yaml"
    base = {
        "socketDir": "sock",
        "stateDir": "state",
        "tokenFile": "token",
        "kernel": "kernel+unix:///k",
    }
    config.write_text(yaml.safe_dump(base))
    assert ServiceConfig.load(config).runtime_dir == tmp_path / "sock"
    config.write_text(yaml.safe_dump({**base, "runtimeDir": "run/links"}))
    assert ServiceConfig.load(config).runtime_dir == tmp_path / "run" / "links"
    config.write_text(yaml.safe_dump({**base, "runtimeDir": "/run/networkplugin/links"}))
    assert ServiceConfig.load(config).runtime_dir == Path("/run/networkplugin/links")


def test_the_journal_lease_is_kept_in_the_runtime_dir(node: Deployment) -> None:
    runtime = node.root / "run" / "links"
    node.write_config(runtimeDir=str(runtime))
    lines = _serve_then_stop(node)
    assert "Traceback" not in "\n".join(lines)
    assert [p.suffix for p in runtime.iterdir()] == [".lease"]
    assert not [p for p in node.sockets.iterdir() if p.suffix == ".lease"]


# -- not a refusal: a damaged journal ---------------------------------------------------------


def test_a_damaged_journal_is_one_log_line_and_the_service_serves(node: Deployment) -> None:
    node.state.mkdir(mode=0o700)
    (node.state / "journal.id").write_text("not a journal id\n")
    (node.state / "journal.db").write_bytes(b"garbage" * 100)
    lines = _serve_then_stop(node)
    text = "\n".join(lines)
    assert "Traceback" not in text, text
    about = [line for line in lines if str(node.state) in line]
    assert len(about) == 1, text
    assert " ERROR " in about[0], about
    assert "journal" in about[0], about


def _serve_then_stop(node: Deployment, *options: str) -> list[str]:
    """Start the service, wait until it logs that it serves, SIGTERM it: its log lines."""
    proc = subprocess.Popen(
        [str(SCRIPT), "--config", str(node.config), *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        lines = _read_until(proc.stderr, b" INFO plugins.sdk.service: serving ", deadline_s=60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        lines += proc.stderr.read().decode().splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        proc.stderr.close()
    return lines


def _read_until(stream: Any, marker: bytes, deadline_s: float) -> list[str]:
    """Lines read from ``stream`` up to and including the one holding ``marker``."""
    deadline = time.monotonic() + deadline_s
    seen = b""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        while marker not in seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no {marker!r} within {deadline_s}s: {seen.decode()}"
            if sel.select(left):
                chunk = os.read(stream.fileno(), 65536)
                assert chunk, f"exited before {marker!r}: {seen.decode()}"
                seen += chunk
    return seen.decode().splitlines()


# -- --version --------------------------------------------------------------------------------


PARSE_WITHOUT_VERSION = """
import sys
import plugins.coordinator, plugins.kernel.linux, plugins.services
from plugins.sdk.service import program_arguments
program_arguments("p", "d").parse_args(["--config", "c"])
print("importlib.metadata" in sys.modules)
"""


def test_a_program_reads_its_version_only_when_asked() -> None:
    """P8 (docs/benchmarks.md): the version comes from the distribution's metadata, whose
    reader (``importlib.metadata``, with ``email`` and ``zipfile``) is ~1.6 MB of a running
    service on linux://. Building and parsing the command line must not import it; the
    ``--version`` test below shows the same option still answers."""
    out = subprocess.run(
        [sys.executable, "-c", PARSE_WITHOUT_VERSION],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert out == "False\n", "importlib.metadata was imported without --version"
    asked = PARSE_WITHOUT_VERSION.replace('"--config", "c"', '"--version"')
    result = subprocess.run(
        [sys.executable, "-c", asked],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, f"p {package_version()}\n")


@pytest.mark.parametrize(
    "program", ["networkplugin-vf", "networkplugin-bond", "networkplugin-links"]
)
def test_version_prints_the_package_version(program: str) -> None:
    from importlib.metadata import version

    result = subprocess.run(
        [str(SCRIPT.with_name(program)), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"{program} {version('dra-networkplugins')}\n"
