"""The partition format on its own (numpy writer + memmap reader, no Spark): queries vs brute force, corruption."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from glisp_core.errors import FormatError
from glisp_core.partition_format import FORMAT_VERSION, open_partition, write_partition
from glisp_testing.partitions import check_reader, replica_sets

P = 3


def _graph(seed: int = 0, num_types: int = 3):
    """Hub 0, parallel edges of different types, self-loop, isolated vertices 60..63, two vertex types."""
    rng = np.random.default_rng(seed)
    n = 64
    src = rng.integers(0, 60, 300)
    dst = rng.integers(0, 60, 300)
    src = np.concatenate([src, np.zeros(80, np.int64), rng.integers(1, 60, 40), [5, 5, 5, 7]])
    dst = np.concatenate([dst, rng.integers(1, 60, 80), np.zeros(40, np.int64), [9, 9, 9, 7]])
    m = len(src)
    etype = rng.integers(0, num_types, m)
    etype[-4:-1] = [0, 1, 2][:3] if num_types == 3 else 0
    g = dict(
        n=n,
        src=src,
        dst=dst,
        etype=etype,
        weight=rng.random(m).astype(np.float32),
        ts=rng.integers(0, 10**12, m),
        vtype=(np.arange(n) // 7) % 2,
        feat=rng.random((n, 4)).astype(np.float32),
        labels=rng.integers(-1, 5, n),
        split=rng.integers(-1, 3, n).astype(np.int8),
        part=rng.integers(0, P, m),
    )
    return g


def _write_all(tmp: Path, g: dict, *, weighted: bool = True, num_types: int = 3) -> tuple[list[np.ndarray], np.ndarray]:
    n, src, dst, part = g["n"], g["src"], g["dst"], g["part"]
    reps = replica_sets(src, dst, part, n, P)
    master = np.array([r[len(r) // 2] if len(r) else v % P for v, r in enumerate(reps)])
    out_deg = np.bincount(src, minlength=n)
    in_deg = np.bincount(dst, minlength=n)
    for k in range(P):
        sel = part == k
        vs = np.array([v for v in range(n) if k in reps[v] or (len(reps[v]) == 0 and master[v] == k)], np.int64)
        rp = [reps[v] if len(reps[v]) else np.array([k]) for v in vs]
        ptr = np.concatenate([[0], np.cumsum([len(x) for x in rp])])
        mine = vs[master[vs] == k]
        shuffle = np.random.default_rng(k).permutation(len(vs))  # writer must not rely on input order
        write_partition(
            tmp / f"part-{k:05d}",
            part_id=k,
            num_parts=P,
            vertex_gids=vs[shuffle],
            out_degree=out_deg[vs][shuffle],
            in_degree=in_deg[vs][shuffle],
            replica_ptr=np.concatenate([[0], np.cumsum([len(rp[i]) for i in shuffle])]),
            replica_parts=np.concatenate([rp[i] for i in shuffle]) if len(vs) else np.zeros(0, np.int32),
            master=master[vs][shuffle],
            vtype=g["vtype"][vs][shuffle],
            src=src[sel],
            dst=dst[sel],
            etype=g["etype"][sel],
            edge_key=np.flatnonzero(sel),
            weight=g["weight"][sel] if weighted else None,
            ts=g["ts"][sel] if weighted else None,
            edge_types=[f"t{i}" for i in range(num_types)],
            vertex_types=["a", "b"],
            master_gids=mine[::-1],
            features=g["feat"][mine[::-1]],
            labels=g["labels"][mine[::-1]],
            split=g["split"][mine[::-1]],
            feature_dim=4,
        )
        del ptr
    return reps, master


@pytest.mark.parametrize("num_types", [3, 1], ids=["typed", "homogeneous"])
def test_reader_agrees_with_brute_force(tmp_path: Path, num_types: int) -> None:
    g = _graph(num_types=num_types)
    reps, master = _write_all(tmp_path, g, num_types=num_types)
    out_deg = np.bincount(g["src"], minlength=g["n"])
    in_deg = np.bincount(g["dst"], minlength=g["n"])
    seen = np.zeros(g["n"], int)
    for k in range(P):
        r = open_partition(tmp_path / f"part-{k:05d}")
        assert r.format_version == FORMAT_VERSION and r.part_id == k and r.num_parts == P
        assert r.has_type_index == (num_types > 1)
        sel = g["part"] == k
        check_reader(
            r,
            g["src"][sel],
            g["dst"][sel],
            g["etype"][sel],
            num_vertices_global=g["n"],
            out_deg=out_deg,
            in_deg=in_deg,
            reps=reps,
            weight=g["weight"][sel],
            ts=g["ts"][sel],
        )
        gid = np.asarray(r.global_id)
        assert np.array_equal(r.vertex_type(np.arange(r.num_vertices)), g["vtype"][gid])
        assert np.array_equal(np.asarray(r.master), master[gid])
        mg = np.asarray(r.master_gids)
        seen[mg] += 1
        rows = r.feature_rows(mg)
        assert np.array_equal(rows, np.arange(len(mg)))
        assert np.array_equal(np.asarray(r.features)[rows], g["feat"][mg])
        assert np.array_equal(np.asarray(r.labels), g["labels"][mg])
        assert np.array_equal(np.asarray(r.split), g["split"][mg])
        assert (r.feature_rows(np.setdiff1d(np.arange(g["n"]), mg)) == -1).all()
        assert r.out_nbr.dtype == np.int32 and r.out_indptr.dtype == np.int32 and r.out_degree.dtype == np.int32
        assert isinstance(r.out_nbr, np.memmap) and not r.out_nbr.flags.writeable
        assert r.file_bytes()["out_nbr"] == 4 * r.num_edges
        assert (r.edge_global_id(np.array([0, 5])) == (np.int64(k) << 40) + np.array([0, 5])).all()
    assert (seen == 1).all()  # every vertex, isolated ones too, is mastered exactly once


def test_empty_partition(tmp_path: Path) -> None:
    z = np.zeros(0, np.int64)
    write_partition(
        tmp_path / "p",
        part_id=1,
        num_parts=2,
        vertex_gids=z,
        out_degree=z,
        in_degree=z,
        replica_ptr=np.zeros(1, np.int64),
        replica_parts=z,
        master=z,
        vtype=z,
        src=z,
        dst=z,
        etype=z,
    )
    r = open_partition(tmp_path / "p")
    assert r.num_vertices == 0 and r.num_edges == 0
    assert (r.to_local(np.array([0, 3])) == -1).all()
    assert len(r.out_range(np.zeros(0, np.int64))[0]) == 0


@pytest.mark.parametrize("size", [7, 5000])  # below and above the sorted-lookup threshold
def test_to_local_matches_a_dictionary(tmp_path: Path, size: int) -> None:
    rng = np.random.default_rng(size)
    held = np.unique(rng.integers(0, 10**9, 3000))
    z = np.zeros(0, np.int64)
    n = len(held)
    write_partition(
        tmp_path / "p",
        part_id=0,
        num_parts=1,
        vertex_gids=held,
        out_degree=np.zeros(n, np.int64),
        in_degree=np.zeros(n, np.int64),
        replica_ptr=np.arange(n + 1),
        replica_parts=np.zeros(n, np.int32),
        master=np.zeros(n, np.int32),
        vtype=np.zeros(n, np.int32),
        src=z,
        dst=z,
        etype=z,
    )
    r = open_partition(tmp_path / "p")
    query = np.concatenate([rng.choice(held, size), rng.integers(0, 2 * 10**9, size), [held[-1] + 1, -5]])
    rng.shuffle(query)  # held and absent ids, repeats, below and above every held id
    where = {int(v): i for i, v in enumerate(held)}
    expect = np.array([where.get(int(v), -1) for v in query])
    assert np.array_equal(r.to_local(query), expect)
    assert np.array_equal(r.to_local(query.reshape(2, -1)), expect.reshape(2, -1))


@pytest.fixture
def one_part(tmp_path: Path) -> Path:
    g = _graph()
    _write_all(tmp_path, g)
    return tmp_path / "part-00000"


def test_flipped_byte_is_detected(one_part: Path) -> None:
    f = one_part / "out_nbr.bin"
    b = bytearray(f.read_bytes())
    b[len(b) // 2] ^= 0x40
    f.write_bytes(bytes(b))
    with pytest.raises(FormatError, match=r"out_nbr\.bin.*checksum mismatch"):
        open_partition(one_part)
    open_partition(one_part, verify=False)  # sizes still fine: only hashing catches a flipped byte


def test_truncated_and_missing_files_are_detected(one_part: Path) -> None:
    f = one_part / "in_eid.bin"
    f.write_bytes(f.read_bytes()[:-3])
    with pytest.raises(FormatError, match=r"in_eid\.bin.*truncated"):
        open_partition(one_part, verify=False)
    f.unlink()
    with pytest.raises(FormatError, match=r"in_eid\.bin.*missing"):
        open_partition(one_part)


def test_wrong_format_version_is_refused(one_part: Path) -> None:
    meta = json.loads((one_part / "meta.json").read_text())
    meta["format_version"] = FORMAT_VERSION + 1
    (one_part / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(FormatError, match=r"meta\.json: format version 2, this reader supports 1"):
        open_partition(one_part)
    (one_part / "meta.json").unlink()
    with pytest.raises(FormatError, match=r"meta\.json.*not found"):
        open_partition(one_part)
    shutil.rmtree(one_part)


@pytest.mark.parametrize("spans", [(30, 4, 30), (2**40, 2**30, 2**40)], ids=["packed", "too-wide-to-pack"])
def test_sort_order_is_the_lexsort_of_its_keys(spans: tuple[int, int, int]) -> None:
    """Edges sort by (src, type, dst, eid) through one packed key; parallel edges (equal on the first three)
    by eid among themselves; keys too wide to pack take the lexsort itself."""
    from glisp_core.partition_format.writer import sort_order

    rng = np.random.default_rng(3)
    for m in (0, 1, 50, 5000):
        a, b, c = rng.integers(0, 30, m), rng.integers(0, 4, m), rng.integers(0, 30, m)
        eid = rng.permutation(m)
        assert np.array_equal(sort_order([a, b, c], list(spans), eid), np.lexsort([eid, c, b, a]))
        assert np.array_equal(sort_order([c, b, a], list(spans)), np.lexsort([a, b, c]))
