"""A mean SAGE slice aggregated first (PyG's SAGEConv) against transformed first (``glisp_core.models.sage_mean``).

For each slice shape (input and output widths) and block shape (destinations, edges, source rows) the table
gives the median milliseconds of --repeats alternating calls of both orders in float64 (what inference computes
with stable samples) and float32, their ratio, the largest difference of the rows, and which order
``sage_transforms_first`` picks: the rule should pick the faster one where they differ by more than the noise.
The baseline is PyG's own call on the same tensors in the same run. One thread, as an inference task uses::

    flock /tmp/glisp-bench.lock .venv/bin/python bench/sage_order.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (d_in, d_out, destinations, edges, source rows): a last layer, a narrowing hidden layer and a widening first
# layer, over blocks from a few thousand edges (a batch of light vertices) to a hub's 130,000
SHAPES = [
    (256, 8, 256, 4_000, 4_256),
    (256, 8, 1_024, 60_000, 51_024),
    (256, 8, 64, 130_000, 50_064),
    (256, 8, 1_000, 100, 2_000),
    (256, 64, 256, 4_000, 4_256),
    (256, 64, 1_024, 60_000, 51_024),
    (256, 64, 64, 130_000, 50_064),
    (32, 256, 1_024, 60_000, 51_024),
]


def _time(f, repeats: int) -> float:
    t = time.perf_counter()
    for _ in range(repeats):
        f()
    return (time.perf_counter() - t) / repeats


def one_shape(dtype, shape: tuple[int, int, int, int, int], repeats: int) -> tuple[float, float, float]:
    """Median ms of PyG's order and of the transformed-first one (forced, whatever the rule says), their rows'
    largest difference."""
    import torch
    from torch_geometric.nn import SAGEConv

    from glisp_core.models import sage_mean_transformed_first

    d_in, d_out, nd, m, ns = shape
    conv = SAGEConv((d_in, d_in), d_out, aggr="mean").to(dtype)
    x = torch.randn(ns, d_in, dtype=dtype)
    ei = torch.stack([torch.randint(0, ns, (m,)), torch.randint(0, nd, (m,))])

    def pyg() -> torch.Tensor:
        return conv((x, x[:nd]), ei, size=(ns, nd))

    def forced() -> torch.Tensor:  # the transformed-first order, whatever the rule says
        return sage_mean_transformed_first(conv, x, ei, nd)

    with torch.no_grad():
        diff = float((pyg() - forced()).abs().max())
        a, b = [], []
        for _ in range(repeats):  # alternating: drift on a shared machine falls on both
            a.append(_time(pyg, 4))
            b.append(_time(forced, 4))
    return statistics.median(a) * 1e3, statistics.median(b) * 1e3, diff


def main() -> int:
    import torch

    from glisp_core.models import sage_transforms_first

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="alternating passes; each pass times 4 calls of each")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    print(f"{'dtype':>7} {'d_in':>5} {'d_out':>5} {'dst':>6} {'edges':>8} {'src':>7} "
          f"{'pyg ms':>8} {'first ms':>9} {'ratio':>6} {'max diff':>9} {'rule':>6}")  # fmt: skip
    for dtype in (torch.float64, torch.float32):
        for shape in SHAPES:
            d_in, d_out, nd, m, ns = shape
            p, f, diff = one_shape(dtype, shape, args.repeats)
            rule = "first" if sage_transforms_first(d_in, d_out, ns, nd, m) else "pyg"
            print(f"{str(dtype)[6:]:>7} {d_in:>5} {d_out:>5} {nd:>6} {m:>8} {ns:>7} {p:>8.2f} {f:>9.2f} "
                  f"{p / f:>6.2f} {diff:>9.1e} {rule:>6}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
