"""Layer 1's work by in-degree: what a refresh with no measured calibration predicts its fallback from.

A refresh recomputes a vertex at layer 1 when one of its in-edges changed; the work it then does is the vertex's
sampled edges and its own row. Where a change of a share ``c`` of the edge rows falls on every row alike, a vertex
of in-degree ``d`` keeps its neighbourhood with probability ``(1 - c) ** d``, so the affected share of layer 1's
work is ``sum_v w_v (1 - (1 - c) ** d_v) / sum_v w_v``: on R-MAT 20 with 1 % of the rows changed it gives 0.7381,
where the refresh measured 0.738 (and 5.61 % of the vertices, where it measured 5.62 %).

Every run with a plan job records the vertices and the work of each in-degree bin (``counts.work_profile``): exact
degrees up to :data:`EXACT`, then bins :data:`PER_OCTAVE` to a doubling, each taken at its lowest degree, so a
prediction from it is a lower bound of the model's share (a few hundred numbers whatever |V|). Where a plain run's
fanout at layer 1 is finite it sees at most the fanout of a vertex's in-edges (``capped``): a lower bound again.

The model holds for changes spread over the graph, not for one region's; a prediction from the profile is made only
where the partition refresh's count of vertices its added rows touched is at least half of what the model expects of
their in-ends (:func:`spread_like_rows`): a change inside a few hundred vertices touches far fewer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

EXACT = 64  # degrees 0..EXACT-1 have a bin each
PER_OCTAVE = 8  # bins per doubling past EXACT
NUM_BINS = EXACT + PER_OCTAVE * 48  # degrees up to 2**54


def bin_of(degree: np.ndarray) -> np.ndarray:
    """Each degree's bin."""
    d = np.asarray(degree, np.int64)
    out = d.copy()
    big = d >= EXACT
    out[big] = EXACT + np.floor(PER_OCTAVE * np.log2(d[big] / EXACT)).astype(np.int64)
    return np.minimum(out, NUM_BINS - 1)


def bin_floor(bins: np.ndarray) -> np.ndarray:
    """The lowest degree of each bin (rounded up to a whole degree)."""
    b = np.asarray(bins, np.int64)
    return np.where(b < EXACT, b, np.ceil(EXACT * 2.0 ** ((b - EXACT) / PER_OCTAVE) - 1e-9)).astype(np.int64)


def histogram(degree: np.ndarray, work: np.ndarray) -> np.ndarray:
    """A task's (2, NUM_BINS) int64 array: vertices and work per in-degree bin (summed over tasks by the driver)."""
    b = bin_of(degree)
    out = np.zeros((2, NUM_BINS), np.int64)
    out[0] = np.bincount(b, minlength=NUM_BINS)
    out[1] = np.bincount(b, weights=np.asarray(work, np.float64), minlength=NUM_BINS).astype(np.int64)
    return out


def record(hists: list[np.ndarray], capped: bool) -> dict[str, Any] | None:
    """``counts.work_profile``: the non-empty bins' lowest degrees, vertices and work."""
    if not hists:
        return None
    h = np.sum(hists, axis=0)
    keep = np.flatnonzero(h[0])
    return {
        "degree": bin_floor(keep).tolist(),
        "vertices": h[0, keep].tolist(),
        "work": h[1, keep].tolist(),
        "capped": bool(capped),
    }


def profile_of(counts: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """A run's recorded profile as arrays, or None (none recorded, or not one this module wrote)."""
    p = counts.get("work_profile")
    if not isinstance(p, dict):
        return None
    try:
        d, v, w = (np.asarray(p[k], np.float64) for k in ("degree", "vertices", "work"))
    except (KeyError, TypeError, ValueError):
        return None
    if not (len(d) == len(v) == len(w)) or not len(d) or w.sum() <= 0:
        return None
    return {"degree": d, "vertices": v, "work": w}


def work_share(profile: dict[str, np.ndarray], change: float) -> float:
    """The share of layer 1's work whose vertices have a changed in-edge, for a share ``change`` of changed rows."""
    if change <= 0:
        return 0.0
    hit = 1.0 - (1.0 - min(change, 1.0)) ** profile["degree"]
    return float((profile["work"] * hit).sum() / profile["work"].sum())


def expected_vertices(profile: dict[str, np.ndarray], share: float) -> float:
    """Vertices with at least one in-edge among a share ``share`` of the rows, were they spread over every row."""
    if share <= 0:
        return 0.0
    return float((profile["vertices"] * (1.0 - (1.0 - min(share, 1.0)) ** profile["degree"])).sum())


def spread_like_rows(profile: dict[str, np.ndarray], partition_inc: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Whether the partition refresh's change looks spread over the graph (its added rows touched at least half the
    vertices the model expects of their in-ends), with the figures; False where it did not count them."""
    try:
        touched = int(partition_inc["touched_vertices"])
        added, kept, removed = (int(partition_inc[k]) for k in ("added", "kept", "removed"))
    except (KeyError, TypeError, ValueError):
        return False, {}
    expect = expected_vertices(profile, added / max(kept + removed, 1))
    return touched >= 0.5 * expect, {"touched_vertices": touched, "expected_touched": round(expect, 1)}
