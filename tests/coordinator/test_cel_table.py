"""The shipped CEL parser (plugins/coordinator/cel_parser.pickle) is the one celpy builds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lark
import pytest

from plugins.coordinator import _cel_table

EXPRESSIONS = (
    'device.attributes["dra.networking"].type == "vf"',
    'has(device.attributes["dra.networking"].pfName) && device.capacity["x"].macvlans >= 2',
    "!(a || b) ? [1, 2u, 3.5, -4][0] : {'k': b'\\x00', \"m\": r'raw'}['k'].size()",
    'x.y(1, z) in [true, false, null] || """multi\nline""".startsWith("m")',
    "a.b{c: 1, d: 2}.e % 3 / 4 * 5 - 6 + 7 < 8 <= 9 > 10 >= 11 != 12",
)
BAD = ("a +", "(", "a b", "1 ? 2", "{1: }", "x.", "'unterminated", "a[1", "f(,)")


@pytest.fixture(scope="module")
def parsers() -> tuple[lark.Lark, lark.Lark]:
    """The shipped parser and one celpy builds now, as it does without the table."""
    shipped = _cel_table.load()
    assert shipped is not None, (
        f"{_cel_table.TABLE} is missing or was built from another celpy or lark: regenerate it "
        "(plugins/coordinator/_cel_table.py says how)"
    )
    return shipped, _cel_table.build()


def _terminal(t: Any) -> tuple[object, ...]:
    return (t.name, t.priority, type(t.pattern), t.pattern.value, frozenset(t.pattern.flags))


def _state(state: Any) -> frozenset[str]:
    return frozenset(map(repr, state))


def _table(table: Any) -> tuple[object, ...]:
    """A parse table with each state (a set of LR items) as the set of its items' texts, and
    each rule as its text: a loaded rule's name is a str where a fresh build's is a lark
    Token (a str, equal to it), as with lark's own cache."""
    states = {
        _state(state): {
            token: (str(action), _state(arg) if str(action) == "Shift" else str(arg))
            for token, (action, arg) in actions.items()
        }
        for state, actions in table.states.items()
    }
    ends = {start: _state(state) for start, state in table.end_states.items()}
    starts = {start: _state(state) for start, state in table.start_states.items()}
    return states, starts, ends


def _outcome(parser: lark.Lark, text: str) -> object:
    """The tree, or the error: its type, position, and message with its lines as a set (the
    expected tokens are listed from a set: their order varies between any two builds)."""
    try:
        return parser.parse(text)
    except lark.exceptions.LarkError as exc:
        where = (getattr(exc, "line", None), getattr(exc, "column", None))
        return (type(exc).__name__, where, frozenset(str(exc).splitlines()))


def test_the_table_has_celpys_options_and_tables(parsers: tuple[lark.Lark, lark.Lark]) -> None:
    shipped, built = parsers
    assert shipped.options.options == built.options.options
    assert [_terminal(t) for t in shipped.terminals] == [_terminal(t) for t in built.terminals]
    assert shipped.rules == built.rules
    tables = [_table(p.parser.parser.parser.parse_table) for p in (shipped, built)]
    assert tables[0] == tables[1]


@pytest.mark.parametrize("text", EXPRESSIONS + BAD)
def test_the_table_parses_as_celpy_does(parsers: tuple[lark.Lark, lark.Lark], text: str) -> None:
    shipped, built = parsers
    assert _outcome(shipped, text) == _outcome(built, text)


def test_a_stale_table_is_not_used(tmp_path: Path) -> None:
    stale = tmp_path / "cel_parser.pickle"
    stale.write_bytes(b"0" * 64 + b"\n" + _cel_table.TABLE.read_bytes().partition(b"\n")[2])
    assert _cel_table.load(stale) is None
    assert _cel_table.load(tmp_path / "missing") is None
