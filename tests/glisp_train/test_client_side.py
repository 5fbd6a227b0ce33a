"""What the trainer adds on the client side: the feature cache, routing from the servers, seed checks, ids."""

from __future__ import annotations

import json

import numpy as np
import pytest

from glisp_app.cli import main as glisp
from glisp_core.dataset.idmap import IdError, IdMap
from glisp_sampling.cluster_facts import routing_from_partitions
from glisp_sampling.khop import SeedError, check_seeds
from glisp_serving.client.info_fetch import fetch_cluster_info
from glisp_serving.client.sampling_client import SamplingClient
from glisp_train.cache import FeatureCache, hot_degree
from tests.glisp_train.conftest import P2


def test_feature_cache_returns_exactly_what_the_servers_return(cora, cora_cluster):
    with SamplingClient(cora_cluster.cluster_file, direction="in") as client:
        deg_out = np.bincount(cora.src, minlength=cora.n)
        d = cora.features.shape[1]
        budget = int(0.3 * cora.n) * 4 * d  # 30% of the vertices
        cache = client._run(
            FeatureCache.build(
                client.backend, hot_degree(deg_out, None, "in"), budget, d, __import__("torch").device("cpu")
            )
        )
        assert len(cache.ids) == int(0.3 * cora.n)
        assert cache.rows.table is not None  # the hottest 30% of ids are dense: found by a table
        # the hottest by out-degree (sampling in-neighbours draws a vertex through its out-edges)
        assert deg_out[cache.ids].min() >= np.sort(deg_out)[::-1][len(cache.ids) - 1]
        batch = client.sample(np.arange(0, cora.n, 7), [10, 5], seed=3, features=False, labels=False)
        ids = batch.input_ids.numpy()
        plan = client._run(cache.plan(ids))
        x = cache.assemble(plan, cache.device).numpy()
        want = client.lookup(ids, features=True, labels=False)["features"]
        assert np.array_equal(x, want) and np.array_equal(x, cora.features[ids])
        c = cache.counters
        assert c.rows == len(ids) and 0 < c.hits < len(ids)
        assert c.bytes_fetched == (len(ids) - c.hits) * d * 4
        assert c.hit_ratio > 0.3  # hot vertices are sampled more than their share


def test_a_client_with_only_the_cluster_file_routes_through_the_servers(cora, cora_cluster, tmp_path, capsys):
    spec = json.loads(cora_cluster.cluster_file.read_text())
    spec["dataset"] = str(tmp_path / "not-on-this-machine")
    only = tmp_path / "cluster.json"
    only.write_text(json.dumps(spec))
    want = routing_from_partitions(cora.dv, P2, 2)
    with SamplingClient(only) as client:  # client.routing_source = "auto": the files are not here
        assert np.array_equal(client.routing.bits, want.bits) and np.array_equal(client.routing.master, want.master)
        b = client.sample(np.array([0, 5, 9]), [5, 5], seed=1)
        assert np.array_equal(b.x.numpy(), cora.features[b.input_ids.numpy()])
    from glisp_core.config import ClientConfig
    from glisp_serving.cluster.cluster_file import ClusterSpec

    info = fetch_cluster_info(ClusterSpec.read(only), ClientConfig(), owner_direction="out")
    out_deg, in_deg = info.degrees()
    assert np.array_equal(out_deg, np.bincount(cora.src, minlength=cora.n))
    assert np.array_equal(in_deg, np.bincount(cora.dst, minlength=cora.n))
    assert info.schema["feature_dim"] == 1433 and info.num_vertices == cora.n
    with pytest.raises(Exception, match="not an edge-cut"):  # a vertex-cut: owners are refused, as from files
        info.routing_table("out")
    # glisp train needs somewhere to write: the dataset directory is not here, so --output
    base = [
        "train",
        "--cluster",
        str(only),
        "--epochs",
        "1",
        "--set",
        "train.hidden=16",
        "--set",
        "train.max_batches=2",
    ]
    assert glisp(base) == 1
    assert "pass --output DIR" in capsys.readouterr().err
    assert glisp(base + ["--output", str(tmp_path / "run")]) == 0
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["params"]["partition_run"] == P2 and len(doc["metrics"]["epochs"]) == 1
    assert (tmp_path / "run" / "model.json").exists() and (tmp_path / "run" / "weights.pt").exists()


def test_seeds_are_validated_not_coerced(cora_cluster):
    assert check_seeds([3, 1, 2]).tolist() == [3, 1, 2] and check_seeds([]).dtype == np.int64
    for bad, msg in (
        ([1.5, 2.0], "integer vertex ids"),
        ([4, 7, 4], "repeated vertex ids"),
        (np.array([[1, 2]]), "1-d"),
        ([True, False], "integer vertex ids"),
    ):
        with pytest.raises(SeedError, match=msg):
            check_seeds(bad)
    with SamplingClient(cora_cluster.cluster_file) as client:
        with pytest.raises(SeedError, match=r"got dtype float64, e\.g\. 1\.5"):
            client.sample(np.array([1.5, 2.0]), [2])
        with pytest.raises(SeedError, match=r"1 repeated vertex ids \(e\.g\. 4\)"):
            client.sample(np.array([4, 7, 4]), [2])
        with pytest.raises(SeedError, match="repeated"):
            next(iter(client.loader(np.array([1, 2, 2]), 2, [2])))
        b = client.sample(np.array([9, 3, 5]), [2], seed=0)
        assert b.seeds.tolist() == [9, 3, 5] and len(b.y) == 3  # row i is seed i


def test_original_ids_map_to_vertex_ids_and_back(cora):
    ids = IdMap.load(cora.dv)
    vids = np.array([0, 17, cora.n - 1])
    orig = ids.to_orig(vids)
    assert orig.tolist() == [f"paper-{cora.node_ids[v]}" for v in vids]
    assert ids.to_vids(orig).tolist() == vids.tolist()
    assert ids.to_vids(orig, vertex_type="v0").tolist() == vids.tolist()
    with pytest.raises(IdError, match=r"2 of 3 are not vertices .* got e\.g\. 'nope', 'paper-x'"):
        ids.to_vids(["nope", orig[0], "paper-x"])
    with pytest.raises(IdError, match="expected string ids"):
        ids.to_vids([1.5])
    with pytest.raises(IdError, match=r"expected integers in \[0, 2708\)"):
        ids.to_orig([cora.n])
    with pytest.raises(IdError, match="not one of"):
        ids.to_vids(orig, vertex_type="author")


def test_progress_is_a_bar_on_a_terminal_and_a_line_per_epoch_otherwise():
    import io

    from glisp_train.progress import Progress

    rec = {
        "epoch": 1,
        "loss": 0.5,
        "val_acc": 0.8,
        "epoch_s": 2.0,
        "wait_share": 0.1,
        "cache_hit_ratio": 0.9,
        "feature_bytes_fetched": 2**20,
    }
    for tty in (True, False):
        out = io.StringIO()
        p = Progress(stream=out, tty=tty)
        p.epoch_start(1, 3)
        for _ in range(3):
            p.step(0.5)
        p.epoch_done(rec, "acc")
        text = out.getvalue()
        assert ("[" + "#" * 30 + "] 3/3" in text) == tty
        assert text.endswith(
            "epoch 1: loss 0.5000 val_acc 0.8000 | 2.0s, waiting 10%, cache hits 90%, 1.0 MiB fetched\n"
        )
        assert text.count("\n") == 1
    quiet = io.StringIO()
    Progress(enabled=False, stream=quiet, tty=True).epoch_done(rec, "acc")  # other ranks say nothing
    assert quiet.getvalue() == ""
