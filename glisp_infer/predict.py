"""A refresh that predicts its fallback before it pays for finding out what changed.

A measuring refresh (:mod:`glisp_infer.refresh`) writes the vertex keys and the row map, draws stable samples
with signatures and compares them in layer 0 before it knows whether copying rows can save anything. On a
power-law graph a 1 % change of random edge rows reaches three quarters of layer 1's work, so it computes every
row after all and the finding out was overhead: about a tenth of a plain run at R-MAT 20.

A refresh that measured layer 1's affected work share ``w0`` records it with the change that caused it: the
share ``c0`` of edge rows its partition refresh found added or removed against the previous version (a
*calibration*). The next refresh whose partition refresh counts its own change ``c`` against the same previous
run's version, with every vertex at its vid, predicts ``1 - (1 - w0) ** (c / c0)`` (each changed row reaches a
share of the work of its own). Past ``infer.incremental_max_share`` it runs as a plain run does (kernel samples,
float32, no keys, row map or signatures) and says so, with the drift against the previous version measured on a
seeded sample of vertices; the calibration goes on to the next run. A smaller change predicts less, and that
refresh measures again (in full with stable samples where the previous run was a plain one: it has no row to
copy).

A refresh with no calibration to read (the first of a lineage, or after runs that measured none) predicts from the
previous run's work per in-degree (:mod:`glisp_infer.profile`, recorded by every run with a plan job), where its
partition refresh found the change spread over the graph; a change inside one region measures instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glisp_core.config import InferConfig
from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.manifest import StageRecord
from glisp_core.dataset.versions import VersionLease

DRIFT_SAMPLE = 20_000  # vertices a predicted run's drift compares
SAMPLE_CHUNKS = 4  # chunks of the by-vid index the sample is drawn from: what is read stays bounded


def calibration_of(rec: StageRecord) -> dict[str, Any] | None:
    """The calibration a run recorded (measured, or carried by a predicted run), or None."""
    cal = (rec.counts.get("incremental") or {}).get("calibration")
    if not isinstance(cal, dict):
        return None
    try:
        c0, w0 = float(cal["edge_change"]), float(cal["first_work_share"])
    except (KeyError, TypeError, ValueError):
        return None
    return cal if c0 > 0 and 0 <= w0 <= 1 else None


def predicted_share(cal: dict[str, Any], change: float) -> float:
    """Layer 1's affected work share a change of ``change`` predicts from the calibration."""
    c0, w0 = float(cal["edge_change"]), float(cal["first_work_share"])
    if change <= 0:
        return 0.0
    return 1.0 if w0 >= 1 else float(1.0 - (1.0 - w0) ** (change / c0))


@dataclass
class Prediction:
    """A refresh predicted to compute every row: run as a plain run, against ``prev`` for the drift."""

    prev: tuple[DatasetVersion, StageRecord]
    change: float
    share: float
    calibration: dict[str, Any] | None  # None: predicted from the previous run's work profile
    bound: float
    spread: dict[str, Any] = field(default_factory=dict)  # the profile's check of the change's spread
    lease: VersionLease | None = field(default=None, repr=False)

    @property
    def reason(self) -> str:
        cal = self.calibration
        if cal is None:
            basis = (
                f"spread over the graph (its added rows touched {self.spread.get('touched_vertices', 0):,} vertices, "
                f"about {self.spread.get('expected_touched', 0):,.0f} expected of their in-ends), by the work per "
                f"in-degree of the previous run's layer 1 it reaches about {self.share:.3f} of that work"
            )
        else:
            basis = (
                f"the refresh of {cal['version']} ({float(cal['edge_change']):.2%} changed) reached "
                f"{float(cal['first_work_share']):.3f} of layer 1's work, so this change reaches about {self.share:.3f}"
            )
        return (
            f"predicted: {self.change:.2%} of the edge rows changed since {self.prev[0].version}; {basis} > "
            f"infer.incremental_max_share {self.bound}: every row computed as a plain run does (kernel samples, "
            "float32), without finding out what changed"
        )

    def record(self) -> dict[str, Any]:
        """``counts.incremental`` of the run."""
        pdv, prec = self.prev
        return {
            "path": "full",
            "reason": self.reason,
            "arithmetic": "float32",
            "predicted": True,
            "previous": f"{pdv.graph}/{pdv.version}",
            "previous_run": prec.name,
            "edge_change": round(self.change, 6),
            "predicted_work_share": round(self.share, 6),
            "max_share": self.bound,
            **({"calibration": self.calibration} if self.calibration else {"predicted_from": "work_profile"}),
            **self.spread,
        }

    def acquire(self, dv: DatasetVersion) -> Prediction:
        self.lease = VersionLease(self.prev[0], f"infer of {dv.graph}/{dv.version}: drift").acquire()
        return self

    def close(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None


def predict(ic: InferConfig, dv: DatasetVersion, inp: Any, params: dict[str, Any]) -> Prediction | None:
    """A prediction that this refresh computes every row (its share over the bound), or None: no previous
    run, neither a calibration nor a work profile with a change found spread, parameters that make the previous
    run's shares another graph's, or a change that is not counted against the previous run's version. ``inp``: the run's inputs (:class:`glisp_infer.job.Inputs`)."""
    from glisp_infer.refresh import MATCHED_PARAMS, edge_change, find_previous, has_arrays
    from glisp_infer.store import store_url

    found = find_previous(dv, inp.name)
    if found is None:
        return None
    change = edge_change(inp.partition_counts, found[0])
    if change is None or any(found[1].params.get(k) != params.get(k) for k in MATCHED_PARAMS):
        return None
    cal, spread = calibration_of(found[1]), dict[str, Any]()
    if cal is not None:
        share = predicted_share(cal, change)
    else:  # no refresh measured yet: the previous run's work by in-degree, for a change spread over the graph
        got = from_profile(found[1], inp.partition_counts, change)
        if got is None:
            return None
        share, spread = got
    if share <= ic.incremental_max_share:
        return None
    if not has_arrays(store_url(found[0], found[0].path / found[1].path)):
        return None  # its arrays are gone: no drift to measure; the refresh says so and runs in full
    return Prediction(found, change, share, cal, ic.incremental_max_share, spread)


def from_profile(prev: StageRecord, partition_counts: dict[str, Any], change: float) -> tuple[float, dict] | None:
    """Layer 1's share predicted from the previous run's work profile (:mod:`glisp_infer.profile`) with the
    figures of the change's spread, or None: no profile, or a change the partition refresh did not find spread."""
    from glisp_infer.profile import profile_of, spread_like_rows, work_share

    profile = profile_of(prev.counts)
    if profile is None:
        return None
    spread, figures = spread_like_rows(profile, partition_counts.get("incremental") or {})
    return (work_share(profile, change), figures) if spread else None


def sampled_drift(p: Prediction, url: str, prev_url: str, layer: int, n: int, seed: int, task: str) -> dict[str, Any]:
    """``metrics.drift`` of a predicted run: the last layer's rows against the previous run's for a seeded
    sample of at most :data:`DRIFT_SAMPLE` vertices both versions hold at the same vid (drawn from
    :data:`SAMPLE_CHUNKS` chunks of the by-vid index, so what is read does not grow with |V|), with the same
    fields as a measuring refresh's (its quantiles exact over the sample) and the sample's size."""
    from glisp_infer.incremental import cosine_distance
    from glisp_infer.refresh import KNN_K, KNN_POOL, knn_share
    from glisp_infer.store import INDEX_ROW, layer_name, open_array, read_rows

    new_rows, old_rows = open_array(url, INDEX_ROW), open_array(prev_url, INDEX_ROW)
    common = min(n, int(old_rows.shape[0]))
    rng = np.random.default_rng(seed)
    vids = sample_vids(common, int(new_rows.chunks[0]), DRIFT_SAMPLE, rng)
    rows = np.asarray(new_rows.get_orthogonal_selection(vids), np.int64)
    prev = np.asarray(old_rows.get_orthogonal_selection(vids), np.int64)
    keep = (rows >= 0) & (prev >= 0)
    vids, rows, prev = vids[keep], rows[keep], prev[keep]
    prev_last = len(p.prev[1].params.get("dims", [])) - 1
    new, _ = read_rows(open_array(url, layer_name(layer)), rows)
    old, _ = read_rows(open_array(prev_url, layer_name(prev_last)), prev)
    dist = cosine_distance(new, old)
    q = np.quantile(dist, [0.5, 0.9, 0.99]) if len(dist) else np.zeros(3)
    out: dict[str, Any] = {
        "against": p.prev[0].version,
        "sampled": len(vids),
        "of": common,
        "matched": len(vids),
        "cos_p50": round(float(q[0]), 6),
        "cos_p90": round(float(q[1]), 6),
        "cos_p99": round(float(q[2]), 6),
        "cos_max": round(float(dist.max(initial=0.0)), 6),
        "cos_mean": round(float(dist.mean()) if len(dist) else 0.0, 6),
        "moved_share": round(float((dist > 1e-6).mean()) if len(dist) else 0.0, 6),
    }
    pool = np.sort(rng.choice(len(vids), min(KNN_POOL, len(vids)), replace=False))
    share, queries = knn_share(url, prev_url, (layer, prev_last), vids[pool], prev[pool], rng)
    out.update(knn_k=KNN_K, knn_queries=queries, knn_changed_share=round(share, 6))
    if task == "node":
        changed = (new.argmax(axis=1) != old.argmax(axis=1)).mean() if len(new) else 0.0
        out["predictions_changed_share"] = round(float(changed), 6)
    return out


def sample_vids(n: int, chunk: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """At most ``k`` distinct vids of ``0..n-1``, sorted: all of them where ``n <= k``, else drawn from
    :data:`SAMPLE_CHUNKS` seeded chunks of ``chunk`` vids."""
    if n <= k:
        return np.arange(n, dtype=np.int64)
    chunks = rng.choice(-(-n // chunk), min(-(-n // chunk), SAMPLE_CHUNKS), replace=False)
    cand = np.concatenate([np.arange(c * chunk, min((c + 1) * chunk, n), dtype=np.int64) for c in chunks])
    return np.sort(rng.choice(cand, min(k, len(cand)), replace=False))
