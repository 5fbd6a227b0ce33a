"""The driver side of an incremental refresh (``infer.incremental``; the tasks' side: :mod:`glisp_infer.incremental`).

With ``infer.incremental`` on, a run of ``infer/<run>`` in a new version:

1. draws stable samples (:mod:`glisp_infer.stable`) and writes the vertex keys and row signatures, so that the
   next version's refresh can start from it;
2. looks for the **previous run**: ``infer/<run>`` in the graph's ``LATEST``, else in its newest other version;
   it is used when it drew stable samples with the same model (checkpoint digest: model.json and weights), the
   same fanouts, seed, direction and widths; otherwise the run is a full one and says why (``counts.incremental``);
3. before any task, has Spark tasks write the new-vid -> previous-row map (:mod:`glisp_infer.row_map`: by vid,
   in the keys' job, where every vertex the two versions share kept its vid; else this version's id map joined
   with the previous run's index by vertex type and original id); layer 0's tasks, after their features,
   compare each partition's row signatures with the previous run's rows of the same vertices (no job of its
   own): changed features give ``A_0``, changed neighbourhoods and new vertices ``changed``; if their share of
   layer 1's work (their sampled edges and rows in the plan job's samples: a lower bound of ``A_1``'s) passes
   ``infer.incremental_max_share`` the run falls back to computing every row from layer 1, in float32 as a plain
   run does (no row is copied; its rows then depend on their batches, so the next refresh copies none of them);
4. each layer's tasks write their part of ``A_l`` for the next layer's and return its size and its share of the
   layer's work (sampled edges and rows: what a layer's compute follows; on a power-law graph a third of the
   vertices can hold most of the edges); once a layer's affected work share passes the bound, the later layers
   are computed in full (the reason is recorded);
5. records what it measured of layer 1 with the share of edge rows that changed (a calibration from which the
   next refresh predicts its own fallback before it finds out what changed: :mod:`glisp_infer.predict`), and
   per layer the affected and recomputed shares and the drift of the last layer against the previous
   version (cosine distance quantiles, the share of a seeded sample of vertices whose top-k nearest
   neighbours changed, for a node task the share of changed predictions) in ``counts.incremental`` and
   ``metrics.drift``.

The previous version is leased while it is read, so retention cannot remove it mid-run. The driver holds
counts and fixed-size histograms only, nothing per vertex: the map and the masks are files the tasks write
and read.
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
from glisp_infer.store import INDEX_KEY, INDEX_ROW, layer_name, open_array, read_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MATCHED_PARAMS = ("fanouts", "seed", "direction", "dims", "arch", "task")  # what makes rows comparable
INCREMENTAL_DIR = "incremental"
KNN_K, KNN_QUERIES, KNN_POOL = 10, 256, 20000  # top-k drift: k, seeded queries, the candidates they search
KNN_BLOCK = 4  # queries scored at once
KNN_CHUNKS = 4  # chunks of the by-vid arrays the pool is drawn from


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


def renumbered(partition: str, counts: dict[str, Any], prev: DatasetVersion) -> str:
    """Why this version's vids are known not to be ``prev``'s: its ``partition/<partition>`` record (``counts``)
    was refreshed from ``prev`` and found a base vertex at another vid or gone (``same_vids`` false; ``same_ids``
    in records before it, which edge type codes also falsify). "" when nothing says so. The row map then goes
    straight to the join: comparing keys at equal vids would only find that out (a removal of the last vertices
    alone would not have moved a vid: the join then costs a few seconds more than the keys' job)."""
    inc = counts.get("incremental") or {}
    if inc.get("base") == f"{prev.graph}/{prev.version}" and inc.get("same_vids", inc.get("same_ids")) is False:
        return f"partition/{partition} found vertices of {prev.version} at other vids or removed (same_vids false)"
    return ""


def edge_change(partition_counts: dict[str, Any], prev: DatasetVersion) -> float | None:
    """The share of ``prev``'s edge rows this version's partition refresh found removed or added
    (``(added + removed) / (kept + removed)``), where it was refreshed from ``prev`` and found every vertex of
    ``prev`` at its vid; else None (a fresh partition, another base, or vids that moved: nothing to predict from)."""
    inc = partition_counts.get("incremental") or {}
    if inc.get("base") != f"{prev.graph}/{prev.version}" or not inc.get("same_vids", inc.get("same_ids")):
        return None
    try:
        kept, added, removed = (int(inc[k]) for k in ("kept", "added", "removed"))
    except (KeyError, TypeError, ValueError):
        return None
    return (added + removed) / (kept + removed) if kept + removed else None


def refusal(prev: StageRecord, params: dict[str, Any], digest: str) -> str | None:
    """Why the previous run's rows cannot be copied into this one, or None."""
    pp = prev.params
    if pp.get("sampling") != "stable":
        return (
            f"the previous run {prev.name} drew kernel samples (it ran without infer.incremental, or predicted that "
            "it computes every row)"
        )
    if prev.counts.get("model_digest") != digest:
        return (
            f"the model differs from the previous run's (checkpoint digest {digest} against "
            f"{prev.counts.get('model_digest')}): a retrained model is inferred in full"
        )
    for k in MATCHED_PARAMS:
        if pp.get(k) != params.get(k):
            return f"infer {k} differs from the previous run's ({params.get(k)} against {pp.get(k)})"
    return None


def has_arrays(url: str, name: str = INDEX_ROW) -> bool:
    try:
        open_array(url, name)
    except FileNotFoundError:
        return False
    return True


@dataclass
class Refresh:
    """One run's incremental state in the driver: the previous run, the affected counts, what happened per layer."""

    ic: InferConfig
    dv: DatasetVersion
    n: int
    digest: str
    vertex_types: list[str] = field(default_factory=list)
    root: StoreURI | None = None  # the refresh's directory (row map, masks), under the stage's attempt
    prev: tuple[DatasetVersion, StageRecord] | None = None
    prev_url: str = ""
    prev_last: int = -1  # the previous run's final layer
    last: int = -1  # this run's final layer (set by plan_fields)
    refused: str = ""  # why no row is copied: no previous run, or one that is not comparable
    reason: str = ""  # why rows are not copied: the refusal, or the fallback from layer full_from
    full_from: int = 0  # the first layer computed in full; 0 = none (K + 1 when incremental throughout)
    matched: int = 0  # vertices of this version the previous run holds
    shares: dict[str, list[float]] = field(
        default_factory=lambda: {"affected": [], "affected_work": [], "recomputed": []}
    )
    lease: VersionLease | None = None
    info: dict[str, Any] = field(default_factory=dict)
    renumbered: str = ""  # why the vids are known to have moved since the previous run (the row map joins)
    double: bool = True  # float64 slices (rows a later refresh can copy); False once layer 1 falls back
    prev_float32: bool = False  # the previous run's rows depend on their batches: none can be copied
    change: float | None = None  # the share of edge rows changed since the previous run's version, where known

    @classmethod
    def resolve(cls, ic: InferConfig, dv: DatasetVersion, name: str, params: dict[str, Any], inp: Any) -> Refresh:
        from glisp_infer.store import store_url

        r = cls(ic, dv, inp.num_vertices, model_digest(inp.checkpoint), list(inp.vertex_types or []))
        found = find_previous(dv, name)
        if found is None:
            r.refused = r.reason = f"no earlier version holds infer/{name}"
            return r
        r.prev = found
        r.renumbered = renumbered(inp.partition, inp.partition_counts, found[0])
        r.change = edge_change(inp.partition_counts, found[0])
        r.lease = VersionLease(found[0], f"infer refresh of {dv.graph}/{dv.version}").acquire()
        r.prev_url = store_url(found[0], found[0].path / found[1].path)
        r.refused = r.reason = refusal(found[1], params, r.digest) or ""
        r.prev_float32 = (found[1].counts.get("incremental") or {}).get("arithmetic") == "float32"
        if not has_arrays(r.prev_url):  # refused or not: no row to copy, and no drift to measure against
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
            "double": True,
            "incremental_dir": str(self.root),
            "prev_store": self.prev_url if same_width else "",
            "prev_last_layer": self.prev_last if same_width else -1,
            "max_share": self.ic.incremental_max_share,
        }

    def start(self, spark: SparkSession, url: str) -> None:
        """Before any task: the vertex keys and, with a previous run, the row map (both written by tasks): by vid
        where every vertex the versions share kept its vid, else by a join on the original ids (with the keys in
        the same job where the partition record already says the vids moved)."""
        from glisp_infer.row_map import write_kept_rows, write_prev_rows

        if self.prev is None:
            write_keys(spark, self.dv, url, INDEX_KEY)
            return
        assert self.root is not None
        join_why = self.renumbered
        if not join_why and not has_arrays(self.prev_url, INDEX_KEY):
            join_why = f"the previous run {self.prev[1].name} holds no vertex keys (it drew kernel samples)"
        if not join_why:
            kept = write_kept_rows(spark, self.dv, (url, INDEX_KEY), self.prev_url, self.root, self.n)
            if kept is not None:
                self.info["row_map"], self.matched = "by vid", kept
                return
        why = join_why or "a vertex both versions count is at another vid"
        self.info.update(row_map="joined by original id", row_map_why=why)
        pdv, rec = self.prev
        as_text = read_manifest(pdv).schema.get("id_type") != read_manifest(self.dv).schema.get("id_type")
        prev_index = pdv.path / rec.path / "index"
        self.matched = write_prev_rows(
            spark,
            self.dv,
            self.vertex_types,
            prev_index,
            as_text,
            self.root,
            self.n,
            keys=(url, INDEX_KEY) if join_why else None,
        )

    def after_features(self, res: list[dict[str, Any]]) -> None:
        """After layer 0, with its tasks' comparison counts per partition (they wrote ``A_0`` and ``changed``):
        what changed, and the full-run fallback by their share of layer 1's work (of the rows without a plan
        job): on a power-law graph the 5 % of vertices with a changed edge can hold three quarters of it."""
        prev_n = int(self.prev[1].counts.get("vertices", 0)) if self.prev else 0
        self.info.update(
            added=sum(int(r["added"]) for r in res),
            removed=prev_n - self.matched,
            changed_features=sum(int(r["changed_features"]) for r in res),
            changed_neighbourhoods=sum(int(r["changed_neighbourhoods"]) for r in res),
        )
        rows = sum(int(r["first_affected"]) for r in res) / self.n if self.n else 0.0
        self.info["first_affected_share"] = round(rows, 6)
        if res and all("work" in r for r in res):  # the work A_0 | changed holds: what layer 1's time follows
            work = sum(int(r["work"]) for r in res)
            share = sum(int(r["first_work"]) for r in res) / work if work else 0.0
            self.info["first_work_share"] = round(share, 6)
            self._check(1, share, "work")
        else:
            self._check(1, rows, "rows")
        self._first_layer()

    def _first_layer(self) -> None:
        """Before layer 1's tasks: a fallback from layer 1 copies no row, so the run computes in float32, as a
        plain run does (its rows then depend on their batches, and the next refresh copies none of them: the
        share that passed the bound here predicts its own). A previous run in float32 holds no row to copy: with
        the share under the bound every row is computed in float64, so that the next refresh can copy."""
        if self.full_from == 1:
            self.double = False
        elif self.prev_float32:
            self.full_from = 1
            self.reason = (
                "the previous run's rows were computed in float32 (its own refresh computed every layer in full): "
                "none is copied; every layer computed in full in float64, for the next refresh to copy from"
            )

    def _check(self, layer: int, share: float, of: str) -> None:
        """Fall back to full layers from ``layer`` when its affected share (at least ``share`` of its ``of``)
        passes the bound."""
        if self.full_from == 0 and share > self.ic.incremental_max_share:
            self.full_from = layer
            self.reason = (
                f"layer {layer}: affected share of its {of} {share:.3f} > infer.incremental_max_share "
                f"{self.ic.incremental_max_share}; layers {layer}..K computed in full"
            )

    def layer_mode(self, layer: int) -> str:
        """What layer ``layer``'s tasks do with the affected set: "copy" the unaffected rows, only "measure" it
        (after a fallback: every row computed, the share still recorded) or "" (no previous run)."""
        if not self.incremental:
            return ""
        return "measure" if self.full_from and layer >= self.full_from else "copy"

    def after_layer(self, layer: int, res: list[dict[str, Any]]) -> None:
        """The size of ``A_layer`` (its parts written by the tasks) and the recomputed rows; the shares."""
        n = max(self.n, 1)
        recomputed = sum(int(r.get("recomputed", r.get("vertices", 0))) for r in res)
        if any("affected" in r for r in res):
            affected = sum(int(r.get("affected", 0)) for r in res)
            work = sum(int(r.get("work", 0)) for r in res)
            work_share = sum(int(r.get("affected_work", 0)) for r in res) / work if work else 0.0
            self.shares["affected"].append(round(affected / n, 6))
            self.shares["affected_work"].append(round(work_share, 6))
            busy = [r for r in res if int(r.get("vertices", 0))]
            if self.full_from == 0 and busy and all(r.get("full") for r in busy):
                self.full_from = layer  # each task's own work share passed the bound: the layer copied nothing
                self.reason = (
                    f"layer {layer}: affected share of its work {work_share:.3f}, over infer.incremental_max_share "
                    f"{self.ic.incremental_max_share} in every task; layers {layer}..K computed in full"
                )
            if layer < self.last:  # A_layer's work share: a lower bound of the next layer's (A grows)
                self._check(layer + 1, work_share, "work")
        self.shares["recomputed"].append(round(recomputed / n, 6))

    def record(self) -> dict[str, Any]:
        """``counts.incremental``: which path ran and why, per-layer shares (layers 1..K), what changed."""
        if not self.incremental:
            path = "full"
        else:
            path = "partial" if self.full_from else "incremental"
        out: dict[str, Any] = {"path": path, "reason": self.reason, "arithmetic": self.arithmetic}
        if self.prev is not None:
            out.update(previous=f"{self.prev[0].graph}/{self.prev[0].version}", previous_run=self.prev[1].name)
            out.update({k: self.info[k] for k in ("row_map", "row_map_why") if k in self.info})  # the drift's map
        if self.incremental:
            out.update(
                full_from_layer=self.full_from,
                max_share=self.ic.incremental_max_share,
                affected_share=self.shares["affected"],
                affected_work_share=self.shares["affected_work"],
                recomputed_share=self.shares["recomputed"],
                **self.info,
            )
            cal = self.calibration()
            if cal:
                out["calibration"] = cal
        return out

    def calibration(self) -> dict[str, Any] | None:
        """What the next refresh predicts its layer 1 share from (:mod:`glisp_infer.predict`): this run's measured
        share of layer 1's work and the share of edge rows whose change caused it; None where it measured rows
        only, the change is not known, or features changed too (a share that edge rows alone did not cause)."""
        if self.change is None or "first_work_share" not in self.info or self.info.get("changed_features"):
            return None
        return {
            "version": self.dv.version,
            "edge_change": round(self.change, 6),
            "first_work_share": self.info["first_work_share"],
        }

    @property
    def arithmetic(self) -> str:
        """What the slices computed in: "float64" (rows that do not depend on their batch) or "float32"."""
        return "float64" if self.double else "float32"

    def drift(self, url: str, last: list[dict[str, Any]], layer: int, task: str) -> dict[str, Any]:
        """``metrics.drift`` of the last layer against the previous version (empty without one), from the tasks'
        histograms: the quantiles are their bins' upper edges (at most 1.05 % above the exact value)."""
        parts = [r.pop("drift") for r in last if "drift" in r]
        if not parts or self.prev is None or self.root is None:
            return {}
        matched = sum(int(p["matched"]) for p in parts)
        hist = np.sum([p["hist"] for p in parts], axis=0)
        hist[0] += matched - sum(int(p["measured"]) for p in parts)  # the copied rows: distance 0
        top = max(float(p["max"]) for p in parts)
        q = [quantile(hist, x, top) for x in (0.5, 0.9, 0.99)] if matched else [0.0] * 3
        out: dict[str, Any] = {
            "against": f"{self.prev[0].version}",
            "matched": matched,
            "cos_p50": round(q[0], 6),
            "cos_p90": round(q[1], 6),
            "cos_p99": round(q[2], 6),
            "cos_max": round(top, 6),
            "cos_mean": round(sum(float(p["sum"]) for p in parts) / matched if matched else 0.0, 6),
            "moved_share": round(sum(int(p["moved"]) for p in parts) / matched if matched else 0.0, 6),
        }
        share, queries = knn_changed(url, self.prev_url, str(self.root), (layer, self.prev_last), self.ic.seed)
        out.update(knn_k=KNN_K, knn_queries=queries, knn_changed_share=round(share, 6))
        if task == "node":
            out["predictions_changed_share"] = round(sum(int(p["pred_changed"]) for p in parts) / max(matched, 1), 6)
        return out

    def close(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None


def quantile(hist: np.ndarray, q: float, top: float) -> float:
    """The ``q`` quantile of the distances counted in ``hist`` (bins :data:`glisp_infer.incremental.
    DRIFT_EDGES`): the upper edge of the bin holding it, 0 for the first bin, at most the largest distance."""
    rank = q * (int(hist.sum()) - 1)
    b = int(np.searchsorted(np.cumsum(hist), rank, side="right"))
    return 0.0 if b == 0 else min(float(I.DRIFT_EDGES[b + 1]), top)


def knn_changed(url: str, prev_url: str, root: str, layers: tuple[int, int], seed: int) -> tuple[float, int]:
    """The share of a seeded sample of matched vertices whose top-k cosine neighbours (among a seeded pool of
    at most ``KNN_POOL`` matched vertices) differ between the two versions' final layers (``layers``: this run's
    and the previous one's index, which differ for a retrained model of another depth); and the number of
    queries. The pool is drawn from seeded vids of at most ``KNN_CHUNKS`` chunks of the row map, so what this
    reads and holds does not grow with |V|."""
    rows_by_vid = open_array(I.prev_row_url(root), I.PREV_ROW)
    n, chunk = int(rows_by_vid.shape[0]), int(rows_by_vid.chunks[0])
    rng = np.random.default_rng(seed)
    if n <= 4 * KNN_POOL:
        cand = np.arange(n)
    else:  # candidates in a few seeded chunks of the by-vid arrays: what is read stays bounded whatever |V|
        chunks = rng.choice(-(-n // chunk), min(-(-n // chunk), KNN_CHUNKS), replace=False)
        cand = chunks[rng.integers(0, len(chunks), 4 * KNN_POOL)] * chunk + rng.integers(0, chunk, 4 * KNN_POOL)
        cand = np.unique(cand[cand < n])
    prev_of = np.asarray(rows_by_vid.get_orthogonal_selection(cand), np.int64)
    keep = np.flatnonzero(prev_of >= 0)
    keep = np.sort(rng.choice(keep, min(KNN_POOL, len(keep)), replace=False))
    return knn_share(url, prev_url, layers, cand[keep], prev_of[keep], rng)


def knn_share(
    url: str, prev_url: str, layers: tuple[int, int], pool: np.ndarray, prev_rows: np.ndarray, rng: np.random.Generator
) -> tuple[float, int]:
    """The share of seeded queries among the vertices ``pool`` (vids; ``prev_rows`` their rows in the previous
    run) whose top-k cosine neighbours in the pool differ between the two runs' layers ``layers``; the queries."""
    k = min(KNN_K, len(pool) - 1)
    if k < 1:
        return 0.0, 0
    qs = rng.choice(len(pool), min(KNN_QUERIES, len(pool)), replace=False)
    rows = np.asarray(open_array(url, INDEX_ROW).get_orthogonal_selection(pool), np.int64)
    new, _ = read_rows(open_array(url, layer_name(layers[0])), rows)
    old, _ = read_rows(open_array(prev_url, layer_name(layers[1])), prev_rows)

    def top(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64)
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        out = np.empty((len(qs), k), np.int64)
        for a in range(0, len(qs), KNN_BLOCK):  # a few queries at a time: 0.6 MB of similarities, not 41
            q = qs[a : a + KNN_BLOCK]
            sim = x[q] @ x.T
            sim[np.arange(len(q)), q] = -np.inf
            np.negative(sim, out=sim)
            out[a : a + len(q)] = np.sort(np.argpartition(sim, k - 1, axis=1)[:, :k], axis=1)
        return out

    return float((top(new) != top(old)).any(axis=1).mean()), len(qs)
