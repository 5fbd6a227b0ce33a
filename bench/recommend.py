"""Recommendation through the service against PyG's in-memory LightGCN: recall@20, NDCG@20, epoch time.

The data are the LastFM interactions of the LightGCN reference implementation (``data1.txt`` for training,
``test1.txt`` for test: 1,892 users, 4,489 artists; tab-separated ``user item count``, ids from 1)::

    git clone --depth 1 https://github.com/gusye1234/LightGCN-PyTorch /tmp/LightGCN-PyTorch
    flock /tmp/glisp-bench.lock .venv/bin/python bench/recommend.py --data /tmp/LightGCN-PyTorch/data/lastfm

Both sides train on the same interactions: the reference's training file less ``--val`` of its interactions
(a seeded sample, the validation set that picks the best epoch on both sides); both are judged on the
reference's test file, ranking every item for every test user with the user's training items left out.

- **service**: the interactions ingested as a typed bipartite graph (``user -listened-> item``, undirected),
  AdaDNE into 2 partitions, ``glisp link-split --heldout`` with exactly the validation and test pairs,
  2 servers; ``glisp train``'s LightGCN on learnable node embeddings held by the servers (sparse Adagrad),
  BPR loss, negatives among items, sampled fanouts in training, full neighbourhoods in evaluation.
- **in memory**: ``torch_geometric.nn.models.LightGCN`` on the whole training graph (symmetric normalisation,
  full propagation every step), BPR with one uniform item negative per positive, Adam, as PyG's LightGCN
  example trains it.
- **most popular**: every user is recommended the items with the most training interactions.

Epochs are passes over the training interactions on both sides (same batch size); the epoch time is the
median over epochs. Ratios are against the in-memory LightGCN of the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from glisp_core.ranking import TopK, held_out_users, items_of, recall_ndcg  # noqa: E402

K = 20


def load(data: Path, val: float, seed: int) -> dict:
    """Training, validation and test (user, item) pairs, 0-based, duplicates removed."""
    tr = np.unique(np.loadtxt(data / "data1.txt", dtype=np.int64, usecols=(0, 1)) - 1, axis=0)
    te = np.unique(np.loadtxt(data / "test1.txt", dtype=np.int64, usecols=(0, 1)) - 1, axis=0)
    te = te[~_isin_pairs(te, tr)]  # a test pair that is also a training pair is a training pair
    pick = np.random.default_rng(seed).random(len(tr)) < val
    users = int(max(tr[:, 0].max(), te[:, 0].max())) + 1
    items = int(max(tr[:, 1].max(), te[:, 1].max())) + 1
    return {"train": tr[~pick], "val": tr[pick], "test": te, "users": users, "items": items}


def _isin_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w = int(max(a[:, 1].max(), b[:, 1].max())) + 1
    return np.isin(a[:, 0] * w + a[:, 1], b[:, 0] * w + b[:, 1])


def rank(user_emb: np.ndarray, item_emb: np.ndarray, d: dict) -> dict:
    """recall@20 / NDCG@20 of the test pairs over every item, training items left out (glisp_core.ranking)."""
    users, truth = held_out_users(d["test"][:, 0], d["test"][:, 1], 10**9, 0)
    topk = TopK(user_emb[users], K, items_of(users, d["train"][:, 0], d["train"][:, 1]))
    topk.add(np.arange(d["items"]), item_emb)
    got = recall_ndcg(topk.result(), truth, (K,))
    return {"recall@20": got["recall@20"], "ndcg@20": got["ndcg@20"], "users": got["ranked_users"]}


def most_popular(d: dict) -> dict:
    pop = np.bincount(d["train"][:, 1], minlength=d["items"]).astype(np.float32)
    return rank(np.ones((d["users"], 1), np.float32), pop[:, None], d)


def in_memory(d: dict, dim: int, layers: int, epochs: int, batch: int, lr: float, seed: int) -> dict:
    """PyG's LightGCN on the training graph, BPR, Adam; the epoch with the best validation recall@20."""
    import torch
    from torch_geometric.nn.models import LightGCN

    torch.manual_seed(seed)
    u, i, n_u = d["train"][:, 0], d["train"][:, 1] + d["users"], d["users"]
    ei = torch.from_numpy(np.stack([np.concatenate([u, i]), np.concatenate([i, u])]))
    model = LightGCN(n_u + d["items"], dim, layers)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    best, times = {"val_recall@20": -1.0}, []
    for epoch in range(1, epochs + 1):
        t = time.perf_counter()
        for idx in np.array_split(rng.permutation(len(u)), max(1, len(u) // batch)):
            neg = rng.integers(0, d["items"], len(idx)) + n_u
            pairs = torch.from_numpy(np.stack([np.concatenate([u[idx], u[idx]]), np.concatenate([i[idx], neg])]))
            opt.zero_grad()
            rank_ = model(ei, pairs)
            loss = model.recommendation_loss(rank_[: len(idx)], rank_[len(idx) :], node_id=pairs.unique())
            loss.backward()
            opt.step()
        times.append(time.perf_counter() - t)
        with torch.no_grad():
            emb = model.get_embedding(ei).numpy()
        val = rank(emb[:n_u], emb[n_u:], {**d, "test": d["val"]})["recall@20"]
        if val > best["val_recall@20"]:
            best = {"val_recall@20": val, "epoch": epoch, **rank(emb[:n_u], emb[n_u:], d)}
    return {**best, "epoch_s": statistics.median(times)}


def service(
    d: dict, work: Path, dim: int, layers: int, epochs: int, batch: int, lr: float, seed: int, **train_kw
) -> dict:
    """Ingest, partition, link-split with the given pairs, serve, train LightGCN on node embeddings."""
    from glisp_core.config import EdgeSource, load_config, with_values
    from glisp_serving.cluster.child import stop_cluster
    from glisp_spark.session import get_spark
    from glisp_testing.servers import serve_in
    from glisp_train.dist import Dist
    from glisp_train.link_split import run_link_split
    from glisp_train.source import open_cluster
    from glisp_train.trainer import train
    from spark_jobs.ingest.job import run_ingest
    from spark_jobs.partition.job import run_partition
    from spark_jobs.serialize.job import run_serialize

    every = np.concatenate([d["train"], d["val"], d["test"]])
    (work / "edges.csv").write_text("src,dst\n" + "".join(f"u{a},i{b}\n" for a, b in every))
    held = [(p, "val") for p in d["val"]] + [(p, "test") for p in d["test"]]
    (work / "heldout.csv").write_text("src,dst,split\n" + "".join(f"u{a},i{b},{s}\n" for (a, b), s in held))
    cfg = with_values(load_config(env={}), "dataset", root=str(work / "root"))
    src = EdgeSource(path=str(work / "edges.csv"), src_type="user", dst_type="item", edge_type="listened")
    cfg = with_values(cfg, "ingest", graph="lastfm", edges=[src], directed=False)
    cfg = with_values(cfg, "partition", algorithm="adadne", parts=2, progress=False)
    cfg = with_values(cfg, "serialize", parquet_copy=False)
    cfg = with_values(cfg, "train", link_heldout=str(work / "heldout.csv"))
    spark = get_spark(cfg.spark)
    dv = run_ingest(spark, cfg)
    run_partition(spark, cfg, dv)
    run_serialize(spark, cfg, dv, run="adadne-p2")
    run_link_split(spark, cfg, dv, "adadne-p2")
    proc, cf = serve_in(dv, "adadne-p2-lp", work, threads=1)
    tcfg = with_values(
        cfg,
        "train",
        task="link",
        model="lightgcn",
        node_embeddings=dim,
        embedding_lr=lr,
        link_loss="bpr",
        layers=layers,
        batch_size=batch,
        epochs=epochs,
        negatives=1,
        eval_negatives=100,
        seed=seed,
    )
    tcfg = with_values(tcfg, "train", **train_kw)
    try:
        source = open_cluster(cf, tcfg)
        try:
            res = train(tcfg, source, Dist())
            res.embeddings.release()
        finally:
            source.close()
    finally:
        stop_cluster(proc)
    times = [e["epoch_s"] for e in res.epochs]
    return {
        "recall@20": res.test["recall@20"],
        "ndcg@20": res.test["ndcg@20"],
        "users": res.test["ranked_users"],
        "epoch": res.best_epoch,
        "epoch_s": statistics.median(times),
        "wait_share": statistics.median(e["wait_share"] for e in res.epochs),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="LightGCN-PyTorch's data/lastfm directory")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--val", type=float, default=0.05)
    p.add_argument("--lr-memory", type=float, default=0.01, help="Adam, in memory")
    p.add_argument("--lr-service", type=float, default=0.1, help="sparse Adagrad of the served embeddings")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fanout", type=int, default=10, help="per hop, service training")
    p.add_argument("--prefetch", type=int, default=2, help="service: batches prepared ahead (0: exact updates)")
    p.add_argument("--skip-memory", action="store_true", help="(tuning) the service and most-popular rows only")
    a = p.parse_args()
    d = load(a.data, a.val, a.seed)
    print(
        f"LastFM: {d['users']} users, {d['items']} items; {len(d['train'])} training, {len(d['val'])} validation, "
        f"{len(d['test'])} test interactions; dim {a.dim}, {a.layers} layers, {a.epochs} epochs, batch {a.batch}"
    )
    rows = {"most popular": most_popular(d)}
    if not a.skip_memory:
        rows["LightGCN in memory (PyG)"] = in_memory(d, a.dim, a.layers, a.epochs, a.batch, a.lr_memory, a.seed)
    with tempfile.TemporaryDirectory(prefix="glisp-bench-rec-") as tmp:
        rows["LightGCN through the service"] = service(
            d,
            Path(tmp),
            a.dim,
            a.layers,
            a.epochs,
            a.batch,
            a.lr_service,
            a.seed,
            fanouts=[a.fanout] * a.layers,
            prefetch=a.prefetch,
        )
    ref = rows.get("LightGCN in memory (PyG)", rows["most popular"] | {"epoch_s": 1.0})
    print(f"\n{'':32} {'recall@20':>9} {'ndcg@20':>8} {'ratio':>6} {'best epoch':>10} {'epoch s':>8} {'ratio':>6}")
    for name, r in rows.items():
        ep = f"{r['epoch_s']:8.2f} {r['epoch_s'] / ref['epoch_s']:6.2f}" if "epoch_s" in r else f"{'':8} {'':6}"
        print(
            f"{name:32} {r['recall@20']:9.4f} {r['ndcg@20']:8.4f} {r['recall@20'] / ref['recall@20']:6.3f} "
            f"{r.get('epoch', ''):>10} {ep}"
        )
    svc = rows["LightGCN through the service"]
    print(f"service: the trainer waited for batches {svc['wait_share']:.0%} of an epoch (median)")


if __name__ == "__main__":
    main()
