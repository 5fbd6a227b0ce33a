"""Layer 0's learnable node embedding rows (a checkpoint trained with ``train.node_embeddings``) for one task.

The checkpoint keeps them as Parquet files of (``vid``, ``embedding``) written chunk by chunk by the trainer
(``glisp_train.publish.write_node_embeddings``). A task reads them one file at a time and keeps the rows of
its own vertices only: its memory is its vertices' rows plus one file, whatever |V|. Every task reads every
file (its vertices are spread over the id range), which costs P x the table's bytes of reads per run.
"""

from __future__ import annotations

import numpy as np

from glisp_core.errors import GlispError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import parse_uri


def node_embedding_rows(where: str, vids: np.ndarray, dim: int) -> np.ndarray:
    """float32 rows (len(vids), dim) of ``vids`` from the checkpoint directory ``where``; every vid must be there."""
    uri = parse_uri(where)
    store = store_for(uri)
    uniq, inv = np.unique(np.asarray(vids, np.int64), return_inverse=True)
    out = np.empty((len(uniq), dim), np.float32)
    found = np.zeros(len(uniq), bool)
    files = sorted(rel for rel, _ in store.files(uri) if rel.endswith(".parquet"))
    if not files:
        raise GlispError(f"{uri}: no node embedding files (the checkpoint was written without them)")
    for rel in files:
        t = store.read_table(uri / rel, columns=["vid", "embedding"])
        ids = t["vid"].to_numpy()
        pos = np.minimum(np.searchsorted(uniq, ids), max(len(uniq) - 1, 0))
        hit = (uniq[pos] == ids) if len(uniq) else np.zeros(len(ids), bool)
        if not hit.any():
            continue
        emb = t["embedding"].combine_chunks()
        rows = emb.values.to_numpy(zero_copy_only=False).reshape(len(emb), -1)
        if rows.shape[1] != dim:
            raise GlispError(f"{uri / rel}: rows of width {rows.shape[1]}, the model expects {dim}")
        out[pos[hit]] = rows[hit]
        found[pos[hit]] = True
    if not found.all():
        raise GlispError(f"{uri}: no row for vertices {uniq[~found][:3].tolist()} (of {int((~found).sum())} missing)")
    return out[inv]
