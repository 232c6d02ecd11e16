"""celpy's CEL parser with its LALR(1) tables computed once, when this artifact is built.

celpy builds one lark parser from its CEL grammar the first time an ``Environment`` is
made; computing the tables was ~0.2 s of CPU (of ~0.55 s) at each start of the
coordinator, whose topologies' selectors are compiled before it is ready, and in every
process that compiles a selector. ``cel_parser.pickle`` holds that very parser as lark's
own cache stores one (``Lark.save``, without the options a load is given), after a line
naming what it was built from: lark's version, celpy's grammar and parser module, and the
Python version. ``install`` puts it in celpy's one parser slot when that line matches what
is installed; otherwise (or if it cannot be read) celpy builds its own, as it always did.

Regenerate after upgrading celpy or lark (tests/coordinator/test_cel_table.py fails until
then): ``python -c 'from plugins.coordinator._cel_table import write; write()'``.
What it buys today: docs/benchmarks.md, "Tricks kept and removed".
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from typing import Any

import celpy
import lark
from celpy.celparser import CELParser

__all__ = ["TABLE", "build", "install", "load", "stamp", "write"]

TABLE = Path(__file__).with_name("cel_parser.pickle")
_GRAMMAR = Path(celpy.celparser.__file__).with_name("cel.lark")


def stamp() -> str:
    """What a table is valid for: lark's version, celpy's grammar and parser, Python's."""
    h = hashlib.sha256()
    for part in (
        lark.__version__.encode(),
        _GRAMMAR.read_bytes(),
        Path(celpy.celparser.__file__).read_bytes(),
        f"{sys.version_info[0]}.{sys.version_info[1]}".encode(),
    ):
        h.update(part + b"\0")
    return h.hexdigest()


def _load_options() -> dict[str, Any]:
    """The options ``CELParser.__init__`` gives lark that a saved parser does not keep
    (lark's ``_LOAD_ALLOWED_OPTIONS``), as celpy gives them for ``celpy.Environment()``."""
    return {
        "debug": True,
        "g_regex_flags": re.M,
        "lexer_callbacks": {"IDENT": CELParser.ambiguous_literals},
        "propagate_positions": True,
        "tree_class": celpy.InterpretedRunner.tree_node_class,
    }


def load(path: Path = TABLE) -> lark.Lark | None:
    """The parser saved at ``path`` if it was built from what is installed, else None."""
    try:
        with path.open("rb") as f:
            if f.readline().decode().strip() != stamp():
                return None
            # lark's cache loads its parser this way (lark.Lark.__init__ with cache=...).
            return lark.Lark.__new__(lark.Lark)._load(f, **_load_options())
    except Exception:  # unreadable or from another lark: celpy builds its own parser
        return None


def install() -> None:
    """Give celpy the saved parser, unless it already has one (or the table is stale)."""
    if CELParser.CEL_PARSER is None:
        CELParser.CEL_PARSER = load()


def build() -> lark.Lark:
    """A parser built now as celpy builds its own (``celpy.Environment()``), leaving
    celpy's parser slot as it was."""
    saved, CELParser.CEL_PARSER = CELParser.CEL_PARSER, None
    try:
        CELParser(tree_class=celpy.InterpretedRunner.tree_node_class)
        built = CELParser.CEL_PARSER
        assert built is not None
        return built
    finally:
        CELParser.CEL_PARSER = saved


def write(path: Path = TABLE) -> None:
    """Build celpy's parser as celpy does and save it, stamped, at ``path``."""
    from lark.lark import _LOAD_ALLOWED_OPTIONS

    built = build()
    with path.open("wb") as f:
        f.write(stamp().encode() + b"\n")
        built.save(f, exclude_options=_LOAD_ALLOWED_OPTIONS)
