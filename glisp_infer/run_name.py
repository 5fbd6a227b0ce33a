"""Which ``infer/<run>`` a run of ``glisp infer`` publishes, from the manifest alone.

Kept free of the model's imports (torch, PyG): the CLI asks it before it loads the model, to know whether the
version already holds a record of the run (:mod:`glisp_infer.cli`), and the job names its stage by it.
"""

from __future__ import annotations

from glisp_core.dataset.manifest import Manifest
from glisp_core.errors import StageError


def latest_train_run(man: Manifest) -> str:
    run = man.latest_run("train")
    if run is None:
        raise StageError(
            f"{man.graph}/{man.version}: no training run published; run 'glisp train' first (or pass --model RUN)"
        )
    return run


def run_name(run: str | None, model_run: str, order: str) -> str:
    """``infer.run`` when set, else ``<model run>-<order>``."""
    return run or f"{model_run}-{order}"
