"""scripts/bench's page: the summaries, the results file's codec, the table and the splice.

The splice is the part that can do harm: docs/benchmarks.md is written by hand outside
the markers, by other people, and a run must change nothing there.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    """The two plotting-free modules, imported from scripts/ for this test only."""
    import importlib

    monkeypatch.syspath_prepend(str(SCRIPTS))
    common = importlib.import_module("_bench_common")
    table = importlib.import_module("_bench_table")
    return common, table


def outcomes(common: ModuleType) -> list[object]:
    c = common
    ours, peer = c.stat([10.0, 12.0, 30.0], "ms"), c.stat([20.0, 21.0, 22.0], "ms")
    row = c.Row("P1", "attach+detach", ours, "CNI", peer, c.ratio(ours, peer), "<= 0.8x", True)
    curve = c.Curve("scaling", "t", "x", "y", [1.0, 2.0], {"ours": [3.0, 4.0]})
    return [
        c.Outcome("P1", "macvlan", [row], {"ours": [10.0, 12.0, 30.0]}, curves=[curve]),
        c.Outcome("P4", "the rig", skipped="not asked for in this run"),
    ]


def test_stat_median_and_p90_stay_inside_the_samples(bench: tuple[ModuleType, ModuleType]) -> None:
    common, _ = bench
    s = common.stat([float(v) for v in range(1, 11)], "ms")
    assert (s.median, s.n, s.unit) == (5.5, 10, "ms")
    assert 9.0 <= s.p90 <= 10.0
    assert common.stat([7.0], "s").p90 == 7.0
    with pytest.raises(ValueError, match="no samples"):
        common.stat([], "ms")


def test_outcomes_survive_the_results_file(bench: tuple[ModuleType, ModuleType]) -> None:
    common, _ = bench
    for outcome in outcomes(common):
        text = json.dumps(common.outcome_to_json(outcome))
        assert common.outcome_from_json(json.loads(text)) == outcome


def test_the_table_gives_every_goal_a_verdict_or_why_it_did_not_run(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    common, table = bench
    lines = table.table(outcomes(common))
    (p1,) = [line for line in lines if line.startswith("| P1 |")]
    assert "12.00 (" in p1  # median (p90)
    assert "0.57x" in p1  # 12 / 21
    assert p1.endswith("| met |")
    (p4,) = [line for line in lines if line.startswith("| P4 |")]
    assert "skipped: not asked for in this run" in p4


PAGE = """# Benchmarks

Intro written by hand.

## A hand-written section

Its text.
"""


def test_splice_inserts_near_the_top_then_replaces_only_the_section(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    _, table = bench
    first = table.splice(PAGE, f"{table.BEGIN}\nrun one\n{table.END}")
    assert first.index("Intro written by hand.") < first.index("run one")
    assert first.index("run one") < first.index("## A hand-written section")
    second = table.splice(first, f"{table.BEGIN}\nrun two\n{table.END}")
    assert "run one" not in second
    assert second.replace("run two", "run one") == first
    assert second.count(table.BEGIN) == 1


def test_a_row_that_did_not_run_inside_a_run_outcome_says_why(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    """P7's VF row: the outcome ran, one of its rows did not; the reason is its text."""
    common, table = bench
    ran = common.Row("P7", "macvlan", common.stat([5.0, 6.0], "ms"), "CNI ADD",
                     common.stat([2.0, 3.0], "ms"), 2.2)  # fmt: skip
    not_run = common.Row("P7", "a VF: skipped: no guest", None)
    outcome = common.Outcome("P7", "readiness", [ran, not_run], {"ours": [5.0, 6.0]})
    assert (
        common.outcome_from_json(json.loads(json.dumps(common.outcome_to_json(outcome)))) == outcome
    )
    (vf,) = [line for line in table.table([outcome]) if "a VF" in line]
    assert vf == "| P7 | a VF: skipped: no guest | - | - | - | - | - | - |"
