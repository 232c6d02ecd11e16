"""``doctor``: what a service needs from the node, checked without changing anything.

Sockets (there, a socket, mode, answering GetInfo with the token and ready), the socket
directory's mode and owner, the token file (the service's own rules, ``read_token``),
the journal (the service's own checks on a private copy), the versions (store format,
effect format, topology config: one line, docs/file-formats.md "Versions"), the kernel
(reachable), its modules (``linux://`` only: the link kinds each service creates) and
the SR-IOV PFs' VF counts and drivers (the VF service).
"""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from plugins.kernel import Kernel
from plugins.sdk import EndpointInfo, NetworkPluginError
from plugins.sdk.host import PluginCallError, PluginClient, read_token
from plugins.sdk.store import PLUGIN_JOURNAL

from ._contents import read_contents
from ._errors import CtlError, failed_call
from ._journal import snapshot
from ._node import Service
from ._reconcile import with_kernel

OK, WARN, FAIL = "ok", "warn", "fail"
MODULES: Final = {
    "networkplugin-links": ("8021q", "macvlan", "ipvlan"),
    "networkplugin-bond": ("bonding",),
    "networkplugin-vf": (),
}
"""The kernel modules of the link kinds each service creates."""
SYS_MODULE: Final = Path("/sys/module")
MODULE_TREE: Final = Path("/lib/modules")
SYS_PCI: Final = Path("/sys/bus/pci/devices")
GETINFO_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True)
class Check:
    check: str
    subject: str
    status: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def _mode_problems(st: os.stat_result, wanted: int) -> list[str]:
    problems = []
    if st.st_uid != os.geteuid():
        problems.append(f"owned by uid {st.st_uid}, not {os.geteuid()}")
    if stat.S_IMODE(st.st_mode) & ~wanted:
        problems.append(f"mode {stat.S_IMODE(st.st_mode):04o}, wider than {wanted:04o}")
    return problems


def _socket_dir(service: Service) -> Check:
    path = service.config.socket_dir
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError as exc:
        return Check("socket-dir", str(path), FAIL, exc.strerror or str(exc))
    if not stat.S_ISDIR(st.st_mode):
        return Check("socket-dir", str(path), FAIL, "not a directory")
    problems = _mode_problems(st, 0o700)
    detail = "; ".join(problems) or f"mode {stat.S_IMODE(st.st_mode):04o}"
    return Check("socket-dir", str(path), FAIL if problems else OK, detail)


def _sockets(service: Service, token: str | None) -> tuple[list[Check], list[EndpointInfo]]:
    """A check per socket, and what each socket that answered GetInfo said."""
    checks = []
    infos: list[EndpointInfo] = []
    for reg in service.registrations:
        path = service.socket(reg)
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError as exc:
            checks.append(Check("socket", str(path), FAIL, f"{exc.strerror} (service down?)"))
            continue
        if not stat.S_ISSOCK(st.st_mode):
            checks.append(Check("socket", str(path), FAIL, "not a Unix socket"))
            continue
        problems = _mode_problems(st, 0o600)
        if token is None:
            problems.append("not asked: no usable token")
        else:
            problems += _answers(path, token, reg.name, infos)
        mode = f"mode {stat.S_IMODE(st.st_mode):04o}"
        checks.append(
            Check("socket", str(path), FAIL if problems else OK, "; ".join(problems) or mode)
        )
    return checks, infos


def _answers(path: Path, token: str, plugin: str, infos: list[EndpointInfo]) -> list[str]:
    try:
        with PluginClient(path, token, timeout=GETINFO_TIMEOUT_S) as client:
            info = client.get_info()
    except PluginCallError as exc:
        _, words = failed_call(exc.code, exc.message, peer="service", timeout_s=GETINFO_TIMEOUT_S)
        return [f"GetInfo: {words}"]
    infos.append(info)
    problems = []
    if info.plugin_name != plugin:
        problems.append(f"answers as plugin {info.plugin_name!r}, not {plugin!r}")
    if not info.ready:
        problems.append(f"not ready{': ' + info.fault if info.fault else ''}")
    return problems


def _token(service: Service) -> tuple[Check, str | None]:
    path = service.config.token_file
    try:
        token = read_token(path)
    except NetworkPluginError as exc:
        return Check("token", str(path), FAIL, exc.message), None
    return Check("token", str(path), OK, "regular file, owner only"), token


def _journal(service: Service) -> tuple[Check, tuple[int, tuple[int, ...]] | None]:
    """The journal check, and the store and effect formats its copy was found at."""
    subject = str(service.config.state_dir)
    try:
        with snapshot(service) as snap:
            found = snap.store.found_formats
            contents = read_contents(snap)
    except CtlError as exc:
        return Check("journal", subject, FAIL, exc.reason), None
    how = "service running" if contents.live else "service down"
    detail = f"intact, {len(contents.operations)} operations ({how})"
    return Check("journal", subject, OK, detail), found


def _formats(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values)) or "-"


def _versions(
    service: Service, infos: list[EndpointInfo], found: tuple[int, tuple[int, ...]] | None
) -> Check:
    """The three versions on one line: the running service's word (GetInfo) when a socket
    answered (during an upgrade it may be another build than this CLI's), else the
    journal's as found and this CLI's build (the release the service runs from)."""
    if infos:
        info = infos[0]
        store, held = info.store_format, info.journal_effect_formats
        readable, executable = info.readable_store_formats, info.executable_effect_formats
        writes = info.effect_format
        configs = [i.topology_config_version for i in infos]
        source = "GetInfo"
    else:
        store, held = found if found is not None else (0, ())
        readable, executable = PLUGIN_JOURNAL.readable, PLUGIN_JOURNAL.effect_formats
        writes = PLUGIN_JOURNAL.effect_format
        configs = [reg.descriptor.config_schema_id for reg in service.registrations]
        source = "journal and this build: no socket answered"
    detail = (
        f"store format {store or '-'} (reads {_formats(readable)}); "
        f"effect format {writes} (journal holds {_formats(held)}; executes "
        f"{_formats(executable)}); topology config {', '.join(configs) or '-'} ({source})"
    )
    unknown = [f for f in held if f not in executable]
    if (store and store not in readable) or unknown:
        return Check("versions", service.name, FAIL, detail)
    if not store:
        return Check("versions", service.name, WARN, detail + "; no journal to read")
    return Check("versions", service.name, OK, detail)


def _modules(service: Service) -> list[Check]:
    if urlsplit(service.config.kernel).scheme != "linux":
        return []
    tree = MODULE_TREE / os.uname().release
    known = _module_index(tree)
    checks = []
    for module in MODULES.get(service.name, ()):
        if (SYS_MODULE / module).is_dir():
            checks.append(Check("module", module, OK, "loaded"))
        elif known is None:
            # /sys/module lists a built-in module only when it has parameters.
            detail = f"not loaded, and {tree} is missing: built in or absent, cannot tell"
            checks.append(Check("module", module, WARN, detail))
        elif module in known:
            checks.append(Check("module", module, OK, f"{known[module]} (loaded on first use)"))
        else:
            checks.append(Check("module", module, FAIL, f"neither loaded nor in {tree}"))
    return checks


def _module_index(tree: Path) -> dict[str, str] | None:
    """Module name -> "built in" or "loadable", from the release's module tree (None: none)."""
    index: dict[str, str] = {}
    found = False
    for name, how in (("modules.builtin", "built in"), ("modules.dep", "loadable")):
        try:
            text = (tree / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found = True
        for line in text.splitlines():
            path = line.split(":", 1)[0]
            module = os.path.basename(path).split(".ko", 1)[0].replace("-", "_")
            index.setdefault(module, how)
    return index if found else None


def _driver(pci: str | None) -> str:
    if not pci:
        return "-"
    link = SYS_PCI / pci / "driver"
    try:
        return os.path.basename(os.readlink(link))
    except OSError:
        return "-"


def _vfs(kernel: Kernel) -> list[Check]:
    host = kernel.host_namespace()
    checks = []
    links = kernel.list_links(host)
    for pf in links:
        if pf.kind != "device" or pf.vf_of is not None or not pf.pci_address:
            continue
        vfs = kernel.get_vfs(host, pf.ifindex)
        if not vfs:
            continue
        drivers = sorted(
            {_driver(vf.pci_address) for vf in links if vf.vf_of and vf.vf_of[0] == pf.pci_address}
        )
        detail = f"{len(vfs)} VFs, PF driver {_driver(pf.pci_address)}, VF drivers {','.join(drivers) or '-'}"
        checks.append(Check("vfs", f"{pf.name} ({pf.pci_address})", OK, detail))
    return checks or [Check("vfs", "host namespace", WARN, "no PF with VFs")]


def _kernel(service: Service) -> list[Check]:
    url = service.config.kernel

    def look(kernel: Kernel) -> list[Check]:
        found = [Check("kernel", url, OK, f"{len(kernel.list_namespaces())} namespaces")]
        if service.name == "networkplugin-vf":
            found += _vfs(kernel)
        return found

    try:
        return with_kernel(url, look)
    except CtlError as exc:
        return [Check("kernel", url, FAIL, exc.reason)]


def doctor(services: tuple[Service, ...]) -> list[dict[str, str]]:
    """Every check of every service, in a fixed order; nothing is created or changed."""
    rows = []
    for service in services:
        token_check, token = _token(service)
        sockets, infos = _sockets(service, token)
        journal, found = _journal(service)
        checks = [
            _socket_dir(service),
            *sockets,
            token_check,
            journal,
            _versions(service, infos, found),
            *_kernel(service),
            *_modules(service),
        ]
        rows += [{"service": service.name, **c.to_json()} for c in checks]
    return rows
