"""Ranking scores shared by training (validation, test) and inference (its scores on held-out edges), so that
both report the same measure."""

from __future__ import annotations

from typing import Any

import numpy as np


def roc_auc(pos: Any, neg: Any) -> float:
    """Probability that a positive scores above a negative (ties count half): Mann-Whitney over ranks."""
    p_arr, n_arr = np.asarray(pos, np.float64).ravel(), np.asarray(neg, np.float64).ravel()
    p, q = len(p_arr), len(n_arr)
    if not p or not q:
        return 0.0
    _, inv, cnt = np.unique(np.concatenate([p_arr, n_arr]), return_inverse=True, return_counts=True)
    avg_rank = (np.cumsum(cnt) - (cnt - 1) / 2.0)[inv]  # 1-based, ties averaged
    return float((avg_rank[:p].sum() - p * (p + 1) / 2.0) / (p * q))


def mrr_auc(pos: Any, neg: Any) -> dict[str, float]:
    """MRR of each positive against its row of negatives (ties count half), and the AUC over all scores."""
    p_arr = np.asarray(pos, np.float64)
    n_arr = np.asarray(neg, np.float64).reshape(len(p_arr), -1)
    if len(p_arr) == 0:
        return {"mrr": 0.0, "auc": 0.0}
    rank = 1.0 + (n_arr > p_arr[:, None]).sum(1) + 0.5 * (n_arr == p_arr[:, None]).sum(1)
    return {"mrr": float(np.mean(1.0 / rank)), "auc": roc_auc(p_arr, n_arr)}
