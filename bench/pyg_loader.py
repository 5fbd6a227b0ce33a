"""What PyG's remote backend costs: a PyG ``NeighborLoader`` over the service against ``glisp train``'s own loader.

R-MAT scale 18 (``bench/train.py``'s dataset: edge factor 8, 128-d features, AdaDNE into 2), served by 2 servers
(``glisp serve-cluster``, 1 thread each); fanouts [15, 10, 5], batch 1024, prefetch 2, the feature cache holding
20% of the vertices, on both sides. Configurations alternate, ``--repeats`` times; the table shows medians.

- **loader only**: seeds/s of iterating ``--batches`` batches and touching their input features:
  ``glisp_train.loader.Loader`` (GLISP's blocks, the service's quota method) against
  ``glisp_train.pyg.NeighborLoader`` on ``glisp_remote(cluster file)`` with the same quota method
  (``method="uniform"``) and with PyG's exact fanouts (``uniform_exact``, the backend's default).
  Four times ``--batches`` batches per pass.
- **epoch**: ``--batches`` batches with a 3-layer GraphSAGE (hidden 256) and Adam: ``glisp train``'s epoch
  (``run_epoch``, GLISP's block model) against the PyG batches (quota method) trained (a) by the same GLISP
  block model, each layer's block cut from the PyG batch by its hop counts, and (b) by PyG's ``GraphSAGE``
  as a PyG user writes it, trimmed per layer (``num_sampled_nodes_per_hop``) as PyG's hierarchical examples
  do. (b) computes every sampled node in its first layer, the last hop's too; GLISP's blocks compute only
  the nodes the next layer reads.

The ratio column is against GLISP's loader measured in the same run.

``--accuracy GRAPH ...`` (not timed): the node-classification script of ``glisp_testing/pyg_scripts.py`` (PyG's
GraphSAGE example, 10 epochs, fanouts [10, 10], all neighbours at test) on the service and on an in-memory
``Data`` of the same graph (read back through the remote pair: features, labels, every served edge), over
``--seeds`` seeds; the dataset's split when it has one (tolokers: the first of its ten), else 60/20/20.

    .venv/bin/python bench/train.py --root /tmp/glisp-bench-train --graphs rmat cora tolokers --build-only
    flock /tmp/glisp-bench.lock .venv/bin/python bench/pyg_loader.py --root /tmp/glisp-bench-train
    .venv/bin/python bench/pyg_loader.py --root /tmp/glisp-bench-train --accuracy cora tolokers
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from glisp_serving.cluster.child import stop_cluster  # noqa: E402
from glisp_testing.servers import serve_in  # noqa: E402

VC = "adadne-p2"
FANOUTS, BATCH, HIDDEN = [15, 10, 5], 1024, 256


def _cfg(**train):
    from glisp_core.config import load_config, with_values

    base = {"model": "sage", "hidden": HIDDEN, "layers": 3, "fanouts": FANOUTS, "batch_size": BATCH, "prefetch": 2}
    return with_values(load_config(env={}), "train", **{**base, **train})


def dataset(root: Path, graph: str = "rmat"):
    from glisp_core.dataset.layout import resolve_dataset

    built = root / "built.json"
    if not built.exists() or graph not in json.loads(built.read_text()):
        raise SystemExit(
            f"no {graph} dataset under {root}: run bench/train.py --root {root} --graphs {graph} --build-only"
        )
    return resolve_dataset(json.loads(built.read_text())[graph])


def accuracy(graph: str, root: Path, seeds: int, workdir: Path) -> dict:
    """The node script on the service and on the same graph in memory, seeds 0..seeds-1."""
    import torch
    from torch_geometric.data import Data

    from glisp_testing.pyg_scripts import node_script
    from glisp_train.pyg import glisp_remote

    proc, cf = serve_in(dataset(root, graph), VC, workdir, threads=1)
    res: dict = {"graph": graph, "service": [], "memory": []}
    try:
        with glisp_remote(cf) as remote:
            fs, gs = remote
            y = fs.get_tensor(None, "y", None)
            data = Data(x=fs.get_tensor(None, "x", None), y=y, edge_index=torch.stack(gs.get_edge_index(None, "coo")))
            split = remote.source.labels_and_split()[1]
            labelled = np.flatnonzero(y.numpy() >= 0)
            if (split[labelled] >= 0).any():
                idx = tuple(torch.from_numpy(labelled[split[labelled] == c]) for c in (0, 1, 2))
            else:
                perm = np.random.default_rng(0).permutation(labelled)
                a, b = int(0.6 * len(perm)), int(0.8 * len(perm))
                idx = (torch.from_numpy(perm[:a]), torch.from_numpy(perm[a:b]), torch.from_numpy(perm[b:]))
            for seed in range(seeds):
                for kind, d in (("memory", data), ("service", remote)):
                    r = node_script(d, remote.num_features, remote.num_classes, idx, seed)
                    res[kind].append(r)
                    print(f"[accuracy] {graph} seed {seed} {kind}: {r}", flush=True)
    finally:
        stop_cluster(proc)
    return res


def accuracy_table(results: list[dict]) -> str:
    lines = ["| graph | metric | seeds | in-memory Data mean ± std | service | difference (points) |", "|---" * 6 + "|"]
    for r in results:
        for metric in ("acc", "auc"):
            if metric not in r["memory"][0]:
                continue
            m = np.array([x[metric] for x in r["memory"]])
            s = np.array([x[metric] for x in r["service"]])
            lines.append(
                f"| {r['graph']} | {metric} | {len(m)} | {m.mean():.4f} ± {m.std():.4f} | {s.mean():.4f} ± {s.std():.4f} "
                f"| {100 * (s.mean() - m.mean()):+.2f} |"
            )
    return "\n".join(lines)


def glisp_loader_pass(source, loader, batches) -> tuple[float, int]:
    from glisp_train.loader import LoaderTimes

    t, n = time.perf_counter(), 0
    for b in loader.batches(batches, 11, LoaderTimes()):
        n += len(b.seeds)
        assert b.x is not None and b.x.shape[1] > 0
    return time.perf_counter() - t, n


def pyg_loader_pass(remote, seeds, method: str) -> tuple[float, int]:
    import torch

    from glisp_train.pyg import NeighborLoader

    torch.manual_seed(11)
    loader = NeighborLoader(remote, FANOUTS, input_nodes=seeds, batch_size=BATCH, method=method, prefetch=2)
    t, n = time.perf_counter(), 0
    for b in loader:
        n += b.batch_size
        assert b.x.shape[1] > 0
    return time.perf_counter() - t, n


def pyg_epoch(remote, model, opt, seeds, method: str) -> tuple[float, int]:
    """PyG's mini-batch training loop over the PyG batches (trim_to_layer through the hop counts)."""
    import torch
    import torch.nn.functional as F

    from glisp_train.pyg import NeighborLoader

    torch.manual_seed(12)
    loader = NeighborLoader(remote, FANOUTS, input_nodes=seeds, batch_size=BATCH, method=method, shuffle=True)
    model.train()
    t, n = time.perf_counter(), 0
    for b in loader:
        opt.zero_grad()
        out = model(b.x, b.edge_index, num_sampled_nodes_per_hop=b.num_sampled_nodes,
                    num_sampled_edges_per_hop=b.num_sampled_edges)[: b.batch_size]  # fmt: skip
        F.cross_entropy(out, b.y[: b.batch_size]).backward()
        opt.step()
        n += b.batch_size
    return time.perf_counter() - t, n


def pyg_epoch_glisp_model(remote, s, seeds, method: str) -> tuple[float, int]:
    """GLISP's block model (the baseline's) on the PyG batches: a PyG batch is already layered by hop (edges
    into hop h's nodes follow those into hop h-1's), so layer l's block is its first edges and nodes."""
    import torch
    import torch.nn.functional as F

    from glisp_train.pyg import NeighborLoader

    torch.manual_seed(12)
    loader = NeighborLoader(remote, FANOUTS, input_nodes=seeds, batch_size=BATCH, method=method, shuffle=True)
    s.model.train()
    t, n = time.perf_counter(), 0
    for b in loader:
        s.opt.zero_grad()
        hops = len(b.num_sampled_edges)
        blocks = [
            SimpleNamespace(
                edge_index=b.edge_index[:, : sum(b.num_sampled_edges[: hops - i])],
                num_dst=sum(b.num_sampled_nodes[: hops - i]),
            )
            for i in range(hops)
        ]
        F.cross_entropy(s.model(b.x, blocks, None), b.y[: b.batch_size]).backward()
        s.opt.step()
        n += b.batch_size
    return time.perf_counter() - t, n


def measure(dv, args: argparse.Namespace, workdir: Path) -> list[dict]:
    import torch
    from torch_geometric.nn import GraphSAGE

    from glisp_train.dist import Dist, rank_batches
    from glisp_train.loader import Loader
    from glisp_train.progress import Progress
    from glisp_train.pyg import glisp_remote
    from glisp_train.source import open_cluster
    from glisp_train.trainer import hop_fanouts, setup

    torch.set_num_threads(1)
    proc, cf = serve_in(dv, VC, workdir, threads=1)
    rows: list[dict] = []
    try:
        source = open_cluster(cf, _cfg())
        mb = int(0.2 * source.num_vertices) * 4 * source.feature_dim >> 20  # 20% of the vertices, both sides
        cfg = _cfg(max_batches=args.batches, feature_cache_mb=mb, dropout=0.5)
        remote = glisp_remote(open_cluster(cf, cfg), cfg, feature_cache_mb=mb)
        try:
            s = setup(cfg, source, Dist())
            labels, split = source.labels_and_split()
            perm = np.random.default_rng(0).permutation(np.flatnonzero(split == 0))
            seeds = perm[: args.batches * BATCH]  # the epochs
            lseeds = perm[: 4 * args.batches * BATCH]  # the loader passes: four times as many batches
            batches = rank_batches(lseeds, Dist(), BATCH, 4 * args.batches)
            gl = Loader(source, hop_fanouts(cfg.train, source.edge_types), s.cache, 2, "in")
            tseeds, tlseeds = torch.from_numpy(seeds), torch.from_numpy(lseeds)
            model = GraphSAGE(128, HIDDEN, num_layers=3, out_channels=int(labels.max()) + 1, dropout=0.5)
            opt = torch.optim.Adam(model.parameters(), lr=0.003)
            _ = remote.feature_store.labels  # fetched once, before timing
            runs = {
                ("loader", "glisp"): lambda: glisp_loader_pass(source, gl, batches),
                ("loader", "pyg uniform"): lambda: pyg_loader_pass(remote, tlseeds, "uniform"),
                ("loader", "pyg uniform_exact"): lambda: pyg_loader_pass(remote, tlseeds, "uniform_exact"),
                ("epoch", "glisp"): lambda: _glisp_epoch(s, Progress),
                ("epoch", "pyg batches, glisp's model"): lambda: pyg_epoch_glisp_model(remote, s, tseeds, "uniform"),
                ("epoch", "pyg batches, PyG GraphSAGE"): lambda: pyg_epoch(remote, model, opt, tseeds, "uniform"),
            }
            for fn in runs.values():  # warm-up: numba, connections, lazy paths
                fn()
            for rep in range(args.repeats):
                for (what, who), fn in runs.items():
                    cpu = time.process_time()
                    sec, count = fn()
                    rows.append({"what": what, "who": who, "rep": rep, "s": sec, "seeds": count,
                                 "cpu_s": time.process_time() - cpu})  # fmt: skip
                    print(f"[pyg] rep {rep} {what} {who}: {sec:.2f}s, {count / sec:,.0f} seeds/s", flush=True)
        finally:
            remote.close()
            source.close()
    finally:
        stop_cluster(proc)
    return rows


def _glisp_epoch(s, progress_cls) -> tuple[float, int]:
    from glisp_train.trainer import run_epoch

    t = time.perf_counter()
    rec = run_epoch(s.ctx, s.task, s.train_loader, s.opt, 1, progress_cls(enabled=False))
    return time.perf_counter() - t, int(rec["examples"])


def table(rows: list[dict]) -> str:
    lines = [
        "| measured | loader | s (median) | seeds/s | ratio to GLISP's loader | process CPU s |",
        "|---" * 6 + "|",
    ]
    for what in ("loader", "epoch"):
        base = float(np.median([r["s"] for r in rows if r["what"] == what and r["who"] == "glisp"]))
        for who in dict.fromkeys(r["who"] for r in rows if r["what"] == what):
            rs = [r for r in rows if r["what"] == what and r["who"] == who]
            sec = float(np.median([r["s"] for r in rs]))
            seeds = rs[0]["seeds"]
            cpu = float(np.median([r["cpu_s"] for r in rs]))
            lines.append(f"| {what} | {who} | {sec:.2f} | {seeds / sec:,.0f} | {sec / base:.2f} | {cpu:.1f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="/tmp/glisp-bench-train", help="bench/train.py's work directory")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--accuracy", nargs="*", help="graphs for the accuracy comparison instead of the timing")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    root = Path(args.root)
    work = root / "pyg-work"
    work.mkdir(parents=True, exist_ok=True)
    if args.accuracy:
        results = [accuracy(g, root, args.seeds, work) for g in args.accuracy]
        print(accuracy_table(results))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        return 0
    rows = measure(dataset(root), args, work)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
