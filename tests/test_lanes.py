"""``make test``'s pytest runs, read from the Makefile: together they run every collected test, each once.

The rest lane is two runs side by side, split by a marker expression (docs/testing.md); a test that matched
neither expression would silently never run, and one that matched both would run twice.
"""

from __future__ import annotations

import re
from pathlib import Path

from _pytest.mark.expression import Expression

from tests.tiers import COLLECTED, FAST, TIERS

MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"


def recipe(target: str) -> str:
    """The recipe lines of ``target`` (continuations included)."""
    lines = MAKEFILE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        body.append(line)
    return "\n".join(body)


def lanes() -> list[str]:
    """The ``-m`` expression of every pytest command ``make test`` runs."""
    deps = re.search(r"^test:(.*)$", MAKEFILE.read_text(), re.M)
    assert deps and "test-fast" in deps.group(1).split() and "test-rest" in deps.group(1).split()
    pattern = r'\$\(PYTEST\) -q -m (?:"([^"]+)"|(\S+))'
    found = [a or b for t in ("test-fast", "test-rest") for a, b in re.findall(pattern, recipe(t))]
    assert found, "no pytest command with -m in test-fast or test-rest"
    return found


def runs(expression: str, markers: frozenset[str]) -> bool:
    return Expression.compile(expression).evaluate(lambda name, **_: name in markers)


def test_make_test_runs_every_collected_test_exactly_once() -> None:
    exprs = lanes()
    assert len(exprs) == 3, exprs  # the fast lane, and the rest lane's two runs
    assert len(COLLECTED) > 1 and __name__.replace(".", "/") in " ".join(COLLECTED)  # this run's collection
    for nodeid, markers in COLLECTED.items():
        assert markers & {*TIERS, FAST}, f"{nodeid} has no tier"
        hits = [e for e in exprs if runs(e, markers)]
        assert len(hits) == 1, f"{nodeid} ({sorted(markers)}) runs in {len(hits)} of make test's runs: {hits}"


def test_an_expression_that_leaves_a_tier_out_is_caught() -> None:
    """The check itself: the two rest runs without the one beside the Spark workers miss its tests."""
    some = {"spark", "s3"}, {"standalone", "slow"}, {FAST}
    exprs = ["fast", "not fast and spark"]
    missed = [m for m in map(frozenset, some) if not any(runs(e, m) for e in exprs)]
    assert missed == [frozenset({"standalone", "slow"})]
