"""The real graphs of the partition benches, ingested with the treatment of the reference numbers.

Every graph goes through the real ``run_ingest`` as ``glisp ingest --undirected --duplicates merge
--self-loops drop`` would run it (two rows per undirected pair), so our numbers and
``/work/shared/tools/REFERENCE-PARTITIONS.md`` describe the same simple undirected graph:

* cora, lastfm, imdb: the built-ins (``--builtin NAME``);
* soc-Slashdot0902: the SNAP file (first two columns, ``#`` lines skipped);
* tolokers: the ``edges`` array of ``tolokers.npz``;
* citeseer: the adjacency dict of Planetoid's ``ind.citeseer.graph``;
* ego-circles, ego-dense, ego-separable: synthetic ego-network stand-ins (``glisp_testing.graphs``), only when named.

The files under ``/work/shared/data`` are optional: a graph whose file is missing is skipped with a note.
``dump`` writes the ingested rows as ``.npz`` (eid, src, dst, n) for the in-process sweep.

    .venv/bin/python bench/real_graphs.py --out /tmp/glisp-graphs      # ingest all + dump npz
"""

from __future__ import annotations

import argparse
import gzip
import pickle
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = Path("/work/shared/data")
REAL = ["soc-Slashdot0902", "tolokers", "citeseer", "cora", "lastfm", "imdb"]
BUILTIN = ("cora", "lastfm", "imdb")
# synthetic stand-ins, by name (not in REAL): the ego-network shapes of issue 26 item 5
STAND_INS = {"ego-circles": "ego_circles_edges", "ego-dense": "ego_dense_edges", "ego-separable": "ego_separable_edges"}
REFERENCE_JSON = Path("/work/shared/tools/reference_partitions.json")


def _pairs(name: str, data: Path) -> np.ndarray | None:
    """(k, 2) int64 raw id pairs of a file graph, or None when its file is missing."""
    if name == "soc-Slashdot0902":
        f = data / "soc-Slashdot0902.txt.gz"
        if not f.exists():
            return None
        with gzip.open(f, "rt") as fh:
            return np.loadtxt((ln for ln in fh if not ln.startswith("#")), dtype=np.int64, usecols=(0, 1))
    if name == "tolokers":
        f = data / "tolokers.npz"
        return np.load(f)["edges"].astype(np.int64).reshape(-1, 2) if f.exists() else None
    if name == "citeseer":
        f = data / "citeseer" / "ind.citeseer.graph"
        if not f.exists():
            return None
        with open(f, "rb") as fh:
            adj = pickle.load(fh, encoding="latin1")
        return np.array([(a, b) for a, nb in adj.items() for b in nb], np.int64).reshape(-1, 2)
    if name in STAND_INS:
        from glisp_testing import graphs

        (src, dst), _ = getattr(graphs, STAND_INS[name])()
        return np.stack([src, dst], 1)
    raise ValueError(f"unknown file graph {name!r} (expected one of {REAL})")


def undirected_simple(ing):
    """The ingest policies of the reference treatment, over ``ing`` (an IngestConfig)."""
    import dataclasses

    return dataclasses.replace(ing, directed=False, duplicates="merge", self_loops="drop")


def ingest_real(spark, cfg, root: Path, names: list[str], data: Path = DATA, log=print) -> list[tuple[str, object]]:
    """Ingest each named graph under ``root`` with the reference treatment: [(name, DatasetVersion)]."""
    from glisp_core.config import EdgeSource, with_values
    from spark_jobs.generate.builtin import builtin_config
    from spark_jobs.ingest.job import run_ingest

    c = with_values(cfg, "dataset", root=str(root))
    out = []
    for name in names:
        if name in BUILTIN:
            ing = undirected_simple(builtin_config(name, with_values(c, "ingest", graph=name).ingest))
        else:
            pairs = _pairs(name, data)
            if pairs is None:
                log(f"{name}: skipped (no file under {data})")
                continue
            tsv = root / "_tsv" / f"{name}.tsv"
            tsv.parent.mkdir(parents=True, exist_ok=True)
            np.savetxt(tsv, pairs, fmt="%d", delimiter="\t", header="src\tdst", comments="")
            ing = with_values(c, "ingest", graph=name).ingest
            ing = undirected_simple(ing)
            import dataclasses

            ing = dataclasses.replace(ing, edges=[EdgeSource(path=str(tsv), format="tsv")], vertices=[])
        out.append((name, run_ingest(spark, c, ing, log=lambda s: None)))
    return out


def reference(graph: str, p: int, path: Path = REFERENCE_JSON) -> dict[str, dict]:
    """The reference numbers {algo: {RF, VB, EB, rounds?}} for a graph and p ({} when absent)."""
    import json

    if not path.exists():
        return {}
    out = {}
    for r in json.loads(path.read_text()):
        if r["graph"] == graph and r["p"] == p:
            out[r["algo"]] = r
    return out


def dump(dv, path: Path) -> None:
    """The ingested rows (eid, src, dst) and |V| as one .npz, for in-process sweeps."""
    import pyarrow.parquet as pq

    from glisp_core.dataset.manifest import read_manifest

    t = pq.read_table(str(dv.edges), columns=["eid", "src", "dst"])
    n = int(read_manifest(dv).schema["num_vertices"])
    o = np.argsort(t.column("eid").to_numpy())
    np.savez(path, **{c: t.column(c).to_numpy()[o] for c in ("eid", "src", "dst")}, n=n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="dataset root and .npz directory")
    ap.add_argument("--graphs", nargs="+", default=REAL)
    args = ap.parse_args()
    from glisp_core.config import SparkConfig, load_config
    from glisp_spark.session import get_spark

    out = Path(args.out)
    spark = get_spark(SparkConfig(master="local[2]", log_level="ERROR"), checkpoint_dir=str(out / "_ck"))
    for name, dv in ingest_real(spark, load_config(env={}), out, args.graphs):
        dump(dv, out / f"{name}.npz")
        print(name, dv.path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
