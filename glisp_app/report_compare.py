"""``glisp report DATASET --compare OTHER``: two versions side by side, stage by stage.

What a scheduled refresh wants to see after each snapshot: did any stage get slower, did the partition
quality drift, did the data grow. Every numeric count, metric and timing that either version's stage
recorded is listed with both values and their ratio (OTHER / DATASET); sizes come from the stages'
own byte counts, so nothing but the two manifests is read.

Then, for every inference run of OTHER that an incremental refresh (``infer.incremental``) made against
DATASET's version, the embedding version: the path it took (and why), the share of rows recomputed and affected
per layer, and the drift of its final embeddings (cosine distance quantiles, top-k neighbours changed,
predictions changed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from glisp_app.text_tables import fmt, table
from glisp_core.dataset.manifest import Manifest


def _numbers(d: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Flatten the numeric leaves of a record section (lists of numbers become their sum)."""
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            out[key] = float(v)
        elif isinstance(v, Mapping) and "hist" not in k.lower():
            out.update(_numbers(v, key + "."))
        elif isinstance(v, list) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            out[f"{key} (sum)"] = float(sum(v))
    return out


def compare_rows(a: Manifest, b: Manifest) -> list[list[Any]]:
    """[stage, quantity, value in a, value in b, b / a] for every numeric quantity either stage recorded."""
    rows: list[list[Any]] = []
    schema_a, schema_b = _numbers(a.schema), _numbers(b.schema)
    for k in sorted(set(schema_a) | set(schema_b)):
        rows.append(["schema", k, schema_a.get(k), schema_b.get(k), _ratio(schema_a.get(k), schema_b.get(k))])
    for name in sorted(set(a.stages) | set(b.stages)):
        ra, rb = a.stages.get(name), b.stages.get(name)
        vals_a = {
            f"{s}.{k}": v
            for s in ("timings", "metrics", "counts")
            for k, v in _numbers(getattr(ra, s) if ra else {}).items()
        }
        vals_b = {
            f"{s}.{k}": v
            for s in ("timings", "metrics", "counts")
            for k, v in _numbers(getattr(rb, s) if rb else {}).items()
        }
        if ra is None or rb is None:
            rows.append([name, "published", fmt(ra is not None), fmt(rb is not None), None])
        for k in sorted(set(vals_a) | set(vals_b), key=lambda k: (not k.startswith("timings.total"), k)):
            rows.append([name, k, vals_a.get(k), vals_b.get(k), _ratio(vals_a.get(k), vals_b.get(k))])
    return rows


def _ratio(x: float | None, y: float | None) -> float | None:
    return round(y / x, 3) if x and y is not None else None


DRIFT_KEYS = (
    ("cos_p50", "cosine distance p50"),
    ("cos_p90", "cosine distance p90"),
    ("cos_p99", "cosine distance p99"),
    ("cos_max", "cosine distance max"),
    ("moved_share", "share of vertices moved"),
    ("knn_changed_share", "share with top-k neighbours changed"),
    ("predictions_changed_share", "share of predictions changed"),
    ("sampled", "vertices the drift sampled (a predicted run)"),
)


def embedding_rows(a: Manifest, b: Manifest) -> list[list[Any]]:
    """[run, quantity, value] for B's inference runs refreshed against A's version (either way round)."""
    rows: list[list[Any]] = []
    for first, second in ((a, b), (b, a)):
        for name in sorted(second.stages):
            rec = second.stages[name]
            inc = rec.counts.get("incremental") if name.startswith("infer/") else None
            if not inc or inc.get("previous") != f"{first.graph}/{first.version}":
                continue
            label = f"{second.version}:{name}"
            rows.append([label, "path", f"{inc.get('path')}{': ' + inc['reason'] if inc.get('reason') else ''}"])
            for key in ("recomputed_share", "affected_share"):
                for i, v in enumerate(inc.get(key) or [], 1):
                    rows.append([label, f"{key.replace('_', ' ')}, layer {i}", v])
            drift = rec.metrics.get("drift") or {}
            for key, what in DRIFT_KEYS:
                if key in drift:
                    rows.append([label, what, drift[key]])
            if "knn_k" in drift:
                rows.append([label, "top-k sample (k, queries)", f"{drift['knn_k']}, {drift['knn_queries']}"])
    return rows


def compare_text(a: Manifest, b: Manifest) -> str:
    head = [f"Comparison: A = {a.graph}/{a.version}   B = {b.graph}/{b.version}"]
    out = head + table(["stage", "quantity", "A", "B", "B/A"], compare_rows(a, b))
    emb = embedding_rows(a, b)
    if emb:
        out += ["", "Embedding versions (incremental refreshes between A and B)"]
        out += table(["run", "quantity", "value"], emb)
    return "\n".join(out)
