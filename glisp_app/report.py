"""``glisp report DATASET``: what a dataset version holds, how each stage made it, and how runs compare.

Everything comes from the version's stage records, so the report never touches Spark or the data files. Stage
records are printed generically (every count, metric and timing a stage recorded shows up without
changes here); partition and serialize stages get comparison tables on top, and the ingest degree
histogram becomes a log-log PNG (matplotlib, Agg, imported only when plotting).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from glisp_app.text_tables import as_number, dict_lines, fmt, table
from glisp_core.config import Config
from glisp_core.dataset.layout import DatasetVersion, resolve_dataset
from glisp_core.dataset.manifest import Manifest, StageRecord, read_manifest
from glisp_core.dataset.stages import run_of
from glisp_core.errors import GlispError

PLOT_NAME = "degree_distribution.png"
KINDS = ("out", "in", "total")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", metavar="DATASET", help="graph, graph/version, or a version directory")
    parser.add_argument("--json", action="store_true", help="print the manifest as JSON (nothing else on stdout)")
    parser.add_argument(
        "--plot", metavar="PATH", help=f"degree distribution PNG (default <version>/report/{PLOT_NAME})"
    )
    parser.add_argument("--no-plot", action="store_true", help="do not write the degree distribution plot")
    parser.add_argument("--compare", metavar="OTHER", help="another version (or graph): both side by side, per stage")
    parser.add_argument("--stage", metavar="NAME", help="show one stage only, e.g. ingest, train/node-sage-whole")
    parser.add_argument(
        "--verify", action="store_true", help="also hash every partition file against its record (reads them all)"
    )


def main(args: argparse.Namespace, cfg: Config) -> int:
    """Print the JSON manifest or the summary; write the degree plot unless --json without --plot."""
    dv = resolve_dataset(args.dataset, cfg.dataset.root)
    manifest = read_manifest(dv)
    if args.compare:
        from glisp_app.report_compare import compare_text

        other = resolve_dataset(args.compare, cfg.dataset.root)
        print(compare_text(manifest, read_manifest(other)))
        return 0
    if args.stage:
        print(stage_summary(manifest, args.stage))
        return 0
    if args.json:
        print(manifest.to_json())
    else:
        print(summary(manifest, dv))
    want_plot = not args.no_plot and (args.plot or not args.json)
    if want_plot:
        target = Path(args.plot) if args.plot else _plot_target(dv)
        msg_out = sys.stderr if args.json else sys.stdout
        hists = degree_histograms(ingest_metrics(manifest))
        if not hists:
            print("degree plot: the ingest stage recorded no degree histogram; nothing plotted", file=msg_out)
        else:
            try:
                plot_degree_distribution(hists, target, title=f"{manifest.graph}/{manifest.version}")
                print(f"degree plot: {target}", file=msg_out)
            except OSError as e:
                print(f"degree plot: cannot write {target} ({e})", file=sys.stderr)
    return _report_problems(dv, manifest, args.verify, sys.stderr if args.json else sys.stdout)


def _report_problems(dv: DatasetVersion, manifest: Manifest, verify: bool, out: Any) -> int:
    """The artifact check (glisp_app.report_verify): 1 and one line per problem, else 0 and one line."""
    from glisp_app.report_verify import problems

    found = problems(dv, manifest, verify)
    what = "records, files, sizes" + (" and content hashes" if verify else "")
    if not found:
        print(f"Integrity: ok ({what} checked)", file=out)
        return 0
    print(f"Integrity: {len(found)} problem(s) ({what} checked)", file=sys.stderr)
    for line in found:
        print(f"  {line}", file=sys.stderr)
    return 1


# ----------------------------------------------------------------------------------------------
# Summary
# ----------------------------------------------------------------------------------------------


def stage_lines(rec: StageRecord) -> list[str]:
    t = rec.timings.get("total_s")
    head = f"Stage {rec.name}"
    extra = [f"completed {rec.completed_at}"] if rec.completed_at else []
    if t is not None:
        extra.append(f"{fmt(float(t))} s")
    if rec.depends:
        extra.append("depends on " + ", ".join(rec.depends))
    lines = [head + (f"  ({'; '.join(extra)})" if extra else "")]
    for title, d in (
        ("counts", rec.counts),
        ("metrics", {k: v for k, v in rec.metrics.items() if k != "epochs"}),  # the epochs: the training table
        ("timings", rec.timings),
        ("params", rec.params),
    ):
        if d:
            lines.append(f"  {title}:")
            lines += dict_lines(d, "    ")
    return lines


def schema_lines(m: Manifest) -> list[str]:
    s = m.schema
    if not s:
        return ["Schema: (none recorded)"]
    vt, et = s.get("vertex_types", []), s.get("edge_types", [])
    lines = [
        "Schema",
        f"  |V| {fmt(s.get('num_vertices'))}   |E| {fmt(s.get('num_edges'))} directed rows   "
        f"{'directed' if s.get('directed', True) else 'undirected (both directions stored)'}",
        f"  vertex types ({len(vt)}): {fmt(vt)}",
        f"  edge types ({len(et)}): {fmt(et)}",
        f"  weighted {fmt(s.get('weighted'))}   timestamped {fmt(s.get('timestamped'))}   "
        f"features {fmt(s.get('feature_dim', 0))}   classes {fmt(s.get('num_classes', 0))}   id type {s.get('id_type', '-')}",
    ]
    known = {
        "num_vertices",
        "num_edges",
        "directed",
        "vertex_types",
        "edge_types",
        "weighted",
        "timestamped",
        "feature_dim",
        "num_classes",
        "id_type",
    }
    rest = {k: v for k, v in s.items() if k not in known}
    if rest:
        lines += dict_lines(rest, "  ")
    return lines


def _plot_target(dv: DatasetVersion) -> Path:
    """``report/`` beside a local version; the working directory for a version in an object store."""
    if dv.path.is_local:
        return dv.path.local / "report" / PLOT_NAME
    return Path(f"{dv.graph}-{dv.version}-{PLOT_NAME}")


def reject_lines(m: Manifest, dv: DatasetVersion | None) -> list[str]:
    rec = m.stages.get("ingest")
    if rec is None:
        return []
    found = {k: v for k, v in rec.counts.items() if "reject" in k.lower()}
    nonzero = {
        k: v
        for k, v in found.items()
        if (isinstance(v, Mapping) and any(as_number(x) for x in v.values())) or (as_number(v) or 0) > 0
    }
    if not nonzero:
        return []
    lines = ["Rejects (quarantined input rows)"] + dict_lines(nonzero, "  ")
    if dv is not None and dv.store.exists(dv.rejects()):
        lines.append(f"  rows are in {dv.rejects()}")
    return lines


def partition_rows(m: Manifest) -> list[list[Any]]:
    """One row per partition run: run, algorithm, parts, RF, VB, EB, interior fraction, seconds."""
    rows = []
    for rec in m.stages_with_prefix("partition/"):
        met, par, cnt = rec.metrics, rec.params, rec.counts
        rows.append(
            [
                run_of(rec.name),
                str(par.get("algorithm", "-")),
                par.get("parts", cnt.get("parts")),
                as_number(met.get("rf")),
                as_number(met.get("vb")),
                as_number(met.get("eb")),
                as_number(met.get("interior_fraction")),
                as_number(rec.timings.get("total_s")),
            ]
        )
    big = float("inf")
    rows.sort(key=lambda r: (r[2] if isinstance(r[2], int) else big, r[3] if r[3] is not None else big, r[0]))
    return rows


def partition_table(m: Manifest) -> list[str]:
    rows = partition_rows(m)
    if len(rows) < 2:
        return []
    head = ["run", "algorithm", "parts", "RF", "VB", "EB", "interior", "seconds"]
    return ["Partition runs (sorted by parts, then RF)"] + table(head, rows)


def _bytes_dicts(d: Mapping[str, Any], prefix: str = "") -> list[tuple[str, dict[str, float]]]:
    """Every (nested) dict whose values are all numbers, with the path to it."""
    out = []
    for k, v in d.items():
        if isinstance(v, Mapping) and v:
            if all(as_number(x) is not None for x in v.values()):
                out.append((prefix + str(k), {str(kk): float(x) for kk, x in v.items()}))
            else:
                out += _bytes_dicts(v, f"{prefix}{k}.")
    return out


def serialize_lines(m: Manifest) -> list[str]:
    """Per serialize stage: each numeric dict as a table; dicts of bytes also per directed edge."""
    recs = m.stages_with_prefix("serialize/")
    if not recs:
        return []
    n_edges = as_number(m.schema.get("num_edges")) or 0
    lines = [f"Serialized partitions (|E| = {fmt(int(n_edges))} directed edges)"]
    for rec in recs:
        lines.append(f"  {rec.name}")
        for where, d in (("counts", rec.counts), ("metrics", rec.metrics)):
            for name, vals in _bytes_dicts(d):
                low = name.lower()
                is_bytes = (
                    ("byte" in low or "size" in low)
                    and "per_edge" not in low
                    and all(float(x).is_integer() for x in vals.values())
                )
                if is_bytes and n_edges:
                    rows = [[k, int(v), v / n_edges] for k, v in vals.items()]
                    total = sum(vals.values())
                    rows.append(["total", int(total), total / n_edges])
                    lines.append(f"    {where}.{name}")
                    lines += table(["field", "bytes", "bytes/edge"], rows, "      ")
                else:
                    lines.append(f"    {where}.{name}")
                    lines += table(["key", "value"], [[k, v] for k, v in vals.items()], "      ")
            scalars = {k: v for k, v in d.items() if not isinstance(v, Mapping)}
            if scalars:
                lines.append(f"    {where}: " + fmt(scalars))
        both = {**rec.counts, **rec.metrics}
        total_bytes = next(
            (as_number(both[k]) for k in ("bytes_total", "total_bytes", "bytes") if as_number(both.get(k))), None
        )
        if total_bytes and n_edges and not any(k in both for k in ("bytes_per_edge", "bytes_per_directed_edge")):
            lines.append(
                f"    {fmt(int(total_bytes))} bytes in all = {fmt(total_bytes / n_edges)} bytes per directed edge"
            )
    return lines


def _same_setup(a: StageRecord, b: StageRecord) -> bool:
    """Two inference runs that differ only in their order (and name)."""
    skip = {"order"}
    return {k: v for k, v in a.params.items() if k not in skip} == {k: v for k, v in b.params.items() if k not in skip}


# (header, metric key, number?) of an inference run's row after its setup columns, and of a layer's row
INFER_COLUMNS = (
    ("cache share", "cache_share_max", True),
    ("chunk reads", "chunk_reads", False),
    ("vs ns", "vs_ns", False),  # the run's chunk reads against the NS run of the same setup (computed here)
    ("hit ratio", "dynamic_hit_ratio", True),
    ("fill chunks", "fill_chunks", False),
    ("fill/model", "fill_over_model", True),
    ("exchange/model", "exchange_over_model", True),
    ("bytes written", "bytes_written", False),
    ("compression", "compression_ratio", True),
)
INFER_LAYER_COLUMNS = (
    ("fill s", "fill_s", True),
    ("model s", "model_s", True),
    ("fill/model", "fill_over_model", True),
    ("exchange/model", "exchange_over_model", True),
    ("halo rows", "halo_rows", False),
    ("static hits", "static_hits", False),
    ("chunk reads", "chunk_reads", False),
    ("hit ratio", "dynamic_hit_ratio", True),
    ("fill chunks", "fill_chunks", False),
    ("bytes written", "bytes_written", False),
    ("compression", "compression_ratio", True),
    ("wall s", "wall_s", True),
)


def _metric_cells(d: Mapping[str, Any], columns: tuple[tuple[str, str, bool], ...]) -> list[Any]:
    return [(as_number(d.get(k)) if number else d.get(k)) for _, k, number in columns]


def _infer_row(rec: StageRecord, recs: list[StageRecord]) -> list[Any]:
    p, met = rec.params, rec.metrics
    ns = next((r for r in recs if r.params.get("order") == "ns" and _same_setup(r, rec)), None)
    vs = met.get("chunk_reads", 0) / ns.metrics["chunk_reads"] if ns and ns.metrics.get("chunk_reads") else None
    fan = p.get("fanouts")
    setup = [
        run_of(rec.name),
        str(p.get("order")),
        str(p.get("task")),
        "full" if fan and all(f == -1 for f in fan) else fmt(fan),
        str(p.get("cache_policy")),
    ]
    return [*setup, *_metric_cells({**met, "vs_ns": vs}, INFER_COLUMNS), as_number(rec.timings.get("total_s"))]


def infer_lines(m: Manifest) -> list[str]:
    """One row per inference run (chunk reads against the NS run of the same setup), then per layer."""
    recs = m.stages_with_prefix("infer/")
    if not recs:
        return []
    head = ["run", "order", "task", "fanouts", "policy", *(h for h, _, _ in INFER_COLUMNS), "seconds"]
    lines = ["Inference runs (chunk reads: distinct static-cache chunks per batch; hit ratio: of the dynamic cache)"]
    lines += table(head, [_infer_row(rec, recs) for rec in recs])
    for rec in recs:
        layers = rec.metrics.get("layers", {})
        lrows = [[k, *_metric_cells(d, INFER_LAYER_COLUMNS)] for k, d in layers.items()]
        if lrows:
            lines.append(f"  {rec.name} per layer (seconds summed over tasks)")
            lines += table(["layer", *(h for h, _, _ in INFER_LAYER_COLUMNS)], lrows, "    ")
    return lines


TRAIN_COLUMNS = (  # (metric key, header, scale): the per-epoch curve of a training run
    ("loss", "loss", 1.0),
    ("train_acc", "train acc", 1.0),
    ("val_acc", "val acc", 1.0),
    ("val_mrr", "val MRR", 1.0),
    ("val_auc", "val AUC", 1.0),
    ("epoch_s", "train s", 1.0),
    ("eval_s", "eval s", 1.0),
    ("wait_share", "waiting %", 100.0),
    ("cache_hit_ratio", "cache hit %", 100.0),
    ("feature_bytes_fetched", "fetched MiB", 1.0 / 2**20),
)


def train_lines(m: Manifest) -> list[str]:
    """Per training run: the per-epoch curve (loss, validation score, waiting share, cache) and the result."""
    lines: list[str] = []
    for rec in m.stages_with_prefix("train/"):
        got = train_run_lines(rec)
        lines += [""] if lines and got else []
        lines += got
    return lines


def train_run_lines(rec: StageRecord) -> list[str]:
    """One training run's curve and result (nothing for a run without epochs, e.g. a published model)."""
    lines: list[str] = []
    epochs = [e for e in rec.metrics.get("epochs", []) if isinstance(e, Mapping)]
    if epochs:
        p = rec.params
        cols = [c for c in TRAIN_COLUMNS if any(c[0] in e for e in epochs)]
        rows = [
            [e.get("epoch")] + [None if e.get(k) is None else float(e[k]) * sc for k, _, sc in cols] for e in epochs
        ]
        tests = ", ".join(f"{k} {fmt(v)}" for k, v in rec.metrics.items() if k.startswith("test_"))
        ev = rec.metrics.get("evaluation") or {}
        if tests and ev:
            how = "full" if ev.get("mode") == "full" else f"sampled {ev.get('fanouts')}"
            tests += f" (validation and test at {how} neighbourhoods)"
        lines.append(
            f"Training {rec.name}: {p.get('task', '-')} / {p.get('model', '-')} on run {p.get('partition_run', '-')}"
            f" ({p.get('source', '-')}, {p.get('world_size', 1)} process(es), {p.get('device', '-')})"
        )
        lines += table(["epoch"] + [h for _, h, _ in cols], rows)
        lines.append(f"  best epoch {rec.metrics.get('best_epoch', '-')}; {tests or 'no test metrics'}")
    return lines


def summary(m: Manifest, dv: DatasetVersion | None = None) -> str:
    lines = [f"GLISP dataset {m.graph}/{m.version}"]
    if dv is not None:
        lines.append(f"  path     {dv.path}")
    if m.created_at:
        lines.append(f"  created  {m.created_at}")
    if m.inputs:
        nbytes = sum(int(i.get("bytes", 0)) for i in m.inputs)
        lines.append(f"  inputs   {len(m.inputs)} files, {fmt(nbytes)} bytes")
    lines.append(f"  stages   {', '.join(m.stages) or 'none'}")
    lines += [""] + schema_lines(m)
    # the tables a user reads first (results, curves), then every stage's full record
    for block in (train_lines(m), infer_lines(m), partition_table(m), serialize_lines(m), reject_lines(m, dv)):
        if block:
            lines += [""] + block
    for rec in m.stages.values():
        lines += [""] + stage_lines(rec)
    return "\n".join(lines)


def stage_summary(m: Manifest, name: str) -> str:
    """``glisp report --stage NAME``: one stage's record (with its training curve for a train stage)."""
    if name not in m.stages:
        raise GlispError(f"{m.graph}/{m.version}: no stage {name!r} (stages: {', '.join(m.stages) or 'none'})")
    rec = m.stages[name]
    lines = train_run_lines(rec) if name.startswith("train/") else []
    return "\n".join(lines + ([""] if lines else []) + stage_lines(rec))


# ----------------------------------------------------------------------------------------------
# Degree distribution
# ----------------------------------------------------------------------------------------------


def ingest_metrics(m: Manifest) -> dict[str, Any]:
    rec = m.stages.get("ingest")
    return rec.metrics if rec else {}


def _parse_hist(h: Mapping[str, Any]) -> tuple[list[float], list[float], list[float]] | None:
    """(lo, hi, count) per bin from {bin_edges|edges, counts} or {bin_lo|bins|degrees, count|counts}."""
    counts = h.get("counts", h.get("count"))
    if not isinstance(counts, list) or not counts:
        return None
    n = len(counts)
    edges = h.get("bin_edges", h.get("edges"))
    lows = h.get("bin_lo", h.get("bins", h.get("degrees")))
    if isinstance(lows, list) and len(lows) == n + 1:
        edges, lows = lows, None
    if isinstance(edges, list) and len(edges) == n + 1:
        lo, hi = [float(x) for x in edges[:-1]], [float(x) for x in edges[1:]]
    elif isinstance(lows, list) and len(lows) == n:
        lo = [float(x) for x in lows]
        if n >= 2 and lo[-2] > 0 and lo[-1] == 2 * lo[-2]:
            last = 2 * lo[-1]  # log2 bins
        elif n >= 2:
            last = lo[-1] + (lo[-1] - lo[-2])
        else:
            last = lo[-1] + 1
        hi = lo[1:] + [last]
    else:
        return None
    return lo, hi, [float(c) for c in counts]


def degree_histograms(metrics: Mapping[str, Any]) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """kind -> (lo, hi, count) from any ingest metric whose key mentions degree and hist."""
    out: dict[str, tuple[list[float], list[float], list[float]]] = {}
    for key, v in metrics.items():
        k = key.lower()
        if "degree" not in k or "hist" not in k or not isinstance(v, Mapping):
            continue
        suffix = next((kind for kind in KINDS if k.endswith("_" + kind)), "total")
        parsed = _parse_hist(v)
        if parsed is not None:
            out.setdefault(suffix, parsed)
            continue
        for kind, h in v.items():
            if isinstance(h, Mapping):
                p = _parse_hist(h)
                if p is not None:
                    out.setdefault(str(kind), p)
    return out


def plot_degree_distribution(
    hists: Mapping[str, tuple[list[float], list[float], list[float]]], path: Path, title: str = ""
) -> Path:
    """Log-log plot of vertices per degree value (bin count / integer degrees in the bin); degree 0 is noted."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.8))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    isolated = None
    plotted = 0
    for kind in sorted(hists, key=lambda k: KINDS.index(k) if k in KINDS else len(KINDS)):
        lo, hi, cnt = hists[kind]
        xs, ys = [], []
        for a, b, c in zip(lo, hi, cnt, strict=True):
            if a <= 0:
                if a == 0 and b <= 1 and kind == "total":
                    isolated = c
                if b <= 1:
                    continue
                a = 1.0
            if c <= 0:
                continue
            width = max(math.ceil(b) - math.ceil(a), 1)  # integer degrees in [a, b)
            xs.append(a if width == 1 else math.sqrt(a * (a + width - 1)))
            ys.append(c / width)
        if xs:
            ax.loglog(xs, ys, marker="o", markersize=4, linewidth=1, label=f"{kind} degree")
            plotted += 1
    ax.set_xlabel("degree")
    ax.set_ylabel("vertices per degree value")
    note = f" ({int(isolated):,} isolated)" if isolated else ""
    ax.set_title(f"Degree distribution {title}{note}".strip(), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if plotted:
        ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=110, format="png")
    os.replace(tmp, path)
    return path
