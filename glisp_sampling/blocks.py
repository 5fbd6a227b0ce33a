"""Sampled mini-batches as PyG-ready bipartite blocks.

One :class:`Block` per layer. Its source vertices list its destination vertices first, then the new
neighbours in first-seen order, so ``x_src[:num_dst]`` are the destinations' own rows::

    for block, conv in zip(batch.blocks, convs):           # input layer first
        x = conv((x, x[: block.num_dst]), block.edge_index, size=block.size)

``edge_index[0]`` indexes source vertices (the sampled neighbours), ``edge_index[1]`` destination
vertices (the frontier vertex they were sampled for): messages flow neighbour -> frontier vertex.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glisp_sampling import profile
from glisp_sampling.apply import HopSample, relabel, relabel_edges


@dataclass
class Block:
    src_ids: torch.Tensor  # (n_src,) int64 global ids; the first num_dst are the destinations
    num_dst: int
    edge_index: torch.Tensor  # (2, E) int64: [source local index, destination local index]
    edge_ids: torch.Tensor | None = None  # (E,) global edge ids, when asked
    edge_type: torch.Tensor | None = None  # (E,) int64 slot of the per-type fanout, typed sampling only

    @property
    def dst_ids(self) -> torch.Tensor:
        return self.src_ids[: self.num_dst]

    @property
    def num_src(self) -> int:
        return int(self.src_ids.shape[0])

    @property
    def size(self) -> tuple[int, int]:
        """(num_src, num_dst), the ``size`` argument of a PyG MessagePassing call."""
        return self.num_src, self.num_dst

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])


@dataclass
class SampledBatch:
    seeds: torch.Tensor  # (B,) int64 global ids, = blocks[-1].dst_ids
    blocks: list[Block]  # input layer first (outermost hop), output layer last
    x: torch.Tensor | None = None  # features of input_ids
    y: torch.Tensor | None = None  # labels of seeds (-1 = none)
    hops: list[HopSample] | None = None  # merged per-hop samples (seed layer first), when kept

    @property
    def input_ids(self) -> torch.Tensor:
        return self.blocks[0].src_ids if self.blocks else self.seeds

    @property
    def num_sampled_edges(self) -> int:
        return sum(b.num_edges for b in self.blocks)


def build_block(dst: np.ndarray, hop: HopSample, scratch: np.ndarray | None = None, typed: bool = False) -> Block:
    """Relabel one hop (frontier ``dst`` and its merged sample) into a bipartite block.

    A hop merged with ``dst`` and a scratch map already carries its relabelled block (one walk for
    merge and relabel); otherwise it is relabelled here.
    """
    per_vertex = hop.counts.sum(axis=1)
    if hop.block is not None:
        src_ids, edge_index = hop.block
    elif scratch is not None:
        with profile.stage("client.relabel"):
            src_ids, edge_index = relabel_edges(np.asarray(dst, np.int64), hop.nbrs, per_vertex, scratch)
    else:
        src_ids, local = relabel(dst, hop.nbrs)
        edge_index = np.stack([local, np.repeat(np.arange(len(dst), dtype=np.int64), per_vertex)])
    et = None
    if typed:
        nslot = hop.counts.shape[1]
        et = torch.from_numpy(np.repeat(np.tile(np.arange(nslot, dtype=np.int64), len(dst)), hop.counts.reshape(-1)))
    return Block(
        src_ids=torch.from_numpy(src_ids),
        num_dst=len(dst),
        edge_index=torch.from_numpy(edge_index),
        edge_ids=torch.from_numpy(hop.edge_ids) if hop.edge_ids is not None else None,
        edge_type=et,
    )
