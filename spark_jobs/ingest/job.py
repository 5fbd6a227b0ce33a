"""``run_ingest``: configured edge/vertex tables -> a new dataset version, published atomically.

Phases (each under its own Spark job group; ``Phases`` records wall seconds and job counts in the
manifest timings, see docs/architecture.md "Ingest phases"):

  fingerprint   hash the inputs (driver) and look for an identical published version;
  read_check    read every table, row rules as Spark column expressions, ONE scan per table that
                counts rows per (file, reason, column), collects the integer key sets and stages the
                good edge rows as Arrow files; fail or quarantine;
  vertex_checks second-phase vertex rules (feature width, duplicate ids), when there are vertex tables;
  idmap         id type, type codes, dense vids: a rank map over integer ids (no join) or a sorted
                dictionary; the idmap/vertices/features tables;
  map           endpoints -> vids (numpy tasks with the broadcast rank map, or two joins for string
                ids), missing endpoints, self-loops, split by source-vid range;
  sort, write   per vid range: sort, duplicate policy, dense eids, Parquet, degree counts;
  stats         degree histograms and power-law fit from the per-range degree counts;
  manifest      counts, schema and timings.

No per-row Python loop, no collect of rows: only counts and per-vertex key sets reach the driver.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from glisp_core.config import Config, IngestConfig, to_dict
from glisp_core.dataset.layout import DatasetVersion, check_name, list_versions
from glisp_core.dataset.manifest import Manifest, StageRecord, now_iso
from glisp_core.dataset.paths import confine, confine_all
from glisp_core.dataset.publish import VersionPublisher, file_fingerprints, fingerprint
from glisp_core.errors import BadInputError
from spark_jobs.ingest.phases import Phases
from spark_jobs.ingest.sources import IngestPlan
from spark_jobs.ingest.stats import degree_metrics, merge_frequencies

FORMAT_TAG = "glisp-ingest-2"  # bump when the output of the same input and params changes


def _find_existing(root: Path, graph: str, fp: str, version: str) -> DatasetVersion | None:
    candidates = [version] if version else list(reversed(list_versions(root, graph)))
    for v in candidates:
        dv = DatasetVersion(root, graph, v)
        try:
            rec = Manifest.read(dv.manifest_path).stages.get("ingest")
        except Exception:  # noqa: BLE001 - an unreadable manifest is simply not a match
            continue
        if rec is not None and rec.fingerprint == fp and dv.ingest.exists():
            return dv
    return None


def ingest_fingerprint(ing: IngestConfig, inputs: list[dict]) -> str:
    params = {k: v for k, v in to_dict(ing).items() if k not in ("version", "max_rank_map_vertices")}
    return fingerprint(FORMAT_TAG, params, inputs)


def run_ingest(
    spark, cfg: Config, ingest: IngestConfig | None = None, force: bool = False, log=print
) -> DatasetVersion:
    """Ingest ``ingest`` (default ``cfg.ingest``) into a new version under ``cfg.dataset.root``."""
    ing = ingest or cfg.ingest
    t0 = time.perf_counter()
    ph = Phases(spark, "ingest")
    with ph("fingerprint"):
        plan = IngestPlan(ing)
        root = Path(cfg.dataset.root)
        confine(root, cfg.dataset.confine_to, "dataset.root")
        confine_all(plan.all_input_paths(), cfg.dataset.confine_to, "ingest table or feature file")
        inputs = file_fingerprints(plan.all_input_paths(), cfg.dataset.checksum)
        fp = ingest_fingerprint(ing, inputs)
        existing = _find_existing(root, ing.graph, fp, ing.version)
    if existing is not None and not force:
        log(f"ingest: {existing.path} is up to date (same inputs and parameters); use --force to rebuild")
        return existing
    # --force rebuilds the version that holds these inputs in place instead of adding a duplicate
    version = ing.version or (
        existing.version if existing else f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{fp[:8]}"
    )
    check_name("version", version)
    with VersionPublisher(root, ing.graph, version) as pub:
        from spark_jobs.ingest.build import IngestRun

        run = IngestRun(spark, plan, pub.tmp_dv, pub.tmp_dv.path / "_staging", ph, log)
        try:
            built = run.build()
        finally:
            run.cleanup()
        with ph("stats"):
            metrics = degree_metrics(merge_frequencies(built.freq), built.n_vertices, built.n_edges)
        with ph("manifest"):
            manifest = _manifest(ing, pub.tmp_dv, built, metrics)
            manifest.inputs = inputs
            manifest.stages["ingest"].fingerprint = fp
        manifest.stages["ingest"].timings.update(_totals(ph, built, t0))
        t = manifest.stages["ingest"].timings
        log(
            f"ingest: |V|={built.n_vertices:,} |E|={built.n_edges:,} from {built.edge_rows_in:,} edge rows in "
            f"{t['total_s']:.1f}s ({t['edges_per_s']:,.0f} edges/s)"
        )
        return pub.commit(manifest)


def _totals(ph: Phases, built, t0: float) -> dict[str, float]:
    out = ph.timings()
    total = time.perf_counter() - t0
    out["total_s"] = round(total, 3)
    out["total_jobs"] = sum(v for k, v in out.items() if k.endswith("_jobs"))
    out["edges_per_s"] = round(built.edge_rows_in / max(total, 1e-9), 1)
    return out


@dataclass
class Built:
    """What the build phases found, for the manifest."""

    n_vertices: int = 0
    n_edges: int = 0
    edge_rows_in: int = 0
    id_type: str = "int"
    id_map: str = ""  # "rank" (broadcast rank map) or "join" (sorted dictionary + joins)
    vertex_types: list[str] = field(default_factory=list)
    edge_types: list[str] = field(default_factory=list)
    per_vtype: dict[str, int] = field(default_factory=dict)
    per_etype: dict[str, int] = field(default_factory=dict)
    feature_dim: int = 0
    label_names: list[str] | None = None
    maxlab: int | None = None
    nfeat: int = 0
    has_w: bool = False
    has_ts: bool = False
    rejects: dict[str, int] = field(default_factory=dict)
    loops: int = 0
    loops_dropped: int = 0
    dups_removed: int = 0
    doubled: int = 0
    freq: dict = field(default_factory=dict)


def _manifest(ing: IngestConfig, out: DatasetVersion, b: Built, metrics: dict) -> Manifest:
    counts = {
        "vertices": b.n_vertices,
        "edges": b.n_edges,
        "input_edge_rows": b.edge_rows_in,
        "vertices_per_type": b.per_vtype,
        "edges_per_type": b.per_etype,
        "rejects": b.rejects,
        "rejected_rows": sum(b.rejects.values()),
        "self_loops": b.loops,
        "self_loops_dropped": b.loops_dropped,
        "duplicates_removed": b.dups_removed,
        "reverse_edges_added": b.doubled,
        "vertices_with_features": b.nfeat,
        "id_map": b.id_map,
    }
    schema = {
        "directed": ing.directed,
        "num_vertices": b.n_vertices,
        "num_edges": b.n_edges,
        "vertex_types": b.vertex_types,
        "edge_types": b.edge_types,
        "weighted": b.has_w,
        "timestamped": b.has_ts,
        "feature_dim": b.feature_dim,
        "num_classes": int(b.maxlab) + 1 if b.maxlab is not None else 0,
        "id_type": b.id_type,
    }
    if b.label_names is not None:
        schema["label_names"] = b.label_names
    rec = StageRecord(
        name="ingest",
        path="ingest",
        fingerprint="",
        params=to_dict(ing),
        counts=counts,
        metrics=metrics,
        timings={},
        completed_at=now_iso(),
    )
    return Manifest(graph=ing.graph, version=out.version, created_at=now_iso(), schema=schema, stages={"ingest": rec})


def no_edges_error(plan: IngestPlan, edge_rows_in: int) -> BadInputError:
    return BadInputError(
        plan.files[0],
        "*",
        0,
        edge_rows_in,
        "are valid edges: no edge is left to ingest",
        hint="see the quarantined rows under ingest/rejects/",
    )


def cleanup_stage(stage: Path) -> None:
    shutil.rmtree(stage, ignore_errors=True)
