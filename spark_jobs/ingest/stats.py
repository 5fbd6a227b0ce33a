"""Graph statistics for the manifest: degree histograms (log2 bins), max/mean degree, power-law fit.

Per-vertex degrees are counted by the edge-writing tasks, each for its range of vids; only degree
*frequency* tables (one row per distinct degree value, at most a few thousand) reach the driver,
where numpy does the rest. The power-law exponent is the discrete maximum-likelihood estimate of Clauset, Shalizi and
Newman (2009), alpha = 1 + n / sum(ln(d / (d_min - 1/2))), with d_min chosen to minimise the
Kolmogorov-Smirnov distance between the tail and the fitted law.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MIN_TAIL = 50  # fewer tail vertices than this gives no usable fit


def merge_frequencies(parts: list[dict]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"out"|"in"|"total": (degree values ascending, vertex counts)} summed over disjoint vid ranges.

    Each part holds the degree frequency tables of one range of vids, isolated vertices included
    (the edge tasks count every vid of their range), so the sum is over all vertices."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for kind in ("out", "in", "total"):
        vals = [p[kind][0] for p in parts if len(p[kind][0])]
        cnts = [p[kind][1] for p in parts if len(p[kind][0])]
        if not vals:
            out[kind] = (np.zeros(0, np.int64), np.zeros(0, np.int64))
            continue
        v = np.concatenate(vals)
        c = np.concatenate(cnts)
        d, inv = np.unique(v, return_inverse=True)
        out[kind] = (d.astype(np.int64), np.bincount(inv, weights=c, minlength=len(d)).astype(np.int64))
    return out


def log2_histogram(d: np.ndarray, c: np.ndarray) -> dict[str, list[int]]:
    """Bin 0 holds degree 0; bin k >= 1 holds degrees in [2^(k-1), 2^k)."""
    if len(d) == 0:
        return {"bin_lo": [], "count": []}
    bins = np.where(d > 0, np.floor(np.log2(np.maximum(d, 1))).astype(np.int64) + 1, 0)
    nb = int(bins.max()) + 1
    counts = np.bincount(bins, weights=c, minlength=nb).astype(np.int64)
    lo = [0] + [1 << (k - 1) for k in range(1, nb)]
    return {"bin_lo": lo, "count": counts.tolist()}


def power_law_fit(d: np.ndarray, c: np.ndarray, min_tail: int = MIN_TAIL) -> dict[str, Any]:
    """Discrete power-law MLE on the degrees >= d_min, d_min by minimum KS distance."""
    mask = d >= 1
    d, c = d[mask].astype(np.float64), c[mask].astype(np.float64)
    if c.sum() < min_tail:
        return {"alpha": None, "d_min": None, "n_tail": int(c.sum()), "ks": None}
    tail_n = np.cumsum(c[::-1])[::-1]  # vertices with degree >= d[i]
    cands = np.nonzero(tail_n >= min_tail)[0]
    if len(cands) > 200:
        cands = np.unique(np.round(np.geomspace(1, len(cands), 200)).astype(np.int64) - 1)
    best: dict[str, Any] | None = None
    for i in cands:
        dmin = d[i]
        dt, ct = d[i:], c[i:]
        n = ct.sum()
        s = float(np.sum(ct * np.log(dt / (dmin - 0.5))))
        if s <= 0:
            continue
        alpha = 1.0 + n / s
        emp = np.cumsum(ct) / n  # empirical CDF at each distinct degree
        # continuous approximation of the discrete CDF: P(X <= x) = 1 - ((x + 1/2) / (d_min - 1/2))^(1 - alpha)
        fit = 1.0 - ((dt + 0.5) / (dmin - 0.5)) ** (1.0 - alpha)
        ks = float(np.max(np.abs(emp - fit)))
        if best is None or ks < best["ks"]:
            best = {"alpha": round(alpha, 4), "d_min": int(dmin), "n_tail": int(n), "ks": round(ks, 4)}
    return best or {"alpha": None, "d_min": None, "n_tail": 0, "ks": None}


def degree_metrics(freq: dict[str, tuple[np.ndarray, np.ndarray]], num_vertices: int, num_edges: int) -> dict[str, Any]:
    """Histograms, max/mean degree, isolated vertices and the power-law fit from ``merge_frequencies``."""
    metrics: dict[str, Any] = {"degree_histogram_log2": {}, "max_degree": {}, "mean_degree": {}}
    for kind, (d, c) in freq.items():
        metrics["degree_histogram_log2"][kind] = log2_histogram(d, c)
        metrics["max_degree"][kind] = int(d.max()) if len(d) else 0
        total = int(np.sum(d * c))
        metrics["mean_degree"][kind] = round(total / num_vertices, 4) if num_vertices else 0.0
    d, c = freq["total"]
    metrics["isolated_vertices"] = int(c[d == 0].sum()) if len(d) else 0
    metrics["power_law"] = power_law_fit(d, c)
    metrics["power_law"]["on"] = "total degree"
    return metrics


def label_counts(spark: Any, vertices: Any) -> dict[str, int]:
    """Labelled vertices and the split of the labelled ones, from the written ``vertices`` table: one aggregation,
    four numbers to the driver. A label given as null, empty or ``ingest.label_missing`` counts as none."""
    from pyspark.sql import functions as F

    from glisp_core.dataset.layout import LABEL, SPLIT
    from glisp_spark.tables import read_parquet

    has = F.col(LABEL).isNotNull()

    def in_split(code: int) -> Any:
        return F.sum((has & (F.col(SPLIT) == code)).cast("long"))

    row = (
        read_parquet(spark, vertices)
        .agg(F.count(LABEL).alias("labelled"), in_split(0).alias("t"), in_split(1).alias("v"), in_split(2).alias("s"))
        .collect()[0]
    )
    return {
        "labelled_vertices": int(row["labelled"] or 0),
        "labelled_train": int(row["t"] or 0),
        "labelled_val": int(row["v"] or 0),
        "labelled_test": int(row["s"] or 0),
    }
