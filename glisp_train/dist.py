"""Data-parallel training with torch.distributed, launched by ``torchrun`` (or one process without it).

Every process takes a balanced share of the seeds (sizes differ by at most one) and splits it into the
SAME number of batches as every other process, so no process waits on a collective another never
joins: a process whose share runs out early gets empty batches, which still take part in the gradient
all-reduce with zero gradients. Gradients are summed across processes (one flat all-reduce per step)
and divided by the global number of seeds in the step, so every step is exactly the mean loss over
the global batch, however uneven the shares; parameters start equal (broadcast from rank 0) and
stay equal. gloo on CPU, nccl on GPU. The process group's timeout bounds any wait on a peer that died.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch
from torch import nn


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_dist(timeout_s: float) -> Dist:
    """Join the process group that torchrun describes in the environment (one process otherwise)."""
    from glisp_core.models import default_device

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = default_device()
    if device.type == "cuda":
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
    if world > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        torch.distributed.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return Dist(rank, world, local, device)


def close_dist(d: Dist) -> None:
    if d.enabled and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def rank_batches(order: np.ndarray, d: Dist, batch_size: int, max_batches: int = 0) -> list[np.ndarray]:
    """This process's batches of ``order``: a balanced share, cut into as many batches as every process gets."""
    n = len(order)
    bounds = np.linspace(0, n, d.world + 1).round().astype(np.int64) if n else np.zeros(d.world + 1, np.int64)
    share = order[bounds[d.rank] : bounds[d.rank + 1]]
    largest = int(np.diff(bounds).max()) if d.world else 0
    nb = max(1, -(-largest // batch_size))
    if max_batches > 0:
        nb = min(nb, max_batches)
        share = share[: nb * batch_size]
    return [b for b in np.array_split(share, nb)]


def broadcast_params(model: nn.Module, d: Dist) -> None:
    if d.enabled:
        for p in model.state_dict().values():
            torch.distributed.broadcast(p, src=0)


def reduce_gradients(model: nn.Module, count: int, d: Dist) -> int:
    """Sum gradients and seed counts over processes, then divide: the global batch's mean. Returns the count."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    dev = grads[0].device if grads else d.device  # a model without weights still sums the counts
    flat = torch.cat([g.reshape(-1) for g in grads] + [torch.tensor([float(count)], device=dev)])
    if d.enabled:
        torch.distributed.all_reduce(flat)
    total = int(round(float(flat[-1])))
    if total:
        flat = flat[:-1] / total
        off = 0
        for p in params:
            k = p.numel()
            p.grad = flat[off : off + k].view_as(p).clone()
            off += k
    return total


def all_sum(values: list[float], d: Dist) -> list[float]:
    """Element-wise sum of ``values`` over processes."""
    if not d.enabled:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=d.device if d.device.type == "cuda" else "cpu")
    torch.distributed.all_reduce(t)
    return t.tolist()


def all_gather(obj: Any, d: Dist) -> list[Any]:
    """Every process's ``obj`` (small things: evaluation scores, counters)."""
    if not d.enabled:
        return [obj]
    out: list[Any] = [None] * d.world
    torch.distributed.all_gather_object(out, obj)
    return out


def dist_barrier(d: Dist) -> None:
    """Wait for every process of the group (nothing to wait for alone)."""
    if d.enabled:
        torch.distributed.barrier()
