"""The pure pieces: tables, the module index doctor reads."""

from __future__ import annotations

import io
from pathlib import Path

from plugins.ctl._doctor import _module_index
from plugins.ctl._output import table


def test_table_aligns_columns_and_never_pads_the_last() -> None:
    out = io.StringIO()
    rows = [{"a": "x", "b": ["p", "q"], "c": ""}, {"a": "longer", "b": [], "c": "end"}]
    table(out, [("A", "a"), ("B", "b"), ("C", "c")], rows)
    assert out.getvalue().splitlines() == [
        "A       B    C",
        "x       p,q  -",
        "longer  -    end",
    ]


def test_module_index_reads_builtin_and_loadable(tmp_path: Path) -> None:
    assert _module_index(tmp_path) is None  # no module tree: cannot tell
    (tmp_path / "modules.builtin").write_text("kernel/drivers/net/veth.ko\n")
    (tmp_path / "modules.dep").write_text(
        "kernel/net/8021q/8021q.ko.xz: kernel/net/802/garp.ko.xz\n"
        "kernel/drivers/net/ipvlan/ipvlan.ko.xz:\n"
    )
    assert _module_index(tmp_path) == {
        "veth": "built in",
        "8021q": "loadable",
        "ipvlan": "loadable",
    }
