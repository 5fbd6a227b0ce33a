"""The driver side of an incremental refresh (``infer.incremental``; the tasks' side: :mod:`glisp_infer.incremental`).

With ``infer.incremental`` on, a run of ``infer/<run>`` in a new version:

1. draws stable samples (:mod:`glisp_infer.stable`) and writes the vertex keys and row signatures, so that the
   next version's refresh can start from it;
2. looks for the **previous run**: ``infer/<run>`` in the graph's ``LATEST``, else in its newest other version;
   it is used when it drew stable samples with the same model (checkpoint digest: model.json and weights), the
   same fanouts, seed, direction and widths; otherwise the run is a full one and says why (``counts.incremental``);
3. after layer 0, compares signatures matched by original id (the id maps, :func:`spark_jobs.partition.incremental.
   vid_map`): changed features give ``A_0``, changed neighbourhoods and new vertices ``changed``; if their share
   passes ``infer.incremental_max_share`` the run falls back to computing every row;
4. before each layer writes ``A_{l-1}``; the layer's tasks return their part of ``A_l``; once a layer's
   affected share passes the bound, the later layers are computed in full (the reason is recorded);
5. records per layer the affected and recomputed shares and the drift of the last layer against the previous
   version (cosine distance quantiles, the share of a seeded sample of vertices whose top-k nearest
   neighbours changed, for a node task the share of changed predictions) in ``counts.incremental`` and
   ``metrics.drift``.

The previous version is leased while it is read, so retention cannot remove it mid-run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_core.config import InferConfig
from glisp_core.dataset.layout import DatasetVersion, list_versions
from glisp_core.dataset.manifest import StageRecord, read_manifest
from glisp_core.dataset.versions import VersionLease, read_latest
from glisp_core.storage.uri import StoreURI
from glisp_infer import incremental as I
from glisp_infer.keys import write_keys
from glisp_infer.store import (
    INDEX_FSIG,
    INDEX_KEY,
    INDEX_NSIG,
    INDEX_ROW,
    INDEX_VID,
    layer_name,
    open_array,
    read_rows,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MATCHED_PARAMS = ("fanouts", "seed", "direction", "dims", "arch", "task")  # what makes rows comparable
INCREMENTAL_DIR = "incremental"
KNN_K, KNN_QUERIES, KNN_POOL = 10, 256, 20000  # top-k drift: k, seeded queries, the candidates they search


def model_digest(checkpoint: StoreURI) -> str:
    """sha256 of the model's spec and weight values: the same model whichever version published (or carried) it."""
    import dataclasses
    import json

    from glisp_core.models import load_checkpoint

    model, _ = load_checkpoint(checkpoint)
    h = hashlib.sha256(json.dumps(dataclasses.asdict(model.spec), sort_keys=True, default=str).encode())
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:32]


def find_previous(dv: DatasetVersion, name: str) -> tuple[DatasetVersion, StageRecord] | None:
    """``infer/<name>`` in the graph's latest version, else in its newest other version holding it."""
    for v in [read_latest(dv.path.parent), *reversed(list_versions(dv.root, dv.graph))]:
        if not v or v == dv.version:
            continue
        other = DatasetVersion(dv.root, dv.graph, v)
        try:
            rec = read_manifest(other).stages.get(f"infer/{name}")
        except Exception:  # unreadable or half-removed version: not a previous run
            rec = None
        if rec is not None:
            return other, rec
    return None


def refusal(prev: StageRecord, params: dict[str, Any], digest: str) -> str | None:
    """Why the previous run's rows cannot be copied into this one, or None."""
    pp = prev.params
    if pp.get("sampling") != "stable":
        return f"the previous run {prev.name} drew kernel samples (it ran without infer.incremental)"
    if prev.counts.get("model_digest") != digest:
        return (
            f"the model differs from the previous run's (checkpoint digest {digest} against "
            f"{prev.counts.get('model_digest')}): a retrained model is inferred in full"
        )
    for k in MATCHED_PARAMS:
        if pp.get(k) != params.get(k):
            return f"infer {k} differs from the previous run's ({params.get(k)} against {pp.get(k)})"
    return None


def prev_row_map(prev: DatasetVersion, dv: DatasetVersion, prev_url: str, n: int) -> np.ndarray:
    """new vid -> the row of the same vertex (type and original id) in the previous run; -1 for a new vertex."""
    from spark_jobs.partition.incremental import vid_map

    to_new = vid_map(prev, dv)
    prow = np.asarray(open_array(prev_url, INDEX_ROW)[:], np.int64)
    out = np.full(n, -1, np.int64)
    ok = to_new >= 0
    out[to_new[ok]] = prow[ok]
    return out


def signatures_by_vid(url: str, n: int) -> np.ndarray:
    """(n, 2) uint64: ``index/fsig`` and ``index/nsig`` (by row) rearranged by vertex id."""
    vid = np.asarray(open_array(url, INDEX_VID)[:], np.int64)
    sig = np.stack([np.asarray(open_array(url, a)[:], np.uint64) for a in (INDEX_FSIG, INDEX_NSIG)], axis=1)
    out = np.zeros((n, 2), np.uint64)
    ok = vid >= 0
    out[vid[ok]] = sig[ok]
    return out


def _has_arrays(url: str) -> bool:
    try:
        open_array(url, INDEX_ROW)
    except FileNotFoundError:
        return False
    return True


@dataclass
class Refresh:
    """One run's incremental state in the driver: the previous run, the masks, what happened per layer."""

    ic: InferConfig
    dv: DatasetVersion
    n: int
    digest: str
    root: StoreURI | None = None  # the refresh's directory (masks, row map), under the stage's attempt
    prev: tuple[DatasetVersion, StageRecord] | None = None
    prev_url: str = ""
    prev_row: np.ndarray | None = None
    prev_last: int = -1  # the previous run's final layer
    last: int = -1  # this run's final layer (set by plan_fields)
    refused: str = ""  # why no row is copied: no previous run, or one that is not comparable
    reason: str = ""  # why rows are not copied: the refusal, or the fallback from layer full_from
    full_from: int = 0  # the first layer computed in full; 0 = none (K + 1 when incremental throughout)
    mask: np.ndarray | None = None
    changed: np.ndarray | None = None
    shares: dict[str, list[float]] = field(default_factory=lambda: {"affected": [], "recomputed": []})
    lease: VersionLease | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def resolve(cls, ic: InferConfig, dv: DatasetVersion, name: str, params: dict[str, Any], inp: Any) -> Refresh:
        from glisp_infer.store import store_url

        r = cls(ic, dv, inp.num_vertices, model_digest(inp.checkpoint))
        found = find_previous(dv, name)
        if found is None:
            r.refused = r.reason = f"no earlier version holds infer/{name}"
            return r
        r.prev = found
        r.lease = VersionLease(found[0], f"infer refresh of {dv.graph}/{dv.version}").acquire()
        r.prev_url = store_url(found[0], found[0].path / found[1].path)
        r.refused = r.reason = refusal(found[1], params, r.digest) or ""
        if not r.refused and not _has_arrays(r.prev_url):
            r.close()  # its record stays, its arrays are gone (removed by hand or by another tool): a full run
            r.prev = None
            r.refused = r.reason = (
                f"the previous run infer/{name} of {found[0].version} has no arrays at {r.prev_url}: inferred in full"
            )
        return r

    @property
    def incremental(self) -> bool:
        return self.prev is not None and not self.refused

    def plan_fields(self, tmp: StoreURI, dims: list[int]) -> dict[str, Any]:
        """The InferPlan fields of this run."""
        self.root = tmp / INCREMENTAL_DIR
        prev_dims = list(self.prev[1].params.get("dims", [])) if self.prev is not None else []
        same_width = prev_dims[-1:] == list(dims)[-1:] and bool(prev_dims)
        self.prev_last = len(prev_dims) - 1
        self.last = len(dims) - 1  # the last layer: no layer after it to fall back to
        return {
            "stable": True,
            "incremental_dir": str(self.root),
            "prev_store": self.prev_url if same_width else "",
            "prev_last_layer": self.prev_last if same_width else -1,
            "max_share": self.ic.incremental_max_share,
        }

    def start(self, spark: SparkSession, url: str) -> None:
        """Before any task: the vertex keys (written by tasks), and the row map for copying and drift."""
        write_keys(spark, self.dv, url, INDEX_KEY)
        if self.prev is not None:
            assert self.root is not None
            self.prev_row = prev_row_map(self.prev[0], self.dv, self.prev_url, self.n)
            I.save_vector(self.root, I.PREV_ROW, self.prev_row)

    def after_features(self, url: str) -> None:
        """After layer 0: ``A_0`` (changed features) and ``changed`` (neighbourhoods), or the full-run fallback."""
        if not self.incremental:
            return
        assert self.root is not None and self.prev_row is not None
        new = signatures_by_vid(url, self.n)
        old = np.zeros_like(new)
        ok = self.prev_row >= 0
        for j, name in enumerate((INDEX_FSIG, INDEX_NSIG)):
            old[ok, j] = np.asarray(open_array(self.prev_url, name).get_orthogonal_selection(self.prev_row[ok]))
        self.mask = ~ok | (new[:, 0] != old[:, 0])
        self.changed = ~ok | (new[:, 1] != old[:, 1])
        prev_n = int(self.prev[1].counts.get("vertices", 0)) if self.prev else 0
        self.info.update(
            added=int((~ok).sum()),
            removed=prev_n - int(ok.sum()),
            changed_features=int((self.mask & ok).sum()),
            changed_neighbourhoods=int((self.changed & ok).sum()),
        )
        I.save_vector(self.root, I.CHANGED, self.changed)
        self._check(1, self.mask | self.changed)

    def _check(self, layer: int, lower: np.ndarray) -> None:
        """Fall back to full layers from ``layer`` when its affected share (at least ``lower``'s) passes the bound."""
        share = float(lower.mean()) if self.n else 0.0
        if self.full_from == 0 and share > self.ic.incremental_max_share:
            self.full_from = layer
            self.reason = (
                f"layer {layer}: affected share {share:.3f} > infer.incremental_max_share "
                f"{self.ic.incremental_max_share}; layers {layer}..K computed in full"
            )

    def layer_mode(self, layer: int) -> str:
        """What layer ``layer``'s tasks do with the affected set: "copy" the unaffected rows, only "measure" it
        (after a fallback: every row computed, the share still recorded) or "" (no previous run); writes
        ``A_{layer-1}`` for them."""
        if not self.incremental:
            return ""
        assert self.root is not None and self.mask is not None
        I.save_vector(self.root, I.mask_name(layer - 1), self.mask)
        return "measure" if self.full_from and layer >= self.full_from else "copy"

    def after_layer(self, layer: int, res: list[dict[str, Any]]) -> None:
        """Union the tasks' parts of ``A_layer``; record the shares."""
        inc = any("affected_vids" in r for r in res)
        vids = [r.pop("affected_vids") for r in res if "affected_vids" in r]
        n = max(self.n, 1)
        recomputed = sum(int(r.get("recomputed", r.get("vertices", 0))) for r in res)
        if inc:
            self.mask = np.zeros(self.n, bool)
            self.mask[np.concatenate(vids)] = True
            self.shares["affected"].append(round(float(self.mask.sum()) / n, 6))
            if layer < self.last:
                self._check(layer + 1, self.mask)
        self.shares["recomputed"].append(round(recomputed / n, 6))

    def record(self) -> dict[str, Any]:
        """``counts.incremental``: which path ran and why, per-layer shares (layers 1..K), what changed."""
        if not self.incremental:
            path = "full"
        else:
            path = "partial" if self.full_from else "incremental"
        out: dict[str, Any] = {"path": path, "reason": self.reason}
        if self.prev is not None:
            out.update(previous=f"{self.prev[0].graph}/{self.prev[0].version}", previous_run=self.prev[1].name)
        if self.incremental:
            out.update(
                full_from_layer=self.full_from,
                max_share=self.ic.incremental_max_share,
                affected_share=self.shares["affected"],
                recomputed_share=self.shares["recomputed"],
                **self.info,
            )
        return out

    def drift(self, url: str, last: list[dict[str, Any]], layer: int, task: str) -> dict[str, Any]:
        """``metrics.drift`` of the last layer against the previous version (empty without one)."""
        parts = [r.pop("drift") for r in last if "drift" in r]
        if not parts or self.prev_row is None:
            return {}
        matched = sum(int(p["matched"]) for p in parts)
        d = np.zeros(matched, np.float64)
        got = np.concatenate([p["cos_dist"] for p in parts]) if parts else np.zeros(0)
        d[: len(got)] = got  # the rest were copied: distance 0
        q = np.quantile(d, [0.5, 0.9, 0.99]) if matched else np.zeros(3)
        out: dict[str, Any] = {
            "against": f"{self.prev[0].version}" if self.prev else "",
            "matched": matched,
            "cos_p50": round(float(q[0]), 6),
            "cos_p90": round(float(q[1]), 6),
            "cos_p99": round(float(q[2]), 6),
            "cos_max": round(float(d.max(initial=0.0)), 6),
            "cos_mean": round(float(d.mean()) if matched else 0.0, 6),
            "moved_share": round(float((d > 1e-6).mean()) if matched else 0.0, 6),
        }
        share, queries = knn_changed(url, self.prev_url, self.prev_row, (layer, self.prev_last), self.ic.seed)
        out.update(knn_k=KNN_K, knn_queries=queries, knn_changed_share=round(share, 6))
        if task == "node":
            out["predictions_changed_share"] = round(sum(int(p["pred_changed"]) for p in parts) / max(matched, 1), 6)
        return out

    def close(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None


def knn_changed(url: str, prev_url: str, prev_row: np.ndarray, layers: tuple[int, int], seed: int) -> tuple[float, int]:
    """The share of a seeded sample of matched vertices whose top-k cosine neighbours (among a seeded pool of
    at most ``KNN_POOL`` matched vertices) differ between the two versions' final layers (``layers``: this run's
    and the previous one's index, which differ for a retrained model of another depth); and the number of
    queries."""
    matched = np.flatnonzero(prev_row >= 0)
    rng = np.random.default_rng(seed)
    pool = np.sort(rng.choice(matched, min(KNN_POOL, len(matched)), replace=False))
    k = min(KNN_K, len(pool) - 1)
    if k < 1:
        return 0.0, 0
    qs = rng.choice(len(pool), min(KNN_QUERIES, len(pool)), replace=False)
    rows = np.asarray(open_array(url, INDEX_ROW).get_orthogonal_selection(pool), np.int64)
    new, _ = read_rows(open_array(url, layer_name(layers[0])), rows)
    old, _ = read_rows(open_array(prev_url, layer_name(layers[1])), prev_row[pool])

    def top(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64)
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        sim = x[qs] @ x.T
        sim[np.arange(len(qs)), qs] = -np.inf
        return np.sort(np.argpartition(-sim, k - 1, axis=1)[:, :k], axis=1)

    return float((top(new) != top(old)).any(axis=1).mean()), len(qs)
