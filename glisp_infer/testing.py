"""Publish a model as a ``train/<run>`` stage without the training package (tests and benchmarks).

It writes exactly what ``glisp train`` publishes for inference to read: the checkpoint files
(``glisp_core.models.save_checkpoint``) at the root of ``train/<run>/``, and a manifest record whose
params name the partition run the model belongs to.
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
    params = {"partition": partition, **model.spec.to_dict(), "weights_sha256": h.hexdigest()}
    pub = StagePublisher(dv, f"train/{run}", dv.train(run), params, depends=["ingest", f"serialize/{partition}"])
    with pub:
        save_checkpoint(pub.tmp, model, extra=extra)
        return pub.commit(counts={"parameters": sum(p.numel() for p in model.parameters())})
