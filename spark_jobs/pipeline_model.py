"""The model stages of a refresh: re-apply a configured model to the new version (``infer.model``).

A data platform trains once in a while and re-applies the model on every snapshot (GLISP section I).
When ``infer.model`` names a training run that the new version does not hold, the pipeline carries the
checkpoint over from the version ``latest`` names (or the newest one that has it), publishing it into
the new version as ``train/<model>`` over the new partition run (its record says where it came from),
then runs layerwise inference. ``glisp promote`` then requires the inference stage too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glisp_core.config import Config, with_values
from glisp_core.dataset.layout import DatasetVersion, list_versions
from glisp_core.dataset.manifest import Manifest
from glisp_core.dataset.versions import read_latest
from glisp_core.errors import StageError


def _holder_of(dv: DatasetVersion, name: str) -> DatasetVersion | None:
    """The version to take ``train/<name>`` from: latest first, then the newest other version holding it."""
    gdir = dv.root / dv.graph
    order = [read_latest(gdir)] + list(reversed(list_versions(dv.root, dv.graph)))
    for v in order:
        if v and v != dv.version:
            other = DatasetVersion(dv.root, dv.graph, v)
            if f"train/{name}" in Manifest.read(other.manifest_path).stages:
                return other
    return None


def carry_model(dv: DatasetVersion, name: str, run: str) -> None:
    """Publish ``train/<name>`` into ``dv`` from an earlier version when ``dv`` does not have it."""
    from glisp_core.models import load_checkpoint
    from glisp_train.publish import publish_model

    if f"train/{name}" in Manifest.read(dv.manifest_path).stages:
        return
    src = _holder_of(dv, name)
    if src is None:
        raise StageError(f"infer.model={name!r}: no version of graph {dv.graph!r} holds train/{name}; train it first "
                         f"('glisp train') or leave infer.model empty")  # fmt: skip
    model, doc = load_checkpoint(Path(src.train(name)))
    publish_model(dv, name, model, run, direction=str(doc.get("direction", "in")),
                  extra={"carried_from": f"{src.graph}/{src.version}"})  # fmt: skip


def infer_stage(spark: Any, cfg: Config, dv: DatasetVersion, run: str, force: bool = False) -> str:
    """Carry the model if needed, run inference over ``run``; the stage name promote must require."""
    from glisp_infer.job import run_infer

    carry_model(dv, cfg.infer.model, run)
    rec = run_infer(spark, with_values(cfg, "infer", partition=run), dv, force=force)
    return rec.name
