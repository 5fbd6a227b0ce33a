"""``glisp infer``: :mod:`glisp_infer.cli`, after carrying the model into the version when it was trained on an
earlier one.

Why here: a refresh infers every new snapshot with the model trained on an earlier one (a scheduled DAG that
does not retrain). The model is published into the new version first (``train/<model>`` with
``carried_from``, the weights unchanged), as ``glisp pipeline`` does; ``glisp_infer`` cannot do it itself,
since publishing a model is ``glisp_train``'s (its layer's neighbour).
"""

from __future__ import annotations

import argparse

from glisp_app.model_stages import carry_model, holder_of
from glisp_core.config import Config
from glisp_core.dataset.layout import DatasetVersion, resolve_dataset
from glisp_core.dataset.manifest import read_manifest
from glisp_core.errors import StageError
from glisp_infer import cli as infer_cli


def add_arguments(p: argparse.ArgumentParser) -> None:
    infer_cli.add_arguments(p)


def main(args: argparse.Namespace, cfg: Config) -> int:
    name = args.model or cfg.infer.model
    if name:
        dv = resolve_dataset(args.dataset, cfg.dataset.root)
        stages = read_manifest(dv).stages
        if f"train/{name}" not in stages:
            run = cfg.infer.partition or _trained_on(dv, name)
            if f"serialize/{run}" not in stages:
                raise StageError(
                    f"{dv.graph}/{dv.version}: train/{name} was trained on partition run {run!r}, which this "
                    f"version has not serialized; run 'glisp serialize' for it or set infer.partition"
                )
            carry_model(dv, name, run)
            print(f"infer: train/{name} carried into {dv.graph}/{dv.version} from an earlier version", flush=True)
    return infer_cli.main(args, cfg)


def _trained_on(dv: DatasetVersion, name: str) -> str:
    """The partition run the newest earlier version's ``train/<name>`` was trained on."""
    src = holder_of(dv, name)
    if src is None:
        raise StageError(
            f"--model {name}: no version of graph {dv.graph!r} holds train/{name}; train it first ('glisp train')"
        )
    return str(read_manifest(src).stage(f"train/{name}").params.get("partition_run", ""))
