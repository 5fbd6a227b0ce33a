"""The scale ladder's cost model (``bench/scale.py``): hours and peak memory per machine for 10^10 edges."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCALE = Path(__file__).resolve().parent.parent / "bench" / "scale.py"


@pytest.fixture(scope="module")
def scale():
    spec = importlib.util.spec_from_file_location("glisp_bench_scale", SCALE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


def _line(stage: str, edges: int, wall_s: float, rss_mb: float, written: int) -> dict:
    return {"stage": stage, "prep": False, "edges": edges, "wall_s": wall_s, "rss_mb": {"total": rss_mb},
            "io": {"write_bytes": written}}  # fmt: skip


def test_hours_carry_the_largest_rungs_cost_by_the_exponent_and_the_cluster_factor(scale):
    e0, e1 = 1 << 20, 1 << 22
    lines = [
        _line("ingest", e0, 10.0, 1000.0, 64 * e0),
        _line("ingest", e1, 40.0, 2500.0, 64 * e1),  # linear: exponent 1
        _line("serialize", e0, 10.0, 500.0, 0),
        _line("serialize", e1, 10.0 * 4**1.25, 500.0, 0),  # super-linear: exponent 1.25
        _line("reorder", e0, 10.0, 300.0, 0),
        _line("reorder", e1, 20.0, 200.0, 0),  # sub-linear: never predicted better than linear
    ]
    rows = {r[0]: r for r in scale.cost_model(lines, 64, 1.11)}
    n, cores = scale.TARGET_EDGES, scale.CORES
    share = 64 * scale.MACHINE_CORES * 3600

    def hours(wall: float, alpha: float) -> float:
        per_edge = wall * cores / e1
        return per_edge * (n / e1) ** (alpha - 1) * n * 1.11 / share

    assert float(rows["ingest"][4]) == pytest.approx(hours(40.0, 1.0), abs=0.006)
    assert rows["ingest"][3] == "1.00" and rows["ingest"][2] == "64"
    assert rows["serialize"][3] == "1.25"
    assert float(rows["serialize"][4]) == pytest.approx(hours(10.0 * 4**1.25, 1.25), rel=0.01)
    assert rows["reorder"][3] == "1.00"  # its fitted 0.5 is clamped
    # the peak per machine: the smallest rung's, plus the growth per edge times the edges on one machine
    grow = (2500.0 - 1000.0) / (e1 - e0)
    peak = (1000.0 + grow * n / 64) / 1024
    assert peak > scale.MACHINE_GB and rows["ingest"][5].endswith(" (!)")  # more than a machine holds: flagged
    assert float(rows["ingest"][5].removesuffix(" (!)")) == pytest.approx(peak, abs=0.06)
    assert float(rows["reorder"][5]) == pytest.approx(300.0 / 1024, abs=0.06)  # a peak that fell adds nothing
    # twice the machines: half the hours
    twice = {r[0]: r for r in scale.cost_model(lines, 128, 1.11)}
    assert float(twice["serialize"][4]) == pytest.approx(float(rows["serialize"][4]) / 2, rel=0.02)


def test_each_refresh_is_set_against_the_fresh_run_stage_by_stage_and_in_total(scale):
    walls = {"ingest": 30.0, "partition-p8": 60.0, "partition-p32": 90.0, "serialize": 70.0, "reorder": 30.0}
    walls |= {"infer": 60.0, "refresh-ingest": 33.0, "refresh-partition": 75.0, "refresh-serialize": 63.0}
    walls |= {"refresh-reorder": 24.0, "refresh-infer": 54.0, "refresh2-ingest": 30.0, "refresh2-infer": 30.0}
    lines = [{"rung": "s20", "stage": st, "wall_s": w} for st, w in walls.items()]
    first, second = scale.refresh_rows(lines)
    assert [r[1] for r in first] == ["ingest", "partition", "serialize", "reorder", "infer", "total"]
    assert first[1][2:] == ["60.0", "75.0", "1.25"]  # against p = 8's partition, not p = 32's
    assert first[-1] == ["s20 refresh", "total", "250.0", "249.0", "1.00"]
    # a refresh not through every stage yet: the stages both ran
    assert second == [
        ["s20 refresh2", "ingest", "30.0", "30.0", "1.00"],
        ["s20 refresh2", "infer", "60.0", "30.0", "0.50"],
        ["s20 refresh2", "total", "90.0", "60.0", "0.67"],
    ]
    assert scale.refresh_prefix(1) == "refresh-" and scale.refresh_prefix(2) == "refresh2-"
