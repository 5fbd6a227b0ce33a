"""Incremental refresh (``infer.incremental``): a run over a new version that recomputes only the rows whose
input changed equals a full run over that version, row for row by original id, at full fanout and with
sampling, typed, with vertices added and removed, vids renumbered and edges moved between partitions."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from glisp_core.dataset.stages import run_of
from glisp_core.storage.uri import parse_uri
from glisp_infer.stable import stable_sample
from glisp_sampling.apply import HopSample

pytestmark = pytest.mark.usefixtures("spark")


def _infer(spark, dv, part_run, model, name, make_infer_cfg, **infer):
    from glisp_infer.job import run_infer
    from glisp_train.publish import publish_model

    publish_model(dv, "m", model, part_run)
    return run_infer(spark, make_infer_cfg(model="m", run=name, incremental=True, **infer), dv)


def _by_orig(dv, rec, layer=-1):
    """{original id: row} of a layer of a published run."""
    from glisp_infer.read import InferenceRun

    r = InferenceRun(dv, run_of(rec.name))
    idx = pq.read_table(r.path / "index").to_pandas()
    vals = np.asarray(r.layer(layer)[:])[idx["row"].to_numpy()]
    return dict(zip(idx["orig_id"].astype(str), vals, strict=True))


def _refresh_and_reference(spark, v, model, make_infer_cfg, name, **infer):
    """infer/<name> on v1 then incrementally on v2, and a full run of v2 under another name (no previous run)."""
    first = _infer(spark, v.old, v.old_run, model, name, make_infer_cfg, **infer)
    refresh = _infer(spark, v.new, v.new_run, model, name, make_infer_cfg, **infer)
    ref = _infer(spark, v.new, v.new_run, model, f"{name}-ref", make_infer_cfg, **infer)
    return first, refresh, ref


def _assert_same_rows(v, refresh, ref, layers, exact=True):
    """Every layer's rows by original id: bit for bit, or (``exact`` false, slices in float32 against float64)
    the features bit for bit and the layers to float32 rounding."""
    for layer in range(layers + 1):
        a, b = _by_orig(v.new, refresh, layer), _by_orig(v.new, ref, layer)
        assert a.keys() == b.keys()
        keys = sorted(a)
        got, want = np.stack([a[k] for k in keys]), np.stack([b[k] for k in keys])
        if exact or layer == 0:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _cos_dist(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(1 - a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-300))


@pytest.mark.parametrize(
    "arch,fanouts,direction",
    [("sage", [3, 4], "in"), ("rgcn", [], "out"), ("gcn", [2, 2], "in")],
    ids=["sage-sampled", "rgcn-typed-full", "gcn-sampled"],
)
def test_incremental_equals_full_run(spark, two_versions, make_infer_cfg, new_model, arch, fanouts, direction) -> None:
    v = two_versions
    model = new_model(arch, layers=2)
    name = f"{arch}-{direction}-{len(fanouts)}"
    first, refresh, ref = _refresh_and_reference(
        spark, v, model, make_infer_cfg, name, fanouts=fanouts, direction=direction, incremental_max_share=1.0
    )
    assert first.counts["incremental"]["path"] == "full"
    assert "no earlier version" in first.counts["incremental"]["reason"]
    inc = refresh.counts["incremental"]
    assert inc["path"] == "incremental" and inc["previous"] == "g/v1", inc
    assert inc["added"] == 5 and inc["removed"] == 6 and inc["changed_features"] == 3
    layers = refresh.metrics["layers"]
    assert all(layers[f"layer{i}"]["copied"] > 0 for i in (1, 2)), inc  # rows really came from v1
    assert inc["recomputed_share"] == inc["affected_share"] and all(0 < s < 1 for s in inc["affected_share"])
    assert inc["affected_share"][0] <= inc["affected_share"][1]
    _assert_same_rows(v, refresh, ref, 2)


def test_full_fanout_stable_samples_equal_the_full_graph_forward(
    spark, two_versions, make_infer_cfg, new_model
) -> None:
    """At full fanout the stable draw keeps every neighbour: the result is the in-memory forward pass."""
    import torch

    v = two_versions
    model = new_model("sage", layers=2)
    rec = _infer(spark, v.new, v.new_run, model, "sage-full", make_infer_cfg)
    ing = pq.read_table(v.new.edges).to_pandas()
    feats = np.stack(pq.read_table(v.new.features).to_pandas().sort_values("vid")["feat"].to_numpy()).astype(np.float32)
    ei = torch.from_numpy(np.stack([ing["src"].to_numpy(), ing["dst"].to_numpy()]))
    h = torch.from_numpy(feats)
    with torch.no_grad():
        for i in range(model.num_layers):
            h = model.layer(i, h, ei, len(feats), None)
    idmap = pq.read_table(v.new.idmap).to_pandas().sort_values("vid")
    got = _by_orig(v.new, rec)
    np.testing.assert_allclose(np.stack([got[str(k)] for k in idmap["orig_id"]]), h.numpy(), rtol=1e-4, atol=1e-5)


def test_fallback_and_drift_are_recorded(spark, two_versions, make_infer_cfg, new_model) -> None:
    """A bound under the share of layer 1's work that the changed vertices hold computes every layer in full from
    the start (the reason says so, before any task of layer 1 decides alone), in float32 as a plain run does,
    with the full run's rows to float32 rounding, though their share of the rows is under it; the drift against
    v1 is recorded: unchanged rows within rounding, changed ones moved. A refresh whose previous run computed in
    float32 copies nothing and computes in float64 again, bit for bit a full run."""
    v = two_versions
    model = new_model("sage", layers=2)
    first, refresh, ref = _refresh_and_reference(
        spark, v, model, make_infer_cfg, "fallback", fanouts=[3, 4], incremental_max_share=0.45
    )
    inc = refresh.counts["incremental"]
    assert inc["row_map"] == "joined by original id", inc  # v2 renumbers every vid
    # A_0 | changed: 36 % of the vertices, 49 % of layer 1's sampled edges and rows (the plan job's samples)
    assert inc["first_affected_share"] < 0.45 < inc["first_work_share"] <= inc["affected_work_share"][0], inc
    assert inc["path"] == "partial" and inc["full_from_layer"] == 1 and inc["arithmetic"] == "float32", inc
    assert inc["reason"].startswith("layer 1: affected share of its work 0.49") and "every task" not in inc["reason"]
    assert "incremental_max_share 0.45" in inc["reason"]
    assert inc["recomputed_share"] == [1.0, 1.0] and all(s < 1 for s in inc["affected_share"])
    assert first.counts["incremental"]["arithmetic"] == ref.counts["incremental"]["arithmetic"] == "float64"
    _assert_same_rows(v, refresh, ref, 2, exact=False)
    last, last_ref = _by_orig(v.new, refresh), _by_orig(v.new, ref)
    assert any(not np.array_equal(last[k], last_ref[k]) for k in last)  # float32 slices: not the float64 rows
    d = refresh.metrics["drift"]
    assert d["matched"] == 256 and d["against"] == "v1"
    assert 0 < d["moved_share"] < 1 and d["cos_max"] > 0 and d["cos_p50"] <= d["cos_p90"] <= d["cos_p99"]
    assert 0 <= d["predictions_changed_share"] <= d["moved_share"] and 0 <= d["knn_changed_share"] <= 1
    # exactly the vertices outside the affected set kept their embedding (to rounding: cosine distance 1e-6)
    old, new = _by_orig(v.old, first), _by_orig(v.new, refresh)
    same = [k for k in new if k in old and _cos_dist(new[k], old[k]) <= 1e-6]
    assert len(same) == round((1 - d["moved_share"]) * 256)
    assert not set(v.changed_features) & set(same)
    # glisp report --compare shows the embedding version
    from glisp_app.report_compare import compare_text
    from glisp_core.dataset.manifest import read_manifest

    text = compare_text(read_manifest(v.old), read_manifest(v.new))
    block = text.split("Embedding versions")[1]
    assert "v2:infer/fallback" in block and "incremental_max_share 0.45" in block
    assert f"{d['cos_p99']:g}"[:4] in block and "share with top-k neighbours changed" in block
    # v1 again, with v2's float32 run as its previous one and the bound over the share: no row to copy
    from glisp_infer.job import run_infer

    cfg = make_infer_cfg(model="m", run="fallback", incremental=True, fanouts=[3, 4], incremental_max_share=1.0)
    again = run_infer(spark, cfg, v.old, force=True)
    inc = again.counts["incremental"]
    assert inc["previous"] == "g/v2" and inc["path"] == "partial" and inc["full_from_layer"] == 1, inc
    assert inc["arithmetic"] == "float64" and "previous run's rows were computed in float32" in inc["reason"], inc
    assert inc["recomputed_share"] == [1.0, 1.0]
    for layer in range(3):
        a, b = _by_orig(v.old, again, layer), _by_orig(v.old, first, layer)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_retrained_model_runs_in_full_with_the_reason(spark, two_versions, make_infer_cfg, new_model) -> None:
    v = two_versions
    _infer(spark, v.old, v.old_run, new_model("sage", seed=0), "retrained", make_infer_cfg)
    rec = _infer(spark, v.new, v.new_run, new_model("sage", seed=1), "retrained", make_infer_cfg)
    inc = rec.counts["incremental"]
    assert inc["path"] == "full" and "retrained model" in inc["reason"], inc
    assert rec.metrics["layers"]["layer1"].get("copied", 0) == 0
    # a retrained model of another depth, the same output width: the drift compares the two final layers
    deeper = _infer(spark, v.old, v.old_run, new_model("sage", layers=3, seed=2), "retrained", make_infer_cfg)
    assert deeper.counts["incremental"]["path"] == "full"
    assert deeper.metrics["drift"]["matched"] > 0 and deeper.metrics["drift"]["against"] == v.new.version


def test_a_previous_run_whose_arrays_are_gone_is_inferred_in_full(spark, two_versions, make_infer_cfg, new_model):
    """The previous version's record names its run, but its Zarr store was removed (by hand, by another tool):
    the refresh runs in full and says why, instead of failing on the missing arrays."""
    from glisp_infer.store import store_url

    v, model = two_versions, new_model("sage", seed=3)
    first = _infer(spark, v.old, v.old_run, model, "gone", make_infer_cfg)
    url = store_url(v.old, v.old.path / first.path)
    v.old.store.delete(parse_uri(url))
    rec = _infer(spark, v.new, v.new_run, model, "gone", make_infer_cfg)
    inc = rec.counts["incremental"]
    assert inc["path"] == "full" and "has no arrays at" in inc["reason"] and v.old.version in inc["reason"], inc
    assert rec.metrics["layers"]["layer1"].get("copied", 0) == 0


def test_a_row_map_that_fails_fails_the_refresh_with_its_own_error(
    spark, two_versions, make_infer_cfg, new_model, monkeypatch
):
    """A refresh whose row map cannot be written (the previous run's index unreadable) fails with that error,
    publishes nothing, and releases the previous version's lease (retention may remove it again)."""
    import glisp_infer.row_map as row_map
    from glisp_core.dataset.manifest import read_manifest
    from glisp_core.dataset.versions import active_leases

    v, model = two_versions, new_model("sage", seed=4)
    _infer(spark, v.old, v.old_run, model, "mapfail", make_infer_cfg)

    def unreadable(*args, **kw):  # the injected fault: the previous run's index cannot be read
        raise ValueError("injected: the previous run's index is unreadable")

    monkeypatch.setattr(row_map, "write_prev_rows", unreadable)
    with pytest.raises(ValueError, match="injected: the previous run's index is unreadable"):
        _infer(spark, v.new, v.new_run, model, "mapfail", make_infer_cfg)
    assert "infer/mapfail" not in read_manifest(v.new).stages
    assert active_leases(v.old) == []


def test_stable_sample_ignores_entry_order_and_vertex_numbering() -> None:
    """The draw is a function of the keys only: shuffling a vertex's entries (another partition layout or CSR
    order) gives the same neighbours in the same order; another hop seed gives another draw."""
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**63, 50, dtype=np.int64).astype(np.uint64)
    counts = np.array([[7, 3], [0, 5], [12, 1]])
    nbrs = rng.integers(0, 50, counts.sum())
    nbrs[:3] = nbrs[0]  # parallel edges
    s = stable_sample(HopSample(counts=counts, nbrs=nbrs), keys[:3], keys[nbrs], 99, 4)
    assert s.counts.tolist() == [[4, 3], [0, 4], [4, 1]]
    bounds = np.r_[0, np.cumsum(counts.reshape(-1))]
    shuffled = np.concatenate([rng.permutation(nbrs[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    s2 = stable_sample(HopSample(counts=counts, nbrs=shuffled), keys[:3], keys[shuffled], 99, 4)
    assert np.array_equal(s.nbrs, s2.nbrs)
    s3 = stable_sample(HopSample(counts=counts, nbrs=nbrs), keys[:3], keys[nbrs], 100, 4)
    assert not np.array_equal(s.nbrs, s3.nbrs)
    full = stable_sample(HopSample(counts=counts, nbrs=nbrs), keys[:3], keys[nbrs], 99, -1)
    assert sorted(full.nbrs.tolist()) == sorted(nbrs.tolist())


def _reference_draw(own_key, seg_keys, seed, slot, k):
    """Positions of a segment's k smallest edge keys, in key order, in plain numpy (the kernel's definition)."""
    from glisp_infer import stable as S

    with np.errstate(over="ignore"):
        base = S.mix64(np.uint64(seed) ^ np.uint64(own_key))
        occ = np.array([int((seg_keys[:j] == seg_keys[j]).sum()) for j in range(len(seg_keys))], np.uint64)
        ek = S.mix64(base + seg_keys * S._C_NBR + occ * S._C_OCC + np.uint64(slot) * S._C_SLOT)
    return np.argsort(ek, kind="stable")[:k]


@pytest.mark.parametrize("size", [12, 33, 200])
def test_stable_draw_equals_its_definition_for_small_and_large_segments(size) -> None:
    """The compiled draw (scratch buffers up to 32 entries, select-then-sort above) keeps exactly the k smallest
    edge keys in key order, parallel edges numbered by occurrence."""
    rng = np.random.default_rng(size)
    keys = rng.integers(0, 2**63, 60, dtype=np.int64).astype(np.uint64)
    nbrs = rng.integers(0, 60, size)
    nbrs[: size // 3] = nbrs[0]  # many parallel edges to one neighbour
    counts = np.array([[size, 0]])
    for k in (1, 5, size, -1):
        got = stable_sample(HopSample(counts=counts, nbrs=nbrs), keys[:1], keys[nbrs], 11, k)
        want = _reference_draw(keys[0], keys[nbrs], 11, 0, size if k < 0 else k)
        assert np.array_equal(got.nbrs, nbrs[want])


def test_feature_signature_is_the_defined_hash() -> None:
    """The compiled signature equals its element-wise definition (earlier versions' stored signatures stay valid)."""
    from glisp_infer.stable import feature_signature, mix64

    x = np.random.default_rng(3).standard_normal((50, 7)).astype(np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    with np.errstate(over="ignore"):
        want = mix64(mix64(bits ^ mix64(np.arange(7, dtype=np.uint64))).sum(axis=1, dtype=np.uint64))
    assert np.array_equal(feature_signature(x), want)
    x[3, 2] = -x[3, 2]
    assert (feature_signature(x) != want).sum() == 1


def test_incremental_refresh_on_an_s3_root(
    spark, two_versions, new_s3_root, make_infer_cfg, new_model, tmp_path
) -> None:
    """Both versions copied into the bucket: the refresh there reads the previous run, the id maps and the masks
    through the store, and gives the local refresh's rows bit for bit."""

    from glisp_core.config import with_values
    from glisp_core.dataset.versions import set_latest
    from glisp_infer.job import run_infer
    from glisp_infer.read import InferenceRun
    from glisp_testing.stores import copy_version
    from glisp_train.publish import publish_model

    v = two_versions
    root = new_s3_root("incr")
    old3, new3 = (copy_version(dv, root, skip=("infer", "train")) for dv in (v.old, v.new))
    set_latest(old3)
    model = new_model("sage", layers=2)
    cfg = with_values(
        make_infer_cfg(model="s3m", run="s3inc", incremental=True, fanouts=[3, 4], incremental_max_share=1.0),
        "serve",
        cache_dir=str(tmp_path / "cache"),
    )
    recs = {}
    for dv, run in ((old3, v.old_run), (new3, v.new_run), (v.old, v.old_run), (v.new, v.new_run)):
        publish_model(dv, "s3m", model, run)
        recs[dv.path.qualified] = run_infer(spark, cfg, dv)
    inc = recs[new3.path.qualified].counts["incremental"]
    assert inc["path"] == "incremental" and inc["previous"] == "g/v1" and inc["affected_share"][0] < 1, inc
    assert recs[v.new.path.qualified].counts["incremental"]["affected_share"] == inc["affected_share"]
    for i in range(3):
        np.testing.assert_array_equal(
            np.asarray(InferenceRun(new3, "s3inc").layer(i)[:]), np.asarray(InferenceRun(v.new, "s3inc").layer(i)[:])
        )
    keys = {rel for rel, _ in new3.store.files(InferenceRun(new3, "s3inc").path)}
    assert not [k for k in keys if k.startswith(("incremental/", "exchange/"))]  # masks removed before publishing


def test_an_unchanged_snapshot_copies_every_row(spark, two_versions, make_infer_cfg, new_model, monkeypatch) -> None:
    """A new version with the same graph under the same ids: nothing affected, every row copied, no drift. The
    refresh runs the task jobs a first run does: layer 0's tasks find what changed, no job of its own does."""
    from glisp_infer import job as J
    from glisp_testing.stores import copy_version

    jobs: list[list[str]] = []
    real = J.run_tasks
    monkeypatch.setattr(J, "run_tasks", lambda sp, plan, fn, what: jobs[-1].append(what) or real(sp, plan, fn, what))
    v = two_versions
    same = copy_version(v.old, v.old.root, version="v1-again")
    model = new_model("sage", layers=2)
    jobs.append([])
    first = _infer(spark, v.old, v.old_run, model, "nochange", make_infer_cfg, fanouts=[3, 4])
    jobs.append([])
    rec = _infer(spark, same, v.old_run, model, "nochange", make_infer_cfg, fanouts=[3, 4])
    assert jobs[1] == jobs[0] and "layer 0 (features)" in jobs[0], jobs
    inc = rec.counts["incremental"]
    assert inc["path"] == "incremental" and inc["previous"] == "g/v1", inc
    assert inc["row_map"] == "by vid" and inc["removed"] == inc["added"] == 0, inc  # the same vids: no join
    assert inc["affected_share"] == [0.0, 0.0] and inc["recomputed_share"] == [0.0, 0.0]
    assert rec.metrics["layers"]["layer2"]["copied"] == 262
    d = rec.metrics["drift"]
    assert d["moved_share"] == 0 and d["cos_max"] == 0 and d["knn_changed_share"] == 0
    for layer in range(3):
        a, b = _by_orig(v.old, first, layer), _by_orig(same, rec, layer)
        assert all(np.array_equal(a[k], b[k]) for k in a) and a.keys() == b.keys()


def test_glisp_infer_carries_a_model_trained_on_an_earlier_version(spark, two_versions, new_model, capsys) -> None:
    """`glisp infer NEW --model M --incremental` where only v1 holds train/M (a refresh that does not retrain):
    the model is published into v2 (carried, the same weights), the refresh copies from v1's run, and a record
    whose last layer's share passes the bound names no layer past the last."""
    from glisp_app.cli import main as glisp
    from glisp_core.dataset.manifest import read_manifest
    from glisp_train.publish import publish_model

    v = two_versions
    assert v.old_run == v.new_run
    model = new_model("sage", layers=2)
    publish_model(v.old, "carried", model, v.old_run)
    common = ["--root", str(v.old.root), "--model", "carried", "--incremental", "--set", "infer.fanouts=[3, 4]"]
    # affected shares of the rows 0.37, 0.69; of the work (sampled edges and rows) 0.51 at layer 1
    common += ["--set", "infer.chunk_rows=16", "--set", "infer.incremental_max_share=0.6"]
    assert glisp(["infer", f"{v.old.graph}/{v.old.version}", *common]) == 0
    assert glisp(["infer", f"{v.new.graph}/{v.new.version}", *common]) == 0
    assert "train/carried carried into g/" in capsys.readouterr().out
    m = read_manifest(v.new)
    assert (
        m.stage("train/carried").params["weights_sha256"]
        == read_manifest(v.old).stage("train/carried").params["weights_sha256"]
    )
    inc = m.stage("infer/carried-pds").counts["incremental"]
    assert inc["previous"] == "g/v1" and inc["affected_share"][0] < 0.6 < inc["affected_share"][1], inc
    assert inc["affected_share"][0] < inc["affected_work_share"][0] < 0.6, inc  # the affected hold more edges
    # layer 1 copies; the last layer's share passes the bound: no layer after it to fall back to, but each of its
    # tasks computes all its rows, and the record says so
    assert inc["path"] == "partial" and inc["full_from_layer"] == 2 and "in every task" in inc["reason"], inc
    assert inc["recomputed_share"][0] < 1 and inc["recomputed_share"][1] == 1.0, inc


def test_the_fallback_follows_the_affected_share_of_the_work_not_of_the_rows() -> None:
    """A layer's time follows its sampled edges: 37 % of the rows holding 51 % of the work pass a bound of 0.45,
    and the next layer is computed in full, the reason naming the work share."""
    from glisp_core.config import InferConfig
    from glisp_infer.refresh import Refresh

    r = Refresh(InferConfig(incremental_max_share=0.45), None, 100, "")  # type: ignore[arg-type]
    r.last = 2
    res = [
        {"affected": 20, "work": 600, "affected_work": 300, "recomputed": 20},
        {"affected": 17, "work": 400, "affected_work": 210, "recomputed": 17},
    ]
    r.after_layer(1, res)
    assert r.shares["affected"] == [0.37] and r.shares["affected_work"] == [0.51]
    assert r.full_from == 2 and "affected share of its work 0.510 > infer.incremental_max_share 0.45" in r.reason


def test_layer_1_falls_back_by_the_work_the_changed_vertices_hold() -> None:
    """After layer 0 the signature comparison's counts decide layer 1: 5 % of the rows holding 77 % of the layer's
    work (R-MAT 22's hubs) computes it in full from the start; without work counts (no plan job) the rows decide."""
    from glisp_core.config import InferConfig
    from glisp_infer.refresh import Refresh

    counts = {"added": 0, "changed_features": 0, "changed_neighbourhoods": 5}
    res = [{**counts, "first_affected": 3, "work": 900, "first_work": 700}, {**counts, "first_affected": 2,
           "work": 100, "first_work": 70}]  # fmt: skip
    r = Refresh(InferConfig(incremental_max_share=0.5), None, 100, "")  # type: ignore[arg-type]
    r.after_features(res)
    assert r.full_from == 1 and r.reason.startswith("layer 1: affected share of its work")
    assert r.info["first_affected_share"] == 0.05 and r.info["first_work_share"] == 0.77
    assert not r.double and r.arithmetic == "float32"  # nothing is copied: the plain run's arithmetic
    r = Refresh(InferConfig(incremental_max_share=0.8), None, 100, "")  # type: ignore[arg-type]
    r.prev_float32 = True  # under the bound, but the previous rows depend on their batches: none copied
    r.after_features(res)
    assert r.full_from == 1 and r.double and "computed in float32" in r.reason
    r = Refresh(InferConfig(incremental_max_share=0.5), None, 100, "")  # type: ignore[arg-type]
    r.after_features([{k: v for k, v in x.items() if "work" not in k} for x in res])
    assert r.full_from == 0 and "first_work_share" not in r.info


def _task(vertices: int, full: bool, affected_work: int, work: int = 100) -> dict:
    """One task's layer result as ``glisp_infer.task`` reports it."""
    rec = vertices if full else vertices // 10
    return {"vertices": vertices, "affected": vertices // 10, "work": work, "affected_work": affected_work,
            "recomputed": rec, "full": full}  # fmt: skip


def test_a_layer_whose_every_task_computed_all_its_rows_is_recorded_as_computed_in_full() -> None:
    """Layer 1's rows share was under the bound (the driver's check after layer 0), but each task's affected share
    of its work passed it, so every task computed every row: the record says layers 1..K were computed in full,
    and why, not that layer 1 copied rows. With one task under the bound the layer copied rows."""
    from glisp_core.config import InferConfig
    from glisp_infer.refresh import Refresh

    r = Refresh(InferConfig(incremental_max_share=0.5), None, 200, "")  # type: ignore[arg-type]
    r.last = 2
    r.after_layer(1, [_task(100, True, 80), _task(100, True, 70), _task(0, False, 0, work=0)])
    assert r.full_from == 1 and r.shares["recomputed"] == [1.0]
    assert r.reason.startswith("layer 1: affected share of its work 0.750") and "in every task" in r.reason
    r = Refresh(InferConfig(incremental_max_share=0.5), None, 200, "")  # type: ignore[arg-type]
    r.last = 2
    r.after_layer(1, [_task(100, True, 80), _task(100, False, 30)])
    assert r.full_from == 2 and r.reason.startswith("layer 2: affected share of its work 0.550")
    assert r.shares["recomputed"] == [0.55]
