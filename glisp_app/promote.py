"""``glisp promote DATASET``: point the graph's ``latest`` at a version whose stages are all published.

``glisp pipeline`` does this itself when its last stage succeeds. A scheduler that runs the stages as
separate tasks (submit/airflow/) calls ``promote`` last, so consumers that follow ``latest`` (servers
with ``serve.follow_latest``, trainers, inference) never see a version that is missing a stage. It
refuses a version that lacks a serialized partition run (or the one named with ``--run``), then applies
retention (``dataset.keep_versions``).
"""

from __future__ import annotations

import argparse

from glisp_core.config import Config
from glisp_core.dataset.layout import resolve_dataset
from glisp_core.dataset.manifest import read_manifest
from glisp_core.dataset.versions import apply_retention, read_latest, set_latest
from glisp_core.errors import StageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", metavar="DATASET", help="graph/version (or a version directory) to promote")
    p.add_argument("--run", help="the partition run consumers need (default: any serialized run)")
    p.add_argument(
        "--require",
        action="append",
        default=[],
        metavar="STAGE",
        help="another stage that must be published first, e.g. reorder/adadne-p8/pds",
    )


def promote(dv, run: str | None = None, require: list[str] | None = None, keep: int = 0) -> str | None:
    """Check ``dv`` is complete, move latest to it, apply retention; returns the previous latest."""
    m = read_manifest(dv)
    needed = ["ingest"] + ([f"serialize/{run}"] if run else []) + list(require or [])
    for name in needed:
        m.stage(name)  # raises naming what is missing, stale or interrupted
    if not run and not any(m.has_stage(r.name) for r in m.stages_with_prefix("serialize/")):
        raise StageError(f"{dv}: no serialized partition run is published; nothing could serve this version")
    before = read_latest(dv.path.parent)
    set_latest(dv)
    apply_retention(dv.root, dv.graph, keep)
    return before


def main(args: argparse.Namespace, cfg: Config) -> int:
    dv = resolve_dataset(args.dataset, cfg.dataset.root)
    before = promote(dv, args.run, args.require, cfg.dataset.keep_versions)
    print(f"{dv.graph}: latest {before or '(none)'} -> {dv.version}")
    return 0
