"""The model contract shared by training and inference: local slices, and checkpoints that round-trip."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from glisp_core.errors import FormatError, GlispError
from glisp_core.models import ModelSpec, build_model, load_checkpoint, save_checkpoint

ARCH_IDS = ["sage", "gcn", "gat", "rgcn"]


def _graph(n: int = 60, m: int = 400, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = np.random.default_rng(seed)
    src, dst = g.integers(0, n, m), g.integers(0, n, m)
    return torch.from_numpy(np.stack([src, dst])), torch.from_numpy(g.integers(0, 3, m))


def _spec(arch: str, layers: int = 2) -> ModelSpec:
    rel = ("a", "b", "c") if arch == "rgcn" else ()
    return ModelSpec(arch=arch, in_dim=8, hidden=16, out_dim=5, layers=layers, relations=rel, dropout=0.0)


def _block(dst: np.ndarray, edge_index: torch.Tensor, etype: torch.Tensor):
    """The full-fanout block of ``dst``: every in-edge, sources relabelled destinations-first."""
    keep = np.isin(edge_index[1].numpy(), dst)
    s, d = edge_index[0].numpy()[keep], edge_index[1].numpy()[keep]
    src_ids = np.concatenate([dst, np.setdiff1d(np.unique(s), dst)])
    pos = {int(v): i for i, v in enumerate(src_ids)}
    ei = torch.tensor([[pos[int(v)] for v in s], [pos[int(v)] for v in d]], dtype=torch.long).reshape(2, -1)
    return SimpleNamespace(src_ids=src_ids, num_dst=len(dst), edge_index=ei), etype[torch.from_numpy(keep)]


@pytest.mark.parametrize("arch", ARCH_IDS)
def test_slices_are_local(arch: str) -> None:
    """A block holding a vertex subset and all its in-neighbours gives the full-graph rows of that subset.

    This is what makes layerwise inference exact; a normalisation that looked past the block (GCN's
    symmetric form needs every neighbour's degree) fails it.
    """
    torch.manual_seed(0)
    ei, et = _graph()
    model = build_model(_spec(arch, layers=1)).eval()
    x = torch.randn(60, 8)
    with torch.no_grad():
        full = model.layer(0, x, ei, 60, et)
        dst = np.array([3, 17, 40, 59, 0])
        b, bet = _block(dst, ei, et)
        part = model.layer(0, x[torch.from_numpy(b.src_ids)], b.edge_index, b.num_dst, bet)
    torch.testing.assert_close(part, full[torch.from_numpy(dst)], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ARCH_IDS)
def test_forward_over_blocks_equals_layer_by_layer(arch: str) -> None:
    torch.manual_seed(1)
    ei, et = _graph()
    model = build_model(_spec(arch, layers=2)).eval()
    x = torch.randn(60, 8)
    seeds = np.array([5, 9, 33])
    b1, et1 = _block(seeds, ei, et)  # output layer
    b0, et0 = _block(b1.src_ids, ei, et)  # input layer
    with torch.no_grad():
        out = model(x[torch.from_numpy(b0.src_ids)], [b0, b1], [et0, et1])
        h1 = model.layer(0, x, ei, 60, et)  # layerwise: every vertex, layer by layer
        h2 = model.layer(1, h1, ei, 60, et)
    assert out.shape == (3, 5)
    torch.testing.assert_close(out, h2[torch.from_numpy(seeds)], rtol=1e-5, atol=1e-5)


def test_checkpoint_round_trip(tmp_path) -> None:
    torch.manual_seed(2)
    model = build_model(_spec("gat", layers=3))
    save_checkpoint(tmp_path / "ck", model, extra={"partition_fingerprint": "abc"})
    loaded, doc = load_checkpoint(tmp_path / "ck")
    assert doc["partition_fingerprint"] == "abc" and loaded.spec == model.spec
    for k, v in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[k], v)


def test_spec_and_checkpoint_errors(tmp_path) -> None:
    with pytest.raises(GlispError, match="arch: expected one of"):
        ModelSpec(arch="gin", in_dim=4, hidden=8, out_dim=2, layers=2)
    with pytest.raises(GlispError, match="multiple of heads"):
        ModelSpec(arch="gat", in_dim=4, hidden=10, out_dim=2, layers=2, heads=4)
    with pytest.raises(GlispError, match="relations"):
        ModelSpec(arch="rgcn", in_dim=4, hidden=8, out_dim=2, layers=2)
    with pytest.raises(FormatError, match="model.json: not found"):
        load_checkpoint(tmp_path)
    (tmp_path / "model.json").write_text('{"format": "other"}')
    with pytest.raises(FormatError, match="expected format"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize(
    "shape,first",
    [
        ((256, 8, 4256, 256, 4000), True),  # a last layer: 8 values an edge instead of 256
        ((256, 8, 2000, 1000, 100), False),  # few edges: the GEMM over every source row costs more
        ((256, 64, 4256, 256, 4000), False),  # measured 0.7x transformed first
        ((256, 64, 50064, 64, 130000), True),  # measured 2.0x
        ((32, 256, 50064, 64, 130000), False),  # widening: never
    ],
)
def test_a_sage_slice_transforms_first_where_the_edges_outweigh_the_gemm(shape, first) -> None:
    from glisp_core.models import sage_transforms_first

    assert sage_transforms_first(*shape) is first


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_both_orders_of_a_sage_slice_agree_in_values_and_gradients(dtype) -> None:
    """The transformed-first order (taken here: 256 -> 8 over 3,000 edges) gives PyG's SAGEConv rows and weight
    gradients; in float64 rounded to float32, bit for bit (what an incremental refresh's exactness needs)."""
    from torch_geometric.nn import SAGEConv

    from glisp_core.models import sage_mean, sage_transforms_first

    torch.manual_seed(3)
    n_src, n_dst, m = 900, 120, 3000
    conv = SAGEConv((256, 256), 8, aggr="mean").to(dtype)
    x = torch.randn(n_src, 256, dtype=dtype)
    ei = torch.stack([torch.randint(0, n_src, (m,)), torch.randint(0, n_dst - 10, (m,))])  # 10 with no edge
    assert sage_transforms_first(256, 8, n_src, n_dst, m)
    outs, grads = [], []

    def aggregated_first(*a, **k):
        raise AssertionError("sage_mean called SAGEConv.forward (aggregation first) for a 256 -> 8 slice")

    for f in (lambda: conv((x, x[:n_dst]), ei, size=(n_src, n_dst)), lambda: sage_mean(conv, x, ei, n_dst)):
        conv.zero_grad()
        out = f()
        conv.forward = aggregated_first  # the second order must not go through PyG's
        out.square().sum().backward()
        outs.append(out.detach())
        grads.append([p.grad.clone() for p in conv.parameters()])
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(outs[1], outs[0], rtol=tol, atol=tol)
    for a, b in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(a, b, rtol=tol * 10, atol=tol * 10)
    if dtype == torch.float64:
        assert torch.equal(outs[1].float(), outs[0].float())


def test_a_sage_models_projection_gives_its_layers_rows_from_rows_projected_once() -> None:
    """``GNN.projection(i)``: every source row projected once (``project``, ``root``), then ``finish`` averages
    the narrow rows: the rows ``layer(i, ...)`` returns, activation included, over any grouping of the
    destinations (here two halves against the whole). Only mean SAGE slices have one."""
    from glisp_core.models import ModelSpec, Projection, build_model

    torch.manual_seed(4)
    model = build_model(ModelSpec(arch="sage", in_dim=64, hidden=32, out_dim=4, layers=2, dropout=0.0)).double()
    n_src, n_dst, m = 300, 80, 1200
    x = torch.randn(n_src, 64, dtype=torch.float64)
    ei = torch.stack([torch.randint(0, n_src, (m,)), torch.sort(torch.randint(0, n_dst, (m,))).values])
    for i, d_in in ((0, 64), (1, 32)):
        proj = model.projection(i)
        assert isinstance(proj, Projection) and proj.activation == (i == 0) and proj.in_width == d_in
        xi = x[:, :d_in]
        want = model.layer(i, xi, ei, n_dst)
        h, root = proj.project(xi), proj.root(xi[:n_dst])
        whole = proj.finish(h, ei[0], ei[1], n_dst, root)
        torch.testing.assert_close(whole, want, rtol=1e-12, atol=1e-12)
        half = int((ei[1] < n_dst // 2).sum())  # the first half's edges come first (sorted destinations)
        lo = proj.finish(h, ei[0, :half], ei[1, :half], n_dst // 2, root[: n_dst // 2])
        hi = proj.finish(h, ei[0, half:], ei[1, half:] - n_dst // 2, n_dst - n_dst // 2, root[n_dst // 2 :])
        assert torch.equal(torch.cat([lo, hi]), whole)  # a row depends on its own edges only
    for arch in ("gcn", "gat"):
        other = build_model(ModelSpec(arch=arch, in_dim=8, hidden=8, out_dim=4, layers=2, dropout=0.0))
        assert other.projection(0) is None
