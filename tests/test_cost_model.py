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
