"""Per-layer neighbour samples, shared by layerwise and sample-wise inference.

A K-layer model trained with per-hop fanouts ``[f_0, ..., f_{K-1}]`` (first hop first, as the sampler
takes them) applies slice ``i`` to neighbours sampled at hop ``K - 1 - i``. Both inference paths draw
those neighbours with the service's Gather kernels and Apply merge, with the request seed
``hop_seed(seed, hop)``: the kernels seed every (vertex, partition) task from the request seed and the
vertex id, so a vertex's sample at a hop is a function of (seed, layer, vertex) alone, whichever batch
or task asks for it. That is what makes the two paths agree sample for sample.

A fanout of -1 means every neighbour: the fanout becomes the largest degree in the sampling
direction, and the quota method returns every edge of a vertex whose degree is at most the fanout.
R-GCN samples per edge type, one slot per relation in the model's relation order, so the slot of an
edge is its relation id.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from glisp_core.errors import GlispError
from glisp_sampling.apply import HopSample
from glisp_sampling.inprocess import gather_split
from glisp_sampling.khop import Fanout, HopRequest, hop_request, hop_seed
from glisp_sampling.routing import split_by_bits

FULL = -1


def check_fanouts(fanouts: Sequence[int], layers: int) -> list[int]:
    """Per-hop fanouts (first hop first) for a ``layers``-layer model; [] = every neighbour at every hop."""
    f = [int(x) for x in fanouts]
    if not f:
        return [FULL] * layers
    if len(f) != layers:
        raise GlispError(f"infer.fanouts: the model has {layers} layers, so give {layers} fanouts (got {f})")
    bad = [x for x in f if x == 0 or x < FULL]
    if bad:
        raise GlispError(f"infer.fanouts: each fanout must be positive or -1 for every neighbour (got {f})")
    return f


def hop_of(layer_slice: int, layers: int) -> int:
    """The sampling hop whose neighbours slice ``layer_slice`` aggregates (the last slice: hop 0)."""
    return layers - 1 - layer_slice


def fanout_for(f: int, relations: Sequence[str], full: int) -> Fanout:
    """One hop's fanout as the sampler takes it: an int, or one (relation, fanout) slot per relation."""
    f = full if f == FULL else f
    return [(r, f) for r in relations] if relations else f


def layer_request(f: int, relations: Sequence[str], full: int, seed: int, hop: int, direction: str) -> HopRequest:
    """The Gather request of one hop, with the hop's request seed."""
    return hop_request(fanout_for(f, relations, full), method="uniform", direction=direction, seed=hop_seed(seed, hop))


def max_degree(readers: Sequence[Any], direction: str, lids: np.ndarray | None = None) -> int:
    """The largest global degree in ``direction`` (of ``lids`` of the first reader, when given); >= 1."""
    best = 1
    for r in readers:
        deg = r.out_degree if direction == "out" else r.in_degree
        if lids is not None:
            deg = np.asarray(deg)[lids]
        if len(deg):
            best = max(best, int(np.max(deg)))
    return best


UNBOUNDED = 1 << 62  # an inference engine answers "every neighbour" of its vertices, whatever the degree


def task_engine(reader: Any) -> Any:
    """A sampling engine over one partition for inference (memory-mapped): it serves this process only, so
    a server's request bounds (serve.max_fanout, serve.max_request_edges, serve.max_batch) do not apply: a
    layer needs every neighbour (at R-MAT 22 a vertex has 108,889 in one partition) of every vertex of the
    partition, gathered at once by its plan (R-MAT 23 at p = 8: 1.05M vertices)."""
    from glisp_sampling.gather import PartitionSampler

    return PartitionSampler(reader, max_fanout=UNBOUNDED, max_request_edges=UNBOUNDED, max_batch=UNBOUNDED)


def sample_masters(
    reader: Any, masters: np.ndarray, req: HopRequest, engine_of: Callable[[int], Any]
) -> tuple[HopSample, np.ndarray]:
    """One hop for vertices held by ``reader``'s partition, from every partition holding their edges
    (found from the replica bits stored with them); returns the merged sample and whether each
    vertex is interior (held by this partition only)."""
    masters = np.asarray(masters, np.int64)
    lids = reader.to_local(masters)
    if (lids < 0).any():
        raise GlispError(
            f"{reader.path}: vertices {masters[lids < 0][:3].tolist()} are not in partition "
            f"{reader.part_id}, which is their inference partition"
        )
    bits = np.ascontiguousarray(np.asarray(reader.partition_bits)[lids])
    split = split_by_bits(bits, reader.num_parts)
    nrep = np.unpackbits(bits, axis=1, bitorder="little", count=reader.num_parts).sum(axis=1)
    return gather_split(masters, split, engine_of, req), nrep <= 1


def edge_slots(counts: np.ndarray) -> np.ndarray:
    """The slot (relation id) of every sampled edge, from per-(vertex, slot) counts."""
    n, nslot = counts.shape
    return np.repeat(np.tile(np.arange(nslot, dtype=np.int64), n), counts.reshape(-1))
