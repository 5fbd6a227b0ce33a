"""How much work batched sample-wise inference does per seed, by graph scale and density (no Spark, no I/O).

Why: layerwise inference computes 3 slice rows per vertex for a 3-layer model; batched sample-wise inference
computes, per seed, the distinct vertices of its batch's blocks (``slice rows``). Their ratio bounds the
node-task speedup when a slice row costs both the same, so this script answers "on what graph could the
node task reach a given speedup?" for graphs too large to build on one machine (docs/inference.md).

The graph is the R-MAT of ``spark_jobs.generate.rmat`` in numpy: the same per-level quadrant probabilities
(Graph500 defaults with NSKG noise), a random relabelling, symmetrised, self-loops dropped and parallel edges
kept, as the pipeline stores it. Each batch of random seeds is expanded hop by hop as
``glisp_sampling.khop.KHopSampler`` does: every vertex of a block's source side (the previous block's
vertices plus the new ones) draws up to ``fanout`` of its edges uniformly without replacement, once per hop.
The real sampler's counts for R-MAT 18 and 20 (``bench/infer.py``: ``slice_rows_per_seed``) are the check.

    .venv/bin/python bench/tree_sizes.py --scales 18 20 22 --edge-factors 8 --batch-sizes 1024 1
"""

from __future__ import annotations

import argparse
import time

from glisp_testing.tree_sizes import rmat_csr, tree_sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", type=int, nargs="+", default=[18, 20])
    ap.add_argument("--edge-factors", type=int, nargs="+", default=[8])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1024, 1], help="seeds per sample-wise batch")
    ap.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5], help="per hop, first hop first")
    ap.add_argument("--seeds-per-setting", type=int, default=16_384, help="seeds drawn per (graph, batch size)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    layers = len(args.fanouts)
    print(
        f"| R-MAT scale | edge factor | directed edges | batch | slice rows per seed | input vertices per seed | "
        f"rows vs layerwise ({layers} per vertex) |"
    )
    print("|---|---|---|---|---|---|---|")
    for scale in args.scales:
        for ef in args.edge_factors:
            t = time.perf_counter()
            indptr, nbrs = rmat_csr(scale, ef, args.seed)
            for b in args.batch_sizes:
                rows, inputs = tree_sizes(indptr, nbrs, args.fanouts, b, max(args.seeds_per_setting // b, 1), args.seed)
                print(
                    f"| {scale} | {ef} | {len(nbrs):,} | {b} | {rows:.1f} | {inputs:.1f} | {rows / layers:.1f}x |",
                    flush=True,
                )
            del indptr, nbrs
            print(f"<!-- scale {scale}, edge factor {ef}: {time.perf_counter() - t:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
