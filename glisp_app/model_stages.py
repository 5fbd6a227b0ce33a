"""The model stages of a refresh: train on the new version (``pipeline.train``), re-apply a model to it.

A data platform trains once in a while and re-applies the model on every snapshot (GLISP section I).

- **Train** (``pipeline.train = true``): ``glisp train --serve`` (:mod:`glisp_train.with_servers`) over
  the new partition run (for ``train.task = "link"``, its link-split run, made first): servers started
  on this machine for the training and stopped after. A model already published with the same settings
  over the same run is not trained again (no server starts).
- **Infer** (``infer.model``, or the model just trained): when the model is a training run the new
  version does not hold, the checkpoint is carried over from the version ``latest`` names (or the
  newest one that has it) and published into the new version as ``train/<model>`` over the new
  partition run (its record says where it came from); then layerwise inference runs.

``glisp promote`` then requires these stages too.
"""

from __future__ import annotations

from typing import Any

from glisp_core.config import Config, with_values
from glisp_core.dataset.layout import DatasetVersion, list_versions
from glisp_core.dataset.manifest import read_manifest
from glisp_core.dataset.stages import run_of
from glisp_core.dataset.versions import read_latest
from glisp_core.errors import StageError


def holder_of(dv: DatasetVersion, name: str) -> DatasetVersion | None:
    """The version to take ``train/<name>`` from: latest first, then the newest other version holding it."""
    gdir = dv.root / dv.graph
    order = [read_latest(gdir)] + list(reversed(list_versions(dv.root, dv.graph)))
    for v in order:
        if v and v != dv.version:
            other = DatasetVersion(dv.root, dv.graph, v)
            if f"train/{name}" in read_manifest(other).stages:
                return other
    return None


def carry_model(dv: DatasetVersion, name: str, run: str) -> None:
    """Publish ``train/<name>`` into ``dv`` from an earlier version when ``dv`` does not have it."""
    from glisp_core.models import load_checkpoint
    from glisp_train.publish import publish_model

    if f"train/{name}" in read_manifest(dv).stages:
        return
    src = holder_of(dv, name)
    if src is None:
        raise StageError(
            f"infer.model={name!r}: no version of graph {dv.graph!r} holds train/{name}; train it first "
            f"('glisp train') or leave infer.model empty"
        )
    model, doc = load_checkpoint(src.train(name))
    publish_model(
        dv,
        name,
        model,
        run,
        direction=str(doc.get("direction", "in")),
        extra={"carried_from": f"{src.graph}/{src.version}"},
    )


def train_stage(spark: Any, cfg: Config, dv: DatasetVersion, run: str, force: bool = False) -> str:
    """Train on ``run`` through servers started for it (``glisp train --serve``); the stage name to require."""
    from glisp_train.run import run_training
    from glisp_train.with_servers import run_name

    serve_run = run
    if cfg.train.task == "link":  # the servers must not see the held-out edges
        from glisp_train.link_split import run_link_split

        serve_run = run_of(run_link_split(spark, cfg, dv, run, force=force).name)
    rc = run_training(cfg, str(dv.path), serve_run, force=force)
    if rc != 0:
        raise StageError(f"glisp train --serve {serve_run} exited with {rc}")
    return f"train/{run_name(cfg, serve_run)}"


def infer_stage(spark: Any, cfg: Config, dv: DatasetVersion, run: str, force: bool = False) -> str:
    """Carry the model if needed, run inference over ``run``; the stage name promote must require."""
    from glisp_infer.job import run_infer

    carry_model(dv, cfg.infer.model, run)
    rec = run_infer(spark, with_values(cfg, "infer", partition=run), dv, force=force)
    return rec.name
