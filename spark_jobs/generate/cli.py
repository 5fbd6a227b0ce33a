"""``glisp generate rmat``: write a synthetic R-MAT graph as raw input files plus a ready ingest config.

Built-in real graphs need no generate step: ``glisp ingest --builtin NAME`` reads them in place.
"""

from __future__ import annotations

import argparse

from glisp_core.config import Config, with_values
from glisp_core.errors import ConfigError


def _splits(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected three fractions like 0.6,0.2,0.2 (got {text!r})") from None
    if len(vals) != 3:
        raise argparse.ArgumentTypeError(f"expected three fractions train,val,test (got {text!r})")
    return vals


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="source", required=True, metavar="SOURCE")
    p = sub.add_parser("rmat", help="R-MAT / Kronecker power-law graph (Graph500 defaults), written by Spark")
    p.add_argument("--out", "-o", required=True, help="output directory or store URI (edges/, vertices/, ingest.toml)")
    p.add_argument("--format", choices=["csv", "parquet"], default="csv", help="file format (default csv)")
    p.add_argument("--graph", default="", help="graph name written into ingest.toml (default rmat-s<S>-ef<F>-seed<N>)")
    g = p.add_argument_group("rmat (defaults from config section [rmat])")
    g.add_argument("--scale", type=int, help="2^scale vertices")
    g.add_argument("--edge-factor", type=int, help="edges = edge factor * 2^scale")
    g.add_argument("--seed", type=int)
    g.add_argument("--noise", type=float, help="per-level NSKG noise of the quadrant probabilities")
    g.add_argument("--no-permute", action="store_true", help="keep R-MAT's raw ids (vertex 0 is the biggest hub)")
    g.add_argument("--features", type=int, metavar="D", help="synthetic feature width")
    g.add_argument("--classes", type=int, metavar="C", help="synthetic label classes")
    g.add_argument("--splits", type=_splits, metavar="TR,VA,TE", help="train/val/test fractions, e.g. 0.6,0.2,0.2")
    g.add_argument("--edge-types", type=int, metavar="T", help="number of synthetic edge types")
    g.add_argument("--weights", action="store_true", default=None, help="add a weight column in (0, 1]")
    g.add_argument("--timestamps", action="store_true", default=None, help="add a ts column (epoch seconds)")
    g.add_argument("--files", type=int, metavar="K", help="output files per table (0 = Spark's parallelism)")
    _common_after_source(p)


def _common_after_source(p: argparse.ArgumentParser) -> None:
    """Accept glisp's common flags after SOURCE too; SUPPRESS keeps values given before SOURCE intact."""
    g = p.add_argument_group("common (also accepted before SOURCE)")
    s = argparse.SUPPRESS
    g.add_argument("--config", "-c", default=s, help="a TOML config file layered over conf/default.toml")
    g.add_argument("--set", action="append", default=s, metavar="SECTION.KEY=VALUE", help="override one config key")
    g.add_argument("--root", default=s, help="dataset root directory (dataset.root)")
    g.add_argument("--master", default=s, help="Spark master (spark.master)")


def main(args: argparse.Namespace, cfg: Config) -> int:
    if args.source != "rmat":  # pragma: no cover - argparse restricts the choices
        raise ConfigError("command line", "SOURCE", f"expected 'rmat' (got {args.source!r})")
    cfg = with_values(
        cfg,
        "rmat",
        scale=args.scale,
        edge_factor=args.edge_factor,
        seed=args.seed,
        noise=args.noise,
        permute=False if args.no_permute else None,
        features=args.features,
        classes=args.classes,
        splits=args.splits,
        edge_types=args.edge_types,
        weights=args.weights,
        timestamps=args.timestamps,
        files=args.files,
    )
    from glisp_spark.session import get_spark
    from spark_jobs.generate.rmat import check_config, generate_rmat

    check_config(cfg.rmat)  # fail on bad parameters before starting a JVM
    spark = get_spark(cfg.spark)
    r = generate_rmat(spark, cfg.rmat, args.out, fmt=args.format, graph=args.graph)
    print(
        f"generate rmat: {r['edges']:,} edges over {r['vertices']:,} vertices written to {r['out']} "
        f"in {r['seconds']:.2f} s ({r['edges'] / max(r['seconds'], 1e-9):,.0f} edges/s)"
    )
    if "://" in r["config"]:  # --config reads a local file: fetch the generated one first
        print(f"ingest it with: glisp ingest --config <a local copy of {r['config']}>")
    else:
        print(f"ingest it with: glisp ingest --config {r['config']}")
    return 0
