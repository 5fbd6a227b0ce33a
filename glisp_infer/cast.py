"""Float32 rows cast to the slices' dtype through one buffer a task reuses.

A stable run computes in float64 (:mod:`glisp_infer.stable`), so every block of rows it reads is cast first.
A fresh float64 tensor of a 16,384 x 256 block takes 32 MiB, past glibc's largest mmap threshold with its
header: every cast mapped new memory and faulted each page in, 9x the cost of the copy itself (32 ms against
3.5 ms). Copying into a buffer that stays mapped gives the same tensor at the copy's cost.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class RowCast:
    """``rows`` (a numpy array) as a ``dtype`` tensor on ``device``. Where a cast is needed on the CPU the result
    is a view of this object's buffer: valid until the next call, so a caller consumes it before casting again.
    Rows already of ``dtype``, or bound for another device, are converted as ``Tensor.to`` does."""

    def __init__(self, dtype: Any, device: Any) -> None:
        self.dtype, self.device = dtype, device
        self._buf: Any = None

    def __call__(self, rows: np.ndarray) -> Any:
        import torch

        t = torch.from_numpy(rows)
        if t.dtype == self.dtype or self.device.type != "cpu":
            return t.to(self.device, self.dtype)
        n = t.numel()
        if self._buf is None or self._buf.numel() < n:
            self._buf = torch.empty(n, dtype=self.dtype)
        out = self._buf[:n].view(t.shape)
        out.copy_(t)
        return out
