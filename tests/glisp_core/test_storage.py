"""The store under the dataset protocol: URIs, reachability checks, atomic and conditional writes, listing,
bulk copies and tables, on a local root and on a real S3-API server (moto, tests/conftest.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from glisp_core.errors import ConfigError
from glisp_core.storage.store import Store, store_for
from glisp_core.storage.uri import StoreError, StoreURI, parse_uri, qualify

# ---- URIs ---------------------------------------------------------------------------------------


def test_local_paths_and_file_uris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    u = parse_uri(tmp_path / "root")
    assert (u.scheme, u.authority, u.path) == ("file", "", str(tmp_path / "root"))
    assert u.is_local and not u.is_object_store
    assert str(u) == str(tmp_path / "root") and os.fspath(u) == str(tmp_path / "root")
    assert u.qualified == f"file://{tmp_path}/root" and qualify(tmp_path / "root") == f"file://{tmp_path}/root"
    assert qualify(u) == u.qualified
    assert parse_uri(f"file://{tmp_path}/root") == u  # file:// and a plain path are the same place
    monkeypatch.chdir(tmp_path)
    assert parse_uri("root") == u and qualify("root") == f"file://{tmp_path}/root"  # relative: made absolute
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse_uri("~/root") == u
    (u.local / "x.txt").parent.mkdir(parents=True)
    (u / "x.txt").local.write_text("hi")  # a local URI is a path for open() and friends
    assert open(u / "x.txt").read() == "hi"
    # joining, naming, walking up and down
    assert u / "g" / "v1" == u.join("g", "v1") == parse_uri(tmp_path / "root" / "g" / "v1")
    assert (u / "g" / "v1").name == "v1" and (u / "g" / "v1").parent == u / "g"
    assert (u / "g" / "v1").relative_to(u) == "g/v1"
    with pytest.raises(ValueError, match="is not below"):
        u.relative_to(u / "g")


def test_s3_uris() -> None:
    u = parse_uri("s3://bucket/a/b/")
    assert (u.scheme, u.authority, u.path) == ("s3", "bucket", "/a/b")
    assert u.is_object_store and not u.is_local
    assert str(u) == u.qualified == qualify("s3://bucket/a/b") == "s3://bucket/a/b"
    assert parse_uri("s3://bucket") == StoreURI("s3", "bucket", "/")
    assert (u / "c").qualified == "s3://bucket/a/b/c" and (u / "c").parent == u and u.name == "b"
    assert (u / "c" / "d").relative_to(u) == "c/d"
    with pytest.raises(ValueError):
        parse_uri("s3://other/a/b/c").relative_to(u)  # same path, another bucket
    # a remote URI never poses as a local path (it would silently become a local directory)
    with pytest.raises(StoreError, match="s3://bucket/a/b: .*local path"):
        os.fspath(u)
    with pytest.raises(StoreError, match="local path"):
        _ = u.local


@pytest.mark.parametrize(
    "text, what",
    [
        ("ftp://host/x", "unknown scheme 'ftp'"),
        ("S3X://bucket/x", "unknown scheme 's3x'"),
        ("s3:/bucket/x", "neither a local path nor a URI: write s3://bucket/path"),
        ("s3:bucket", "neither a local path nor a URI"),
        ("gs:/bucket", "write gs://bucket/path"),
        ("s3://", "names no bucket: write s3://BUCKET/path"),
        ("s3:///x", "names no bucket"),
    ],
)
def test_bad_uris_fail_naming_the_key_and_the_uri(text: str, what: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_uri(text)
    assert e.value.key == "dataset.root" and what in str(e.value) and repr(text) in str(e.value)
    with pytest.raises(ConfigError) as e:  # a Store names the key it was opened for
        Store(text, what="serve.lease_root")
    assert e.value.key == "serve.lease_root" and repr(text) in str(e.value)


def test_check_passes_on_usable_roots(any_root: StoreURI) -> None:
    Store(any_root).check()  # nothing written there yet: still usable


def test_check_names_a_missing_bucket(s3_server: str) -> None:
    with pytest.raises(StoreError) as e:
        Store("s3://glisp-no-such-bucket/data").check()
    assert "s3://glisp-no-such-bucket/data" in str(e.value) and "does not exist" in str(e.value)


def test_check_names_an_unreachable_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1")
    store = Store("s3://glisp-test/data")  # opened while the variable points at a closed port
    with pytest.raises(StoreError) as e:
        store.check()
    assert str(e.value).startswith("dataset.root s3://glisp-test/data: the s3 store cannot be reached")
    assert "AWS_ENDPOINT_URL" in str(e.value)


def test_store_for_shares_one_store_per_filesystem(any_root: StoreURI) -> None:
    a = store_for(any_root / "g" / "v1")
    assert (
        a is store_for(any_root / "h")
        and a.root.path == "/"
        and a.root.qualified.split(":")[0] == any_root.qualified.split(":")[0]
    )


# ---- small objects ------------------------------------------------------------------------------


def test_write_bytes_replaces_the_object_whole(any_root: StoreURI) -> None:
    store = Store(any_root)
    key = any_root / "d" / "obj"
    assert store.read_text(key) is None
    size = 2 << 20
    store.write_bytes(key, b"a" * size)
    seen: list[bytes] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            seen.append(store.read_bytes(key))

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(12):
            store.write_bytes(key, (b"b" if i % 2 == 0 else b"a") * size)
    finally:
        done.set()
        t.join()
    assert seen and all(len(x) == size and x in (b"a" * size, b"b" * size) for x in seen)
    assert store.read_bytes(key) == b"a" * size
    store.write_bytes(key, b"short")  # a shorter object leaves nothing of the longer one
    assert store.read_text(key) == "short"
    assert store.names(any_root / "d") == ["obj"]  # no temporary object left beside it


def test_create_exclusive_once(any_root: StoreURI) -> None:
    store = Store(any_root)
    key = any_root / "r" / "00000001.json"
    assert store.create_exclusive(key, b"first") is True
    assert store.create_exclusive(key, b"second") is False
    assert store.read_bytes(key) == b"first"
    assert store.names(any_root / "r") == ["00000001.json"]


def test_create_exclusive_race_has_one_winner(any_root: StoreURI) -> None:
    store = Store(any_root)
    store.check()
    for round_ in range(3):
        key = any_root / "race" / f"{round_}.json"
        start = threading.Barrier(8)
        wins: dict[int, bool] = {}

        def create(i: int, key: StoreURI = key, start: threading.Barrier = start, wins: dict[int, bool] = wins) -> None:
            start.wait()
            wins[i] = store.create_exclusive(key, f"writer {i}".encode())

        threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [i for i, won in wins.items() if won]
        assert len(wins) == 8 and len(winners) == 1, wins
        assert store.read_text(key) == f"writer {winners[0]}"


# ---- listing and removal ------------------------------------------------------------------------


def test_listing_and_prefix_delete(any_root: StoreURI) -> None:
    store = Store(any_root)
    a = any_root / "a"
    for rel, data in {"b.json": b"1", "c/d.bin": b"22", "c/e/f.bin": b"333", "cc/x": b"4444"}.items():
        store.write_bytes(a / rel, data)
    assert store.names(a) == ["b.json", "c", "cc"]
    assert [os.path.basename(str(i.path)) for i in store.entries(a)] == ["b.json", "c", "cc"]
    assert sorted(store.files(a)) == [("b.json", 1), ("c/d.bin", 2), ("c/e/f.bin", 3), ("cc/x", 4)]
    assert [str(i.path).rsplit("/", 1)[-1] for i in store.entries(a / "c", recursive=True)] == ["d.bin", "e", "f.bin"]
    assert store.exists(a / "c") and store.is_dir(a / "c") and not store.is_dir(a / "b.json")
    assert store.names(any_root / "missing") == [] and list(store.files(any_root / "missing")) == []
    assert not store.exists(any_root / "missing")
    store.delete(a / "c")  # a prefix: everything below it, and nothing that merely starts with its name
    assert sorted(store.files(a)) == [("b.json", 1), ("cc/x", 4)] and not store.exists(a / "c")
    store.delete(a / "b.json")  # one object
    store.delete(a / "nothing")  # absent: no error
    assert sorted(store.files(a)) == [("cc/x", 4)]
    # addressing: relative names are below the root, full URIs are themselves
    assert store.at("a/cc/x") == store.at(a / "cc" / "x") == store.at((a / "cc" / "x").qualified)


def test_upload_download_round_trip(any_root: StoreURI, tmp_path: Path) -> None:
    store = Store(any_root)
    src = tmp_path / "src"
    payload = {"model.json": b"{}", "w/weights.pt": os.urandom(300_000), "w/deep/x.bin": b"x" * 1000}
    for rel, data in payload.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    total = sum(len(d) for d in payload.values())
    assert store.upload(src, any_root / "train" / "@a") == total
    assert dict(store.files(any_root / "train" / "@a")) == {k: len(v) for k, v in payload.items()}
    dst = tmp_path / "dst"
    assert store.download(any_root / "train" / "@a", dst) == total
    assert {p.relative_to(dst).as_posix(): p.read_bytes() for p in dst.rglob("*") if p.is_file()} == payload


def test_tables(any_root: StoreURI) -> None:
    store = Store(any_root)
    d = any_root / "edges"
    for i in range(3):
        store.write_table(
            pa.table({"eid": np.arange(i * 10, i * 10 + 10), "part": np.full(10, i)}), d / f"part-{i}.parquet"
        )
    t = store.read_table(d)
    assert t.num_rows == 30 and sorted(t.column("eid").to_pylist()) == list(range(30))
    one = store.read_table(d / "part-1.parquet", columns=["eid"])
    assert one.column_names == ["eid"] and one.column("eid").to_pylist() == list(range(10, 20))
    assert store.read_table(d, filters=[("part", "=", 2)]).num_rows == 10


def test_listing_a_directory_another_writer_is_creating(tmp_path: Path) -> None:
    """pyarrow's local listing fails when the directory appears while it lists; the store lists again."""
    store = Store(tmp_path)
    errors: list[BaseException] = []
    for i in range(300):
        d = parse_uri(tmp_path / str(i) / "_locks")
        start = threading.Barrier(3)

        def create(d: StoreURI = d, start: threading.Barrier = start) -> None:
            start.wait()
            store.create_exclusive(d / "000000000001.json", b"{}")

        def lister(d: StoreURI = d, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                names = [n for n in store.names(d) if not n.endswith(".tmp")]  # a local create's temporary
                assert names in ([], ["000000000001.json"])
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=f) for f in (create, lister, lister)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[:3]


def test_open_atomic_shows_a_file_whole_or_not_at_all(any_root):
    """A writer that fails half-way leaves nothing under the name (on S3 its stream's upload is deleted again)."""
    store = Store(any_root)
    with store.open_atomic(any_root / "a" / "ok.bin") as f:
        f.write(b"whole")
    assert store.read_bytes(any_root / "a" / "ok.bin") == b"whole"
    with pytest.raises(RuntimeError, match="half-way"):
        with store.open_atomic(any_root / "a" / "bad.bin") as f:
            f.write(b"part")
            raise RuntimeError("half-way")
    assert not store.exists(any_root / "a" / "bad.bin")
    assert sorted(store.names(any_root / "a")) == ["ok.bin"]
