"""GNN models as stacks of one-layer slices, and the checkpoint that training writes and inference reads.

Training (``glisp train``) runs a :class:`GNN` on the sampling service's blocks; layerwise inference
(``glisp infer``) runs the same model one slice at a time over every vertex. Both rebuild the model
from a :class:`ModelSpec`, so this module is the one place that knows the architectures.

Every slice is *local*: the output row of a destination vertex depends only on its own input row and
on the multiset of rows of its (sampled) in-neighbours in the block. That is what makes layerwise
inference exact: at full fanout it equals a full-graph forward pass, and with sampling it equals the
sample-wise forward pass over the same per-layer neighbour samples. GCN therefore uses the mean over
the vertex and its neighbours (``1/(deg+1)`` weights, "right" normalisation) rather than the symmetric
form, which would need every neighbour's degree.

A slice takes a bipartite block in the service's layout (:class:`glisp_sampling.blocks.Block`): source
rows, of which the first ``num_dst`` are the destinations themselves, and ``edge_index`` =
``[source position, destination position]``::

    model = build_model(spec)
    h = model(batch.x, batch.blocks)                     # training / sample-wise inference
    h1 = model.layer(0, x_src, edge_index, num_dst)       # layerwise inference, one slice

**User-defined models.** ``train.model = "package.module:factory"`` (``glisp train --model ...``) builds any
``torch.nn.Module`` with ``factory(spec: ModelSpec) -> nn.Module``; ``spec`` carries what the served schema and
the config fix: ``in_dim`` (the feature width), ``out_dim`` (classes for a node task, the embedding width for a
link task), ``task``, ``layers`` (sampled hops = blocks per batch), ``hidden``, ``dropout``, ``heads`` and
``relations`` (the graph's edge types in schema order). The checkpoint records ``factory`` and the spec, so
``load_checkpoint`` (and ``glisp infer``, on every executor) calls the same factory again: the module must be
importable there. The model is called like the built-ins:

- **training** (the block protocol): ``model(x, blocks, edge_types) -> Tensor``, ``x`` the rows of
  ``blocks[0]``'s sources, ``blocks`` input layer first, each with ``edge_index`` ([source position, destination
  position]) and ``num_dst`` (the destinations are the first ``num_dst`` source rows), ``edge_types`` a list of
  per-edge relation ids per block, or None;
- **layerwise inference** (the slice protocol, optional): ``model.num_layers`` and
  ``model.layer(i, x_src, edge_index, num_dst, edge_type=None) -> Tensor``, the output rows of slice ``i``
  (activation included) for the block's ``num_dst`` destinations, depending only on each destination's own row
  and the multiset of its in-neighbours' rows (what makes layerwise inference exact); slice ``i`` returns
  ``hidden`` columns, the last ``out_dim`` (or set ``model.dims`` = the widths of layers 0..L). A model without
  it is inferred sample-wise (``glisp infer`` says so);
- ``model.typed = True`` asks for typed sampling (one slot per edge type, the relation id of every edge).

This is a leaf module: it imports torch and torch_geometric, so only training and inference import it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, RGCNConv, SAGEConv

from glisp_core.errors import FormatError, GlispError
from glisp_core.pyg_sources import forget_generated_sources
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri

ARCHS = ("sage", "gcn", "gat", "rgcn", "lightgcn")
TASKS = ("node", "link")
SPEC_FILE = "model.json"
WEIGHTS_FILE = "weights.pt"
SPEC_FORMAT = "glisp-model"
SPEC_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Everything needed to rebuild a model; recorded beside its weights.

    ``out_dim`` is the number of classes for a node task and the embedding width for a link task.
    ``relations`` names the edge types an R-GCN distinguishes, in relation-id order.
    """

    arch: Literal["sage", "gcn", "gat", "rgcn", "lightgcn", "custom"]
    in_dim: int
    hidden: int
    out_dim: int
    layers: int
    task: Literal["node", "link"] = "node"
    dropout: float = 0.5
    heads: int = 4  # gat: attention heads of the hidden layers (concatenated); the last layer has one
    relations: tuple[str, ...] = field(default_factory=tuple)  # rgcn: edge type names
    num_bases: int = 0  # rgcn: basis decomposition (0 = none)
    factory: str = ""  # "package.module:factory" of a user-defined model (arch "custom")

    def __post_init__(self) -> None:
        if (self.arch == "custom") != bool(self.factory):
            raise GlispError(f"model: arch 'custom' goes with a factory (got arch {self.arch!r}, {self.factory!r})")
        if self.arch not in ARCHS and not self.factory:
            raise GlispError(f"model arch: expected one of {ARCHS} (got {self.arch!r})")
        if self.task not in TASKS:
            raise GlispError(f"model task: expected one of {TASKS} (got {self.task!r})")
        for name in ("in_dim", "hidden", "out_dim", "layers"):
            if int(getattr(self, name)) <= 0:
                raise GlispError(f"model {name}: must be positive (got {getattr(self, name)})")
        if self.arch == "gat" and self.hidden % self.heads:
            raise GlispError(f"model hidden: must be a multiple of heads={self.heads} for gat (got {self.hidden})")
        if self.arch == "lightgcn" and (self.task != "link" or self.out_dim != self.in_dim):
            raise GlispError(
                f"model lightgcn: a link task whose output width is its input width (got task {self.task!r}, "
                f"in_dim {self.in_dim}, out_dim {self.out_dim})"
            )
        if self.arch == "rgcn" and not self.relations:
            raise GlispError("model relations: rgcn needs the edge type names (got none)")

    @property
    def dims(self) -> list[tuple[int, int]]:
        """(input width, output width) of every slice, input layer first."""
        widths = [self.in_dim] + [self.hidden] * (self.layers - 1) + [self.out_dim]
        return list(zip(widths[:-1], widths[1:], strict=True))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["relations"] = list(self.relations)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise FormatError(f"model spec: unknown keys {unknown} (known: {sorted(known)})")
        d = dict(d)
        d["relations"] = tuple(d.get("relations", ()))
        return cls(**d)


def _self_loops(edge_index: Tensor, num_dst: int) -> Tensor:
    """``edge_index`` plus one edge from each destination's own source row (position i) to itself."""
    loop = torch.arange(num_dst, device=edge_index.device, dtype=edge_index.dtype)
    return torch.cat([edge_index, torch.stack([loop, loop])], dim=1)


# A gathered value (one column of one edge's message, gathered and scattered) costs about this many
# multiply-adds of a GEMM on CPU (bench/sage_order.py on 256 -> 8 and 256 -> 64 slices: docs/results/inference-2026-12-01.md)
GATHER_COST = 40


def sage_transforms_first(d_in: int, d_out: int, n_src: int, n_dst: int, n_edges: int) -> bool:
    """Whether a mean SAGE slice is cheaper with ``lin_l`` applied to the source rows before the aggregation
    (the mean commutes with it): each edge then gathers ``d_out`` values, not ``d_in``, for a GEMM over every
    source row instead of the destinations only. DGL's SAGEConv transforms first whenever ``d_in > d_out``;
    here the batch's shape decides too (a 256 -> 64 slice over few edges gathers less than it multiplies)."""
    return d_out < d_in and n_edges * (d_in - d_out) * GATHER_COST > (n_src - n_dst) * d_in * d_out


def sage_mean(conv: Any, x_src: Tensor, edge_index: Tensor, num_dst: int) -> Tensor:
    """``conv((x_src, x_src[:num_dst]), edge_index)`` for a mean SAGEConv (root weight, no normalisation, no
    projection: the slices' own), in whichever order :func:`sage_transforms_first` finds cheaper. The two orders
    agree to the last bits of float64 (float32 rows rounded from float64 are the same)."""
    n_src, n_edges = x_src.shape[0], edge_index.shape[1]
    lin_l = conv.lin_l
    if not sage_transforms_first(lin_l.in_channels, lin_l.out_channels, n_src, num_dst, n_edges):
        out: Tensor = conv((x_src, x_src[:num_dst]), edge_index, size=(n_src, num_dst))
        return out
    return sage_mean_transformed_first(conv, x_src, edge_index, num_dst)


def sage_mean_transformed_first(conv: Any, x_src: Tensor, edge_index: Tensor, num_dst: int) -> Tensor:
    """The transformed-first order of :func:`sage_mean`, whatever the shapes (the bench times it against PyG's)."""
    p = Projection(conv, activation=False)
    return p.finish(p.project(x_src), edge_index[0], edge_index[1], num_dst, p.root(x_src[:num_dst]))


class Projection:
    """Slice ``i`` of a mean SAGE model split at its neighbour weight: ``act(mean_{u->v} x_u W_l^T + x_v W_r^T +
    b)``. The mean commutes with ``W_l``, so a layerwise pass can project every row it will read once
    (:meth:`project`, :meth:`root`) and have each batch average ``width`` values an edge (:meth:`finish`) instead
    of gathering ``in_width`` and multiplying the batch's source rows again in every batch that reads them."""

    def __init__(self, conv: Any, activation: bool) -> None:
        self.conv, self.activation = conv, activation
        self.in_width, self.width = int(conv.lin_l.in_channels), int(conv.lin_l.out_channels)

    def project(self, x: Tensor) -> Tensor:
        return nn.functional.linear(x, self.conv.lin_l.weight)

    def root(self, x: Tensor) -> Tensor:
        out: Tensor = self.conv.lin_r(x)
        return out

    def finish(self, h: Tensor, src: Tensor, dst: Tensor, num_dst: int, root: Tensor) -> Tensor:
        """The rows :meth:`GNN.layer` returns, from projected source rows ``h`` (``src`` indexes them) and the
        destinations' ``root``: the mean of each destination's projected sources, plus its root term and the bias."""
        total = h.new_zeros((num_dst, h.shape[1])).index_add_(0, dst, h.index_select(0, src))
        count = torch.bincount(dst, minlength=num_dst).clamp_(min=1).to(h.dtype)
        out: Tensor = total / count[:, None] + root
        if self.conv.lin_l.bias is not None:
            out = out + self.conv.lin_l.bias
        return torch.relu(out) if self.activation else out


class _Conv(Protocol):
    """What a slice calls: a torch_geometric convolution (an ``nn.Module``), returning the output rows."""

    def __call__(self, *args: Any, **kwargs: Any) -> Tensor: ...


class Slice(nn.Module):
    """One GNN layer on a bipartite block; returns the destinations' rows (before the activation)."""

    def __init__(self, spec: ModelSpec, i: int) -> None:
        super().__init__()
        d_in, d_out = spec.dims[i]
        last = i == spec.layers - 1
        self.arch = spec.arch
        if spec.arch == "sage":
            self.conv: _Conv = SAGEConv((d_in, d_in), d_out, aggr="mean")
        elif spec.arch == "gcn":
            self.conv = GCNConv(d_in, d_out, normalize=False, add_self_loops=False)
        elif spec.arch == "gat":
            heads = 1 if last else spec.heads
            self.conv = GATConv((d_in, d_in), d_out // heads, heads=heads, add_self_loops=False)
        else:
            self.conv = RGCNConv(
                (d_in, d_in), d_out, len(spec.relations), num_bases=spec.num_bases or None, aggr="mean"
            )

    def forward(self, x_src: Tensor, edge_index: Tensor, num_dst: int, edge_type: Tensor | None = None) -> Tensor:
        if self.arch == "sage":
            return sage_mean(self.conv, x_src, edge_index, num_dst)
        x_dst = x_src[:num_dst]
        size = (x_src.shape[0], num_dst)
        if self.arch == "gcn":
            ei = _self_loops(edge_index, num_dst)
            deg = torch.bincount(ei[1], minlength=num_dst).to(x_src.dtype)
            w = 1.0 / deg[ei[1]]
            # a homogeneous call over the source rows (the destinations are the first num_dst of them)
            return self.conv(x_src, ei, w)[:num_dst]
        if self.arch == "gat":
            return self.conv((x_src, x_dst), _self_loops(edge_index, num_dst), size=size)
        if edge_type is None:
            raise GlispError("rgcn: edge_type is required (got None)")
        return self.conv((x_src, x_dst), edge_index, edge_type)


class GNN(nn.Module):
    """``spec.layers`` slices; ReLU and dropout between them, none after the last."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        self.slices = nn.ModuleList([Slice(spec, i) for i in range(spec.layers)])
        self.dropout = nn.Dropout(spec.dropout)

    @property
    def num_layers(self) -> int:
        return self.spec.layers

    def layer(self, i: int, x_src: Tensor, edge_index: Tensor, num_dst: int, edge_type: Tensor | None = None) -> Tensor:
        """Slice ``i`` with its activation: what layerwise inference stores as layer ``i + 1``."""
        h: Tensor = self.slices[i](x_src, edge_index, num_dst, edge_type)
        if i < self.spec.layers - 1:
            h = torch.relu(h)
        return h

    def projection(self, i: int) -> Projection | None:
        """Slice ``i`` split at its weight (:class:`Projection`), for a mean SAGE slice; None for the others. A
        user's model is run batch by batch through its ``layer``."""
        if self.spec.arch != "sage":
            return None
        return Projection(self.slices[i].conv, activation=i < self.spec.layers - 1)

    def forward(self, x: Tensor, blocks: Sequence[Any], edge_types: Sequence[Tensor | None] | None = None) -> Tensor:
        """Run every slice over the blocks of a mini-batch (input layer first).

        ``x`` holds the rows of ``blocks[0]``'s source vertices; ``edge_types[i]`` the relation id of every
        edge of block ``i`` (rgcn only).
        """
        if len(blocks) != self.spec.layers:
            raise GlispError(f"blocks: the model has {self.spec.layers} layers (got {len(blocks)} blocks)")
        h = x
        for i, b in enumerate(blocks):
            if i > 0:
                h = self.dropout(h)
            h = self.layer(i, h, b.edge_index, b.num_dst, edge_types[i] if edge_types else None)
        return h


class LightGCN(nn.Module):
    """LightGCN (He et al., 2020): no weights and no activation; each layer averages the in-neighbours' rows, and
    a vertex's output is the mean of its rows at every layer, input included. Its input is usually the
    learnable node embeddings alone (``train.node_embeddings``), which training moves.

    The mean over the sampled (or, in evaluation and inference, all) in-neighbours is the row-normalised form
    of LightGCN's propagation: the symmetric ``1/sqrt(|N_u||N_v|)`` form needs every neighbour's degree, which a
    block does not carry. To keep every slice local, slice ``i < L-1`` returns ``[h_{i+1}, sum_{j<=i+1} h_j]``
    (2 x in_dim columns) and the last returns the mean; ``dims`` says so for inference's layer widths.
    """

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        d, n = spec.in_dim, spec.layers
        self.dims = (d, *([2 * d] * (n - 1)), d)

    @property
    def num_layers(self) -> int:
        return self.spec.layers

    def layer(self, i: int, x_src: Tensor, edge_index: Tensor, num_dst: int, edge_type: Tensor | None = None) -> Tensor:
        d = self.spec.in_dim
        h, acc = (x_src, x_src[:num_dst]) if i == 0 else (x_src[:, :d], x_src[:num_dst, d:])
        # the mean over in-neighbours: one index_add and a division by the counts (no second scatter for them);
        # index_select, not h[src]: advanced indexing's backward is an accumulating index_put (3x slower on CPU)
        total = h.new_zeros((num_dst, h.shape[1])).index_add_(0, edge_index[1], h.index_select(0, edge_index[0]))
        count = torch.bincount(edge_index[1], minlength=num_dst).clamp_(min=1).to(h.dtype)
        nxt = total / count[:, None]
        acc = acc + nxt
        if i == self.spec.layers - 1:
            return acc / (self.spec.layers + 1)
        return torch.cat([nxt, acc], dim=1)

    def forward(self, x: Tensor, blocks: Sequence[Any], edge_types: Sequence[Tensor | None] | None = None) -> Tensor:
        if len(blocks) != self.spec.layers:
            raise GlispError(f"blocks: the model has {self.spec.layers} layers (got {len(blocks)} blocks)")
        h = x
        for i, b in enumerate(blocks):
            h = self.layer(i, h, b.edge_index, b.num_dst)
        return h


def build_model(spec: ModelSpec) -> Any:
    """The model of ``spec``: a built-in :class:`GNN` or :class:`LightGCN`, or what the spec's factory builds.
    PyG's layer code generated for it is then kept in memory, not in the temporary folder
    (:mod:`glisp_core.pyg_sources`)."""
    model = _build(spec)
    forget_generated_sources()
    return model


def _build(spec: ModelSpec) -> Any:
    if spec.arch == "lightgcn":
        return LightGCN(spec)
    if not spec.factory:
        return GNN(spec)
    model = load_factory(spec.factory)(spec)
    if not isinstance(model, nn.Module):
        raise GlispError(f"model factory {spec.factory}: returned {type(model).__name__}, not a torch.nn.Module")
    if getattr(model, "spec", None) is None:
        object.__setattr__(model, "spec", spec)  # a plain attribute (nn.Module's setattr types it as a submodule)
    return model


def is_factory(name: str) -> bool:
    """``train.model`` names a factory (``package.module:factory``) rather than a built-in architecture."""
    return ":" in name


def load_factory(path: str) -> Any:
    """The callable ``package.module:factory`` names (GlispError saying what is wrong otherwise)."""
    import importlib

    mod, _, attr = path.partition(":")
    if not mod or not attr:
        raise GlispError(f"model factory: expected 'package.module:factory' (got {path!r})")
    try:
        fn = getattr(importlib.import_module(mod), attr)
    except ImportError as e:
        raise GlispError(f"model factory {path}: cannot import {mod!r} ({e}); is it on PYTHONPATH?") from None
    except AttributeError:
        raise GlispError(f"model factory {path}: module {mod!r} has no {attr!r}") from None
    if not callable(fn):
        raise GlispError(f"model factory {path}: {attr!r} is not callable")
    return fn


def follows_slice_protocol(model: Any) -> bool:
    """Whether layerwise inference can run ``model``: it has ``num_layers`` and ``layer(i, ...)``."""
    return callable(getattr(model, "layer", None)) and isinstance(getattr(model, "num_layers", None), int)


def typed_relations(model: Any) -> tuple[str, ...]:
    """The relations a model samples per type (R-GCN, or a user model with ``typed = True``); () when untyped."""
    spec = model.spec
    return tuple(spec.relations) if spec.arch == "rgcn" or getattr(model, "typed", False) else ()


def layer_widths(model: Any) -> tuple[int, ...]:
    """Widths of layers 0 (the features) .. L (the output): ``model.dims`` when it says, else the spec's."""
    dims = getattr(model, "dims", None)
    if dims is not None:
        return tuple(int(d) for d in dims)
    return tuple([d for d, _ in model.spec.dims] + [model.spec.out_dim])


def link_scores(h_src: Tensor, h_dst: Tensor) -> Tensor:
    """Score of the links (src[i], dst[i]) from their final embeddings: the dot product (a logit)."""
    return (h_src * h_dst).sum(dim=-1)


def default_device() -> torch.device:
    """CUDA when present, the CPU otherwise: one code path for both."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def save_checkpoint(
    directory: str | os.PathLike[str], model: nn.Module, extra: dict[str, Any] | None = None
) -> StoreURI:
    """Write ``model.json`` (the spec plus ``extra``) and ``weights.pt`` into ``directory``: a local directory or a
    store URI (``s3://...``), each file written whole through the store."""
    u = parse_uri(directory, "checkpoint")
    store = store_for(u)
    spec: ModelSpec = model.spec  # type: ignore[assignment]  # set by build_model
    doc = {"format": SPEC_FORMAT, "format_version": SPEC_VERSION, "spec": spec.to_dict(), **(extra or {})}
    store.write_bytes(u / SPEC_FILE, json.dumps(doc, indent=2, sort_keys=True).encode())
    store.write_bytes(u / WEIGHTS_FILE, _weights_bytes(model))
    return u


def _weights_bytes(model: nn.Module) -> bytes:
    """``torch.save``'s bytes of the weights as a file named ``weights.pt`` gets them (the archive inside is named
    after the file), so a checkpoint is the same bytes in every store."""
    with tempfile.TemporaryDirectory(prefix="glisp-ckpt-") as d:
        p = Path(d) / WEIGHTS_FILE
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, p)
        return p.read_bytes()


def load_checkpoint(
    directory: str | os.PathLike[str], device: torch.device | str | None = None
) -> tuple[Any, dict[str, Any]]:
    """The model saved in ``directory`` (a local directory or a store URI; in eval mode) and its ``model.json``."""
    u = parse_uri(directory, "checkpoint")
    store = store_for(u)
    spec_file = u / SPEC_FILE
    try:
        doc = json.loads(store.read_bytes(spec_file))
    except FileNotFoundError:
        raise FormatError(f"{spec_file}: not found (is this a 'glisp train' checkpoint?)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FormatError(f"{spec_file}: not valid JSON ({e})") from None
    if doc.get("format") != SPEC_FORMAT or doc.get("format_version") != SPEC_VERSION:
        raise FormatError(
            f"{spec_file}: expected format {SPEC_FORMAT!r} version {SPEC_VERSION} "
            f"(got {doc.get('format')!r} version {doc.get('format_version')!r})"
        )
    model = build_model(ModelSpec.from_dict(doc["spec"]))
    try:
        weights = store.read_bytes(u / WEIGHTS_FILE)
    except FileNotFoundError:
        raise FormatError(f"{u / WEIGHTS_FILE}: not found (the checkpoint is incomplete)") from None
    state = torch.load(io.BytesIO(weights), map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    model.eval()
    return model.to(device or "cpu"), doc
