"""Dataset contract: manifest round trip, atomic stage/version publishing, resolving DATASET arguments."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from glisp_core.dataset.layout import DatasetVersion, check_name, list_versions, resolve_dataset
from glisp_core.dataset.manifest import SCHEMA_VERSION, Manifest, StageRecord, now_iso
from glisp_core.dataset.publish import StagePublisher, VersionPublisher, file_fingerprints, fingerprint
from glisp_core.errors import FormatError, StageError
from glisp_testing.graphs import write_dataset


@pytest.fixture
def dv(tmp_path: Path) -> DatasetVersion:
    return write_dataset(tmp_path / "root", "g", np.array([0, 1, 2, 2]), np.array([1, 2, 0, 3]))


def manifest_of(dv: DatasetVersion) -> Manifest:
    return Manifest.read(dv.manifest_path)


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


# ---- manifest -----------------------------------------------------------------------------------


def test_manifest_round_trip(tmp_path):
    rec = StageRecord(
        name="partition/a-p2",
        path="partition/a-p2",
        fingerprint="f" * 64,
        params={"parts": 2},
        depends={"ingest": "abc"},
        counts={"edges_per_part": [1, 2]},
        metrics={"rf": 1.25},
        timings={"total_s": 0.5},
        completed_at=now_iso(),
    )
    m = Manifest(
        graph="g",
        version="v",
        created_at=now_iso(),
        inputs=[{"path": "x", "bytes": 3}],
        schema={"num_vertices": 4, "edge_types": ["e"]},
        stages={rec.name: rec},
    )
    p = tmp_path / "manifest.json"
    m.write(p)
    back = Manifest.read(p)
    assert back == m and back.to_dict() == m.to_dict()
    assert json.loads(p.read_text())["schema_version"] == SCHEMA_VERSION
    assert not list(tmp_path.glob(".*tmp"))  # the atomic write left no temp file
    # numpy values are written as plain JSON
    m.stages[rec.name].metrics["np"] = np.float32(0.5)
    m.stages[rec.name].counts["arr"] = np.arange(3)
    m.write(p)
    assert Manifest.read(p).stages[rec.name].counts["arr"] == [0, 1, 2]


def test_manifest_errors(tmp_path):
    p = tmp_path / "manifest.json"
    with pytest.raises(FormatError, match="manifest not found"):
        Manifest.read(p)
    p.write_text("{not json")
    with pytest.raises(FormatError, match="not valid JSON"):
        Manifest.read(p)
    p.write_text(json.dumps({"schema_version": 99, "graph": "g", "version": "v"}))
    with pytest.raises(FormatError, match="schema version 99"):
        Manifest.read(p)
    p.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "version": "v"}))
    with pytest.raises(FormatError, match="malformed manifest"):
        Manifest.read(p)


def test_stage_lookup_checks_freshness(dv):
    m = manifest_of(dv)
    with pytest.raises(StageError, match="stage 'partition/x' has not run \\(published: ingest\\)"):
        m.stage("partition/x")
    m.stages["partition/x"] = StageRecord(
        name="partition/x", path="partition/x", fingerprint="p", depends={"ingest": m.stages["ingest"].fingerprint}
    )
    with pytest.raises(StageError, match="partition/x is missing"):  # a record without its output
        m.stage("partition/x")
    dv.partition("x").mkdir(parents=True)
    assert m.stage("partition/x").fingerprint == "p" and m.has_stage("partition/x")
    m.stages["ingest"].fingerprint = "changed"
    with pytest.raises(StageError, match="built from an older 'ingest'"):
        m.stage("partition/x")
    assert not m.has_stage("partition/x")
    assert [s.name for s in m.stages_with_prefix("partition/")] == ["partition/x"]


# ---- StagePublisher -----------------------------------------------------------------------------


def publish(dv: DatasetVersion, run: str, params: dict, payload: bytes, **commit) -> StageRecord:
    pub = StagePublisher(dv, f"partition/{run}", dv.partition(run), params, depends=["ingest"])
    with pub:
        (pub.tmp / "data.bin").write_bytes(payload)
        return pub.commit(**commit)


def test_stage_commit_publishes_atomically(dv):
    before = manifest_of(dv)
    rec = publish(dv, "r-p2", {"parts": 2}, b"one", counts={"parts": 2}, metrics={"rf": 1.5}, timings={"x_s": 1.0})
    assert (dv.partition("r-p2") / "data.bin").read_bytes() == b"one"
    m = manifest_of(dv)
    assert m.stages["partition/r-p2"] == rec
    assert rec.depends == {"ingest": before.stages["ingest"].fingerprint}
    assert rec.path == "partition/r-p2" and rec.metrics == {"rf": 1.5} and "total_s" in rec.timings
    assert m.stages["ingest"] == before.stages["ingest"] and m.schema == before.schema
    assert not [p for p in dv.partition("r-p2").parent.iterdir() if p.name.startswith(".")]


def test_stage_abort_on_exception_leaves_everything_as_it_was(dv):
    publish(dv, "r-p2", {"parts": 2}, b"old")
    man_before = dv.manifest_path.read_bytes()
    pub = StagePublisher(dv, "partition/r-p2", dv.partition("r-p2"), {"parts": 3}, depends=["ingest"])
    with pytest.raises(RuntimeError, match="boom"), pub:
        (pub.tmp / "data.bin").write_bytes(b"half")
        raise RuntimeError("boom")
    assert (dv.partition("r-p2") / "data.bin").read_bytes() == b"old"
    assert dv.manifest_path.read_bytes() == man_before
    assert not list(dv.partition("r-p2").parent.glob(".tmp-*"))


def test_stage_idempotence_and_replacement(dv):
    publish(dv, "r-p2", {"parts": 2}, b"one")
    same = StagePublisher(dv, "partition/r-p2", dv.partition("r-p2"), {"parts": 2}, depends=["ingest"])
    other = StagePublisher(dv, "partition/r-p2", dv.partition("r-p2"), {"parts": 3}, depends=["ingest"])
    assert same.is_current() and not other.is_current()
    assert same.fingerprint == fingerprint("partition/r-p2", {"parts": 2}, same.depends, None)
    with other:
        (other.tmp / "data.bin").write_bytes(b"two")
        other.commit()
    assert (dv.partition("r-p2") / "data.bin").read_bytes() == b"two"
    assert manifest_of(dv).stages["partition/r-p2"].params == {"parts": 3}
    assert not [p.name for p in dv.partition("r-p2").parent.iterdir() if p.name.startswith(".")]
    # output deleted behind the manifest's back: no longer current
    shutil.rmtree(dv.partition("r-p2"))
    assert not other.is_current()


def _hold_lease(directory: Path) -> subprocess.Popen:
    """Another live process that holds ``directory``'s lease (as a concurrent run would)."""
    code = (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(directory / '.lease')!r}, os.O_CREAT | os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_only_abandoned_staging_of_the_same_name_is_removed(dv):
    parent = dv.path / "partition"
    parent.mkdir()
    dead = parent / ".tmp-r-p2~deadbeef0000"  # its writer died: the lease file is there, nobody holds it
    dead.mkdir()
    (dead / ".lease").touch()
    (dead / "junk").write_text("left by a killed run")
    legacy = parent / ".tmp-r-p2-0123456789ab"  # from before leases, an hour old
    legacy.mkdir()
    os.utime(legacy, (time.time() - 3600,) * 2)
    starting = parent / ".tmp-r-p2~0000000000aa"  # created an instant ago, lease not taken yet
    starting.mkdir()
    live = parent / ".tmp-r-p2~00000000abcd"  # a concurrent run of the same stage
    live.mkdir()
    longer = parent / ".tmp-r-p2-seed2~00000000beef"  # a concurrent run whose name extends this one's
    longer.mkdir()
    (longer / ".lease").touch()
    unrelated = parent / ".tmp-other~deadbeef0000"
    unrelated.mkdir()
    holder = _hold_lease(live)
    try:
        pub = StagePublisher(dv, "partition/r-p2", dv.partition("r-p2"), {}, depends=["ingest"])
        with pytest.raises(StageError, match="commit without output"):
            pub.commit()
        _ = pub.tmp
        assert not dead.exists() and not legacy.exists()
        assert starting.exists() and live.exists() and longer.exists() and unrelated.exists()
        pub.abort()
        assert not pub.tmp.name.startswith(".tmp-r-p2-seed2")
        pub.abort()
    finally:
        holder.kill()
        holder.wait()
    # once its holder is gone, the run that held 'live' is abandoned too
    with StagePublisher(dv, "partition/r-p2", dv.partition("r-p2"), {}, depends=["ingest"]) as pub:
        assert not live.exists() and longer.exists()
        pub.abort()


def test_commit_refuses_a_staging_directory_removed_under_it(dv):
    pub = StagePublisher(dv, "partition/r-p2", dv.partition("r-p2"), {}, depends=["ingest"])
    with pytest.raises(StageError, match="removed while the stage ran"), pub:
        (pub.tmp / "data.bin").write_bytes(b"half")
        shutil.rmtree(pub.tmp)  # what the old prefix cleanup of a concurrent run did
        (pub.tmp / "part-00000").mkdir(parents=True)  # ... and a late task recreated it
        pub.commit()
    assert "partition/r-p2" not in manifest_of(dv).stages and not dv.partition("r-p2").exists()


@pytest.mark.parametrize("crash_at", ["rename_in", "manifest"])
def test_interrupted_replacement_is_refused_then_restored(dv, monkeypatch, crash_at):
    """A crash between renaming the old output away and recording the new one never mixes the two."""
    from glisp_core.dataset import manifest as manifest_mod
    from glisp_core.dataset import publish as publish_mod

    old_rec = publish(dv, "r-p2", {"seed": 1}, b"seed 1")
    renames = []
    real_rename, real_write = os.rename, manifest_mod.Manifest.write

    def crashing_rename(a, b):
        renames.append((a, b))
        if crash_at == "rename_in" and len(renames) == 2:
            raise KeyboardInterrupt("killed between the renames")
        return real_rename(a, b)

    def crashing_write(self, path):
        raise KeyboardInterrupt("killed before the manifest update")

    monkeypatch.setattr(publish_mod.os, "rename", crashing_rename)
    if crash_at == "manifest":
        monkeypatch.setattr(manifest_mod.Manifest, "write", crashing_write)
    with pytest.raises(KeyboardInterrupt):
        publish(dv, "r-p2", {"seed": 2}, b"seed 2")
    monkeypatch.setattr(publish_mod.os, "rename", real_rename)
    monkeypatch.setattr(manifest_mod.Manifest, "write", real_write)
    # the manifest still describes seed 1; whatever is on disk, readers must not take seed 2 for it
    assert manifest_of(dv).stages["partition/r-p2"] == old_rec
    with pytest.raises(StageError, match="interrupted publish"):
        manifest_of(dv).stage("partition/r-p2")
    # the next run of the stage puts back what was published, and finds it current
    again = StagePublisher(dv, "partition/r-p2", dv.partition("r-p2"), {"seed": 1}, depends=["ingest"])
    assert again.is_current()
    assert (dv.partition("r-p2") / "data.bin").read_bytes() == b"seed 1"
    assert manifest_of(dv).stage("partition/r-p2") == old_rec


def test_stage_needs_its_upstream(dv):
    with pytest.raises(StageError, match="'partition/x' has not run"):
        StagePublisher(dv, "serialize/x", dv.serialized("x"), {}, depends=["partition/x"])


def test_concurrent_commits_keep_every_record(dv):
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            publish(dv, f"t{i}-p2", {"i": i}, str(i).encode())
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert {f"partition/t{i}-p2" for i in range(8)} <= set(manifest_of(dv).stages)


# ---- VersionPublisher ---------------------------------------------------------------------------


def test_failed_version_leaves_earlier_versions_intact(dv):
    before = tree(dv.path)
    with pytest.raises(RuntimeError), VersionPublisher(dv.root, "g", "v2") as pub:
        pub.tmp_dv.edges.mkdir(parents=True)
        (pub.tmp_dv.edges / "part-0.parquet").write_bytes(b"partial")
        raise RuntimeError("crash mid-ingest")
    assert not (dv.root / "g" / "v2").exists()
    assert tree(dv.path) == before
    assert [p.name for p in (dv.root / "g").iterdir() if p.name.startswith(".")] == []
    # a failed forced re-ingest of v1 itself also keeps v1
    with pytest.raises(RuntimeError), VersionPublisher(dv.root, "g", "v1"):
        raise RuntimeError("crash")
    assert tree(dv.path) == before
    assert list_versions(dv.root, "g") == ["v1"]


def test_new_version_and_forced_replacement(dv):
    v1 = tree(dv.path)
    dv2 = write_dataset(dv.root, "g", np.array([0]), np.array([1]), version="v2")
    assert tree(dv.path) == v1
    assert pq.read_table(dv2.edges).num_rows == 1 and manifest_of(dv2).version == "v2"
    dv1b = write_dataset(dv.root, "g", np.array([0, 0]), np.array([1, 2]), version="v1")
    assert pq.read_table(dv1b.edges).num_rows == 2
    assert sorted(list_versions(dv.root, "g")) == ["v1", "v2"]
    assert not [p for p in (dv.root / "g").iterdir() if p.name.startswith(".")]


def test_stale_version_temps_are_removed(dv):
    stale = dv.root / "g" / ".tmp-v3~0123456789ab"
    stale.mkdir()
    (stale / ".lease").touch()
    longer = dv.root / "g" / ".tmp-v3-b~0123456789ab"
    longer.mkdir()
    (longer / ".lease").touch()
    with VersionPublisher(dv.root, "g", "v3") as pub:
        assert not stale.exists() and longer.exists()
        pub.commit(Manifest(graph="g", version="ignored"))
    assert manifest_of(DatasetVersion(dv.root, "g", "v3")).version == "v3"


def test_interrupted_version_replacement_is_restored(dv, monkeypatch):
    from glisp_core.dataset import publish as publish_mod

    before = tree(dv.path)
    real_rename = os.rename
    calls = []

    def crashing_rename(a, b):
        calls.append(a)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed between the renames")
        return real_rename(a, b)

    monkeypatch.setattr(publish_mod.os, "rename", crashing_rename)
    with pytest.raises(KeyboardInterrupt), VersionPublisher(dv.root, "g", "v1") as pub:
        pub.commit(Manifest(graph="g", version="v1"))
    monkeypatch.setattr(publish_mod.os, "rename", real_rename)
    assert not dv.path.exists()  # renamed away, new one not in
    with VersionPublisher(dv.root, "g", "v2"):  # any later ingest of the graph restores it
        pass
    assert tree(dv.path) == before


# ---- resolve_dataset ----------------------------------------------------------------------------


def test_resolve_dataset_forms(dv, tmp_path, monkeypatch):
    dv2 = write_dataset(dv.root, "g", np.array([0]), np.array([1]), version="v2")
    os.utime(dv.manifest_path, ns=(1_000_000_000, 1_000_000_000))  # v1 is older
    os.utime(dv2.manifest_path, ns=(2_000_000_000, 2_000_000_000))
    (dv.root / "g" / "broken").mkdir()  # no manifest: never a version
    assert resolve_dataset(dv.path) == dv
    assert resolve_dataset(str(dv.root / "g")) == dv2  # graph directory: latest
    assert resolve_dataset("g", dv.root) == dv2
    assert resolve_dataset("g/v1", dv.root) == dv
    monkeypatch.chdir(dv.root)
    assert resolve_dataset("g/v1", "/nonexistent").path.resolve() == dv.path.resolve()
    with pytest.raises(StageError, match="no published version found"):
        resolve_dataset("h", dv.root)
    with pytest.raises(StageError, match="no published version"):
        resolve_dataset("g/broken", dv.root)


def test_paths_and_names(dv):
    assert dv.assignment("a-p2") == dv.path / "partition" / "a-p2" / "assignment"
    assert dv.partition_dir("a-p2", 3) == dv.path / "serialize" / "a-p2" / "part-00003"
    assert dv.rejects("edges") == dv.path / "ingest" / "rejects" / "edges"
    for bad in ("../x", "", "a/b", ".hidden"):
        with pytest.raises(StageError, match="must be letters"):
            check_name("partition run", bad)
    with pytest.raises(StageError):
        dv.partition("../../etc")


def test_fingerprints(tmp_path):
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
    f = tmp_path / "x.csv"
    f.write_text("src,dst\n1,2\n")
    (c,) = file_fingerprints([f], "content")
    (s,) = file_fingerprints([f], "stat")
    assert c["bytes"] == 12 and len(c["sha256"]) == 64 and "mtime_ns" in s and "sha256" not in s
    f.write_text("src,dst\n1,3\n")
    assert file_fingerprints([f], "content")[0]["sha256"] != c["sha256"]
