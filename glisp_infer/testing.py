"""Publish a model as a ``train/<run>`` stage without the training package (tests and benchmarks).

It writes what ``glisp train`` publishes for inference to read: the checkpoint files
(``glisp_core.models.save_checkpoint``, with ``task``, ``partition_run`` and, when given, ``direction`` in
``model.json``) at the root of ``train/<run>/``, and a manifest record whose params name the partition run
(``partition_run``).
"""

from __future__ import annotations

from typing import Any

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.manifest import StageRecord
from glisp_core.dataset.publish import StagePublisher


def publish_model(dv: DatasetVersion, run: str, model: Any, partition: str, extra: dict | None = None) -> StageRecord:
    """Publish ``model`` (a glisp_core.models.GNN) as stage ``train/<run>`` trained on ``partition``."""
    import hashlib

    import torch

    from glisp_core.models import save_checkpoint

    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().to(torch.float32).numpy().tobytes())
    params = {"task": model.spec.task, "model": model.spec.arch, "partition_run": partition,
              "weights_sha256": h.hexdigest()}  # fmt: skip
    pub = StagePublisher(dv, f"train/{run}", dv.train(run), params, depends=["ingest", f"serialize/{partition}"])
    with pub:
        save_checkpoint(pub.tmp, model, extra={"task": model.spec.task, "partition_run": partition, **(extra or {})})
        return pub.commit(counts={"parameters": sum(p.numel() for p in model.parameters())})
