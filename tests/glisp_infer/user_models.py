"""User-defined models for the factory tests (``train.model = "tests.glisp_infer.user_models:sum_gnn"``): a sum-
aggregation GNN written against the documented protocols, once with the slice protocol and once without."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class SumLayers(nn.Module):
    """h_dst = W_self x_dst + W_nbr sum(x of in-neighbours); ReLU between layers. Local, so layerwise is exact."""

    def __init__(self, spec) -> None:
        super().__init__()
        widths = [spec.in_dim] + [spec.hidden] * (spec.layers - 1) + [spec.out_dim]
        self.self_lin = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:], strict=True))
        self.nbr_lin = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(widths[:-1], widths[1:], strict=True))
        self.depth = spec.layers

    def one(self, i: int, x_src: Tensor, edge_index: Tensor, num_dst: int) -> Tensor:
        agg = torch.zeros((num_dst, x_src.shape[1]), dtype=x_src.dtype, device=x_src.device)
        agg.index_add_(0, edge_index[1], x_src[edge_index[0]])
        h = self.self_lin[i](x_src[:num_dst]) + self.nbr_lin[i](agg)
        return torch.relu(h) if i < self.depth - 1 else h

    def forward(self, x: Tensor, blocks, edge_types=None) -> Tensor:
        h = x
        for i, b in enumerate(blocks):
            h = self.one(i, h, b.edge_index, b.num_dst)
        return h


class SlicedSum(SumLayers):
    """With the slice protocol: layerwise inference and full-neighbourhood evaluation run it."""

    @property
    def num_layers(self) -> int:
        return self.depth

    def layer(self, i: int, x_src: Tensor, edge_index: Tensor, num_dst: int, edge_type=None) -> Tensor:
        return self.one(i, x_src, edge_index, num_dst)


def sum_gnn(spec) -> nn.Module:
    return SlicedSum(spec)


def plain_sum_gnn(spec) -> nn.Module:
    """The same model without the slice protocol: inferred sample-wise, evaluated on sampled trees."""
    return SumLayers(spec)


def not_a_module(spec):
    return "nope"
