"""HDRF (Petroni et al., CIKM 2015): streaming greedy vertex-cut, one process, chunked, numba.

The stream is the edge rows in a seeded random order grouped by unordered pair (Spark sorts by a pair
hash and writes it to scratch Parquet in the dataset's store); the driver reads it back
``hdrf.chunk_edges`` rows at a time, so the edge set is never held at once. State is O(|V|): partial degrees and partition bitsets.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F

from glisp_core.config import to_dict
from glisp_core.storage.store import store_for
from glisp_spark.tables import read_parquet, write_parquet
from spark_jobs.partition import kernels
from spark_jobs.partition.base import PartitionContext, Partitioner, PartitionResult
from spark_jobs.partition.rounds import ALLOC_PA
from spark_jobs.partition.staging import stream_batches


class HDRF(Partitioner):
    name = "hdrf"

    def params(self) -> dict:
        return to_dict(self.cfg.hdrf)

    def partition(self, ctx: PartitionContext) -> PartitionResult:
        hcfg = self.cfg.hdrf
        t0 = time.perf_counter()
        lo, hi = F.least("src", "dst"), F.greatest("src", "dst")
        stream_dir = ctx.staging / "hdrf_stream"
        stream = ctx.edges.withColumn("k", F.xxhash64(lo, hi, F.lit(ctx.seed))).orderBy("k", lo, hi, "eid")
        write_parquet(stream.select("eid", "src", "dst"), stream_dir)
        t_sort = time.perf_counter() - t0
        n, p = ctx.num_vertices, ctx.parts
        pdeg = np.zeros(n, np.int64)
        bits = np.zeros((n, (p + 63) // 64), np.uint64)
        sizes = np.zeros(p, np.int64)
        last = np.array([-1, -1, -1], np.int64)
        out_dir = ctx.staging / "hdrf_alloc"
        done = 0
        out = out_dir / "part-00000.parquet"
        with store_for(out).open_output(out) as sink, pq.ParquetWriter(sink, ALLOC_PA) as w:
            for b in stream_batches(stream_dir, hcfg.chunk_edges):
                eid, src, dst = (b.column(i).to_numpy() for i in range(3))
                part = kernels.hdrf_chunk(src, dst, pdeg, bits, sizes, last, hcfg.lam, hcfg.epsilon)
                w.write_batch(pa.record_batch([eid, src, dst, part], schema=ALLOC_PA))
                done += len(eid)
                ctx.log(f"hdrf: {done:,}/{ctx.num_edges:,} edges streamed, sizes {sizes.tolist()}")
        alloc = read_parquet(ctx.spark, out_dir)
        return PartitionResult(
            alloc, timings={"stream_sort_s": round(t_sort, 3), "stream_s": round(time.perf_counter() - t0 - t_sort, 3)}
        )
