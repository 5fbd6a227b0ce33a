"""Small statistics helpers for the sampling tests (no scipy on this machine)."""

from __future__ import annotations

import math

import numpy as np


def chi2_upper_z(stat: float, dof: int) -> float:
    """Wilson-Hilferty: z-score of a chi-square statistic with ``dof`` degrees of freedom."""
    k = float(dof)
    return ((stat / k) ** (1.0 / 3.0) - (1.0 - 2.0 / (9.0 * k))) / math.sqrt(2.0 / (9.0 * k))


def binomial_chi2_z(counts: np.ndarray, trials: int, p: np.ndarray | float) -> float:
    """z of sum_i (x_i - n p_i)^2 / (n p_i (1 - p_i)) over independent Binomial(n, p_i) counts."""
    counts = np.asarray(counts, np.float64)
    p = np.broadcast_to(np.asarray(p, np.float64), counts.shape)
    var = trials * p * (1 - p)
    stat = float((((counts - trials * p) ** 2) / var).sum())
    return chi2_upper_z(stat, len(counts))


def two_sample_z(a: np.ndarray, na: int, b: np.ndarray, nb: int) -> float:
    """z of a chi-square comparing inclusion frequencies a/na and b/nb item by item (pooled variance)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    p = (a + b) / (na + nb)
    keep = (p > 0) & (p < 1)
    var = p[keep] * (1 - p[keep]) * (1.0 / na + 1.0 / nb)
    stat = float((((a[keep] / na - b[keep] / nb) ** 2) / var).sum())
    return chi2_upper_z(stat, int(keep.sum()))
