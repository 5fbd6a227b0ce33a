"""A stable run's float64 casts through one reused buffer (glisp_infer.cast)."""

from __future__ import annotations

import numpy as np
import torch

from glisp_infer.cast import RowCast
from glisp_infer.projected import PROJECT_ROWS


def test_a_cast_to_float64_gives_the_rows_exactly_in_one_reused_buffer() -> None:
    rng = np.random.default_rng(0)
    cast = RowCast(torch.float64, torch.device("cpu"))
    a = rng.standard_normal((64, 256)).astype(np.float32)
    x = cast(a)
    assert x.dtype == torch.float64 and x.shape == (64, 256)
    assert torch.equal(x, torch.from_numpy(a).to(torch.float64))
    ptr = x.data_ptr()
    b = rng.standard_normal((40, 256)).astype(np.float32)  # smaller: the same memory, its own shape
    y = cast(b)
    assert y.data_ptr() == ptr and y.shape == (40, 256) and y.is_contiguous()
    assert torch.equal(y, torch.from_numpy(b).to(torch.float64))
    c = rng.standard_normal((100, 256)).astype(np.float32)  # larger: a new buffer, then kept
    z = cast(c)
    assert torch.equal(z, torch.from_numpy(c).to(torch.float64))
    assert cast(b).data_ptr() == z.data_ptr()


def test_rows_of_the_wanted_dtype_are_not_copied() -> None:
    a = np.ones((8, 4), np.float32)
    x = RowCast(torch.float32, torch.device("cpu"))(a)
    a[0, 0] = 5.0
    assert x[0, 0].item() == 5.0  # shares the numpy array's memory, as torch.from_numpy does


def test_a_projected_block_is_cast_in_place_of_a_fresh_tensor_each_time() -> None:
    """The blocks project_static casts: a full block of width 256 takes 32 MiB in float64, past glibc's largest mmap threshold with its header, so a fresh
    tensor per block would map and fault in new memory every time."""
    assert PROJECT_ROWS * 256 * 8 >= 32 << 20
    cast = RowCast(torch.float64, torch.device("cpu"))
    block = np.zeros((PROJECT_ROWS, 256), np.float32)
    first = cast(block).data_ptr()
    assert all(cast(block + k).data_ptr() == first for k in range(3))
