"""p = 128 end to end past one 64-bit word of partition bits: AdaDNE on real Spark, serialize, every
partition against brute force, and Gather-Apply sampling routed over all 128 partitions as the cluster
routes it (the servers' kernels and the client's routing and merge, in one process)."""

from __future__ import annotations

import numpy as np
import pytest

from glisp_core.config import with_values
from glisp_testing.graphs import rmat_edges, write_dataset
from glisp_testing.partitions import check_reader, open_all, read_ingest, replica_sets

P = 128


@pytest.fixture(scope="module")
def served(tmp_path_factory, spark):
    from glisp_core.config import load_config
    from spark_jobs.partition.job import run_partition
    from spark_jobs.serialize.job import run_serialize

    s, d = rmat_edges(10, 8, seed=3)
    dv = write_dataset(tmp_path_factory.mktemp("p128"), "p128", s, d)
    cfg = with_values(load_config(env={}), "partition", algorithm="adadne", parts=P, progress=False)
    rec = run_partition(spark, with_values(cfg, "partition.adadne", starts=1), dv)
    run = rec.name.split("/", 1)[1]
    run_serialize(spark, cfg, dv, run)
    return dv, run


def test_serialized_partitions_match_brute_force(served) -> None:
    import pandas as pd

    dv, run = served
    g = read_ingest(dv)
    n = int(max(g["src"].max(), g["dst"].max())) + 1
    part = pd.read_parquet(dv.assignment(run)).set_index("eid").loc[g["eid"], "part"].to_numpy()
    assert part.max() >= 64, "some rows sit in partitions past the first 64-bit word"
    reps = replica_sets(g["src"], g["dst"], part, n, P)
    out_deg, in_deg = np.bincount(g["src"], minlength=n), np.bincount(g["dst"], minlength=n)
    readers = open_all(dv.serialized(run), P)
    for k, r in enumerate(readers):
        sel = part == k
        check_reader(
            r,
            g["src"][sel],
            g["dst"][sel],
            g["etype"][sel] if "etype" in g else np.zeros(int(sel.sum()), np.int64),
            num_vertices_global=n,
            out_deg=out_deg,
            in_deg=in_deg,
            reps=reps,
        )


def test_sampling_over_128_partitions(served) -> None:
    """A one-hop sample larger than every degree returns each vertex's whole out-neighbourhood, gathered
    from every partition that holds a replica (bits past 64 included) and merged."""
    from glisp_sampling.cluster_facts import routing_from_partitions
    from glisp_sampling.gather import PartitionSampler
    from glisp_sampling.inprocess import PartitionsBackend

    dv, run = served
    g = read_ingest(dv)
    readers = open_all(dv.serialized(run), P)
    routing = routing_from_partitions(dv, run, P)
    backend = PartitionsBackend([PartitionSampler(r) for r in readers], routing)
    seeds = np.unique(g["src"])
    assert routing.bits.shape[1] == P // 8 and (routing.bits[:, 8:] != 0).any()  # replicas past partition 63
    blk = backend.sample(seeds, [100_000], method="uniform_exact", features=False, labels=False).blocks[-1]
    src_ids, ei = blk.src_ids.numpy(), blk.edge_index.numpy()
    got = np.sort(blk.dst_ids.numpy()[ei[1]] * (1 << 20) + src_ids[ei[0]])
    want = np.sort(g["src"] * (1 << 20) + g["dst"])
    assert np.array_equal(got, want)
