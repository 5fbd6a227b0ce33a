"""The dataset publish protocol (docs/storage.md) on a local root and on a real S3-API server: stage records
and attempts, crashed and concurrent writers, versions appearing whole, resolving DATASET arguments."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from glisp_core.dataset import publish as publish_mod
from glisp_core.dataset.layout import DatasetVersion, check_name, list_versions, resolve_dataset
from glisp_core.dataset.manifest import SCHEMA_VERSION, Manifest, StageRecord, now_iso, read_manifest
from glisp_core.dataset.publish import (
    LEASE,
    StagePublisher,
    VersionPublisher,
    file_fingerprints,
    fingerprint,
)
from glisp_core.dataset.records import RECORDS, VERSION_FILE
from glisp_core.dataset.versions import set_latest
from glisp_core.errors import FormatError, StageError
from glisp_core.storage.lease import lease_doc
from glisp_core.storage.uri import StoreURI, parse_uri
from glisp_testing.graphs import write_dataset

REPO = str(Path(__file__).resolve().parents[2])
STAGE = "partition/r-p2"


@pytest.fixture
def dv(any_root: StoreURI) -> DatasetVersion:
    return write_dataset(any_root, "g", np.array([0, 1, 2, 2]), np.array([1, 2, 0, 3]))


# ---- helpers ------------------------------------------------------------------------------------


def snapshot(dv: DatasetVersion) -> dict[str, bytes]:
    """Every object below the version, with its bytes."""
    return {rel: dv.store.read_bytes(dv.path / rel) for rel, _ in dv.store.files(dv.path)}


def attempts(dv: DatasetVersion, stage: str = STAGE) -> list[str]:
    return [n for n in dv.store.names(dv.stage_dir(stage)) if n.startswith("@")]


def records(dv: DatasetVersion, stage: str = STAGE) -> list[str]:
    return [n for n in dv.store.names(dv.path / RECORDS / stage) if n.endswith(".json")]


def record(dv: DatasetVersion, stage: str, seq: int) -> dict:
    return json.loads(dv.store.read_bytes(dv.path / RECORDS / stage / f"{seq:08d}.json"))


def write_output(pub: StagePublisher, tag: str, files: int = 3, size: int = 1000) -> None:
    for i in range(files):
        pub.dv.store.write_bytes(pub.tmp / f"part-{i:05d}.bin", tag.encode() * size)


def check_output(dv: DatasetVersion, stage: str = STAGE) -> str:
    """The published output of ``stage`` is whole: every file of one run, none missing; returns its tag."""
    rec = read_manifest(dv).stage(stage)
    tag, files, size = rec.params["tag"], rec.params.get("files", 3), rec.params.get("size", 1000)
    got = {k: v for k, v in dv.store.files(dv.output(stage)) if k != LEASE}  # a writer killed as it published
    assert sorted(got) == [f"part-{i:05d}.bin" for i in range(files)], got
    for name in got:
        assert dv.store.read_bytes(dv.output(stage) / name) == tag.encode() * size, (stage, name)
    return str(tag)


def publish(dv: DatasetVersion, tag: str, stage: str = STAGE, **commit) -> StageRecord:
    pub = StagePublisher(dv, stage, {"tag": tag}, depends=["ingest"])
    with pub:
        write_output(pub, tag)
        return pub.commit(**commit)


def fake_attempt(dv: DatasetVersion, name: str, lease: dict | None, stage: str = STAGE) -> StoreURI:
    """An attempt prefix as a writer leaves it: some output and (optionally) its lease object."""
    d = dv.stage_dir(stage) / name
    dv.store.write_bytes(d / "part-00000.bin", b"left behind")
    if lease is not None:
        dv.store.write_bytes(d / LEASE, json.dumps(lease).encode())
    return d


def dead_pid() -> int:
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(p.stdout)


# A writer in its own process: publishes one stage of a version, pausing where told (to be killed there).
WRITER = f"""
import json, sys, time
sys.path.insert(0, {REPO!r})
from glisp_core.dataset import publish as publish_mod
from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.publish import StagePublisher

a = json.loads(sys.argv[1])
real_create = publish_mod.create_record


def create_record(*args, **kw):
    if a.get("pause") == "before_record":
        print("before_record", flush=True)
        time.sleep(600)
    ok = real_create(*args, **kw)
    if a.get("pause") == "after_record":
        print("after_record", flush=True)
        time.sleep(600)
    return ok


publish_mod.create_record = create_record
dv = DatasetVersion(a["root"], a["graph"], a["version"])
params = {{"tag": a["tag"], "files": a["files"], "size": a["size"]}}
pub = StagePublisher(dv, a["stage"], params, depends=["ingest"])
with pub:
    print("attempt", pub.tmp.qualified, flush=True)
    for i in range(a["files"]):
        if a.get("pause") == "writing" and i == 1:
            print("writing", flush=True)
            time.sleep(600)
        dv.store.write_bytes(pub.tmp / f"part-{{i:05d}}.bin", a["tag"].encode() * a["size"])
    pub.commit()
print("done", flush=True)
"""


def start_writer(dv: DatasetVersion, tag: str, pause: str | None, stage: str = STAGE, files: int = 3, size: int = 1000):
    args = {
        "root": dv.root.qualified,
        "graph": dv.graph,
        "version": dv.version,
        "stage": stage,
        "tag": tag,
        "files": files,
        "size": size,
        "pause": pause,
    }
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, json.dumps(args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for(proc: subprocess.Popen, marker: str) -> list[str]:
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.strip())
        if line.startswith(marker):
            return lines
    raise AssertionError(f"writer ended before {marker!r}: {lines} {proc.stderr.read() if proc.stderr else ''}")


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()


# ---- the manifest -------------------------------------------------------------------------------


def test_manifest_is_assembled_from_the_records(dv: DatasetVersion) -> None:
    assert dv.store.exists(dv.manifest_path) and records(dv, "ingest") == ["00000001.json"]
    m = read_manifest(dv)
    assert (m.graph, m.version, m.schema_version) == ("g", "v1", SCHEMA_VERSION)
    assert m.schema["num_vertices"] == 4 and m.schema["num_edges"] == 4 and list(m.stages) == ["ingest"]
    assert m.stages["ingest"].path.startswith("ingest/@") and m.stages["ingest"].path == record(dv, "ingest", 1)["path"]
    assert m.location == dv and dv.ingest == dv.path / m.stages["ingest"].path
    assert dv.store.read_table(dv.edges).num_rows == 4
    # the dict form round-trips, numpy values become plain JSON
    m.stages["ingest"].metrics["np"] = np.float32(0.5)
    m.stages["ingest"].counts["arr"] = np.arange(3)
    back = Manifest.from_dict(json.loads(m.to_json()))
    assert back.stages["ingest"].counts["arr"] == [0, 1, 2] and back.schema == m.schema


def test_manifest_errors(dv: DatasetVersion) -> None:
    with pytest.raises(FormatError, match="not a published dataset version"):
        read_manifest(DatasetVersion(dv.root, "g", "v9"))
    dv.store.write_bytes(dv.manifest_path, b"{not json")
    with pytest.raises(FormatError, match="not valid JSON"):
        read_manifest(dv)
    dv.store.write_bytes(dv.manifest_path, json.dumps({"schema_version": 99, "graph": "g"}).encode())
    with pytest.raises(FormatError, match="schema version 99"):
        read_manifest(dv)
    with pytest.raises(FormatError, match="malformed manifest"):
        Manifest.from_dict({"schema_version": SCHEMA_VERSION, "version": "v"})


# ---- publishing a stage -------------------------------------------------------------------------


def test_commit_makes_the_output_visible_with_its_record(dv: DatasetVersion) -> None:
    before = read_manifest(dv)
    pub = StagePublisher(dv, STAGE, {"tag": "A"}, depends=["ingest"])
    with pub:
        write_output(pub, "A")
        # written, not published: no record, no output, nothing a reader would take
        assert records(dv) == [] and STAGE not in read_manifest(dv).stages
        with pytest.raises(StageError, match="has not run"):
            dv.output(STAGE)
        assert dv.store.exists(pub.tmp / LEASE)  # the attempt is leased while written
        tmp = pub.tmp
        rec = pub.commit(counts={"parts": 2}, metrics={"rf": 1.5}, timings={"x_s": 1.0})
    assert records(dv) == ["00000001.json"] and record(dv, STAGE, 1)["path"] == rec.path
    assert rec.path.startswith(f"{STAGE}/@") and dv.output(STAGE) == dv.path / rec.path == tmp
    assert check_output(dv) == "A"
    m = read_manifest(dv)
    assert m.stages[STAGE] == rec and m.stage(STAGE) == rec
    assert rec.depends == {"ingest": before.stages["ingest"].fingerprint}
    assert rec.metrics == {"rf": 1.5} and rec.counts == {"parts": 2} and set(rec.timings) == {"x_s", "total_s"}
    assert m.stages["ingest"] == before.stages["ingest"] and m.schema == before.schema
    assert not dv.store.exists(dv.output(STAGE) / LEASE)  # published output carries no lease
    assert attempts(dv) == [rec.path.rsplit("/", 1)[-1]]


def test_an_exception_leaves_the_previous_record_and_output_untouched(dv: DatasetVersion) -> None:
    publish(dv, "A")
    before = snapshot(dv)
    pub = StagePublisher(dv, STAGE, {"tag": "B"}, depends=["ingest"])
    with pytest.raises(RuntimeError, match="boom"), pub:
        write_output(pub, "B")
        raise RuntimeError("boom")
    assert snapshot(dv) == before  # the failed attempt is gone, nothing else changed
    assert records(dv) == ["00000001.json"] and check_output(dv) == "A"


def test_an_exception_after_the_commit_keeps_what_was_published(dv: DatasetVersion) -> None:
    pub = StagePublisher(dv, STAGE, {"tag": "A"}, depends=["ingest"])
    with pytest.raises(RuntimeError, match="after"), pub:
        write_output(pub, "A")
        pub.commit()
        raise RuntimeError("after the commit")
    assert check_output(dv) == "A"


def test_idempotence_and_replacement(dv: DatasetVersion) -> None:
    first = publish(dv, "A")
    same = StagePublisher(dv, STAGE, {"tag": "A"}, depends=["ingest"])
    other = StagePublisher(dv, STAGE, {"tag": "B"}, depends=["ingest"])
    assert same.is_current() and not other.is_current() and same.record() == first
    assert same.fingerprint == fingerprint(STAGE, {"tag": "A"}, same.depends, None) != other.fingerprint
    assert StagePublisher(dv, STAGE, {"tag": "A"}, depends=["ingest"], extra_inputs=[1]).fingerprint != same.fingerprint
    with other:
        write_output(other, "B")
        second = other.commit()
    assert records(dv) == ["00000001.json", "00000002.json"] and check_output(dv) == "B"
    assert read_manifest(dv).stages[STAGE] == second and other.is_current() and not same.is_current()
    # the superseded attempt is removed, the new one is the only one left
    assert attempts(dv) == [second.path.rsplit("/", 1)[-1]] and not dv.store.exists(dv.path / first.path)
    # output deleted behind the record's back: no longer current
    dv.store.delete(dv.output(STAGE))
    assert not other.is_current()


def test_crashed_writers_attempts_are_removed_live_ones_kept(dv: DatasetVersion) -> None:
    published = publish(dv, "A").path.rsplit("/", 1)[-1]
    live = start_writer(dv, "L", "writing")  # a real writer that is still writing
    try:
        live_attempt = wait_for(live, "writing")[0].split()[1].rsplit("/", 1)[-1]
        killed = start_writer(dv, "K", "writing")  # a real writer, SIGKILLed in the middle of its output
        killed_attempt = wait_for(killed, "writing")[0].split()[1].rsplit("/", 1)[-1]
        kill(killed)
        host = os.uname().nodename
        dead = fake_attempt(dv, "@20240101T000000-00000000dead", {**lease_doc("x", 600), "pid": dead_pid()})
        expired = fake_attempt(dv, "@20240101T000000-0000000e0p1d", {**lease_doc("x", -1), "host": "elsewhere"})
        torn = fake_attempt(dv, "@20240101T000000-00000000040e", None)  # no lease: finished, never published
        foreign = fake_attempt(dv, "@20240101T000000-0000000f0e19", {**lease_doc("x", 600), "host": "elsewhere"})
        ours = fake_attempt(dv, "@20240101T000000-00000000a11e", {**lease_doc("x", 600), "host": host})
        other_stage = fake_attempt(dv, "@20240101T000000-00000000dead", {**lease_doc("x", -1)}, stage="partition/r")
        everything = {published, live_attempt, killed_attempt, dead.name, expired.name, torn.name, foreign.name}
        assert set(attempts(dv)) == everything | {ours.name}
        pub = StagePublisher(dv, STAGE, {"tag": "B"}, depends=["ingest"])
        with pytest.raises(StageError, match="commit without output"):
            pub.commit()
        with pub:
            mine = pub.tmp.name
            left = set(attempts(dv))
            # gone: a killed writer's, a dead process's, an expired one, an unleased one no record names
            assert left == {published, foreign.name, ours.name, live_attempt, mine}, left
            assert attempts(dv, "partition/r") == [other_stage.name]  # another stage's attempts are its own
            write_output(pub, "B")
            pub.commit()
        assert check_output(dv) == "B"
    finally:
        kill(live)
    # once its writer is gone, the live one is abandoned too (its host is this one: no need to wait)
    with StagePublisher(dv, STAGE, {"tag": "C"}, depends=["ingest"]) as pub:
        assert live_attempt not in attempts(dv) and foreign.name in attempts(dv)
        pub.abort()
    assert check_output(dv) == "B"


def test_a_writer_dying_as_it_leases_its_attempt_leaves_nothing_a_rerun_must_wait_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the pipeline fault test: a writer killed between creating its attempt directory and renaming
    its lease into it left a young attempt with no lease, which every run within the lease TTL left alone."""
    dv = write_dataset(parse_uri(tmp_path / "root"), "g", np.array([0, 1, 2, 2]), np.array([1, 2, 0, 3]))
    store, real_put = dv.store, type(dv.store.backend).put

    def die_as_the_lease_lands(backend, u, data):  # the injected fault: the process "dies" mid-lease
        if u.name == LEASE:
            raise KeyboardInterrupt
        real_put(backend, u, data)

    monkeypatch.setattr(type(store.backend), "put", die_as_the_lease_lands)
    with pytest.raises(KeyboardInterrupt):
        _ = StagePublisher(dv, STAGE, {"tag": "K"}, depends=["ingest"]).tmp
    monkeypatch.setattr(type(store.backend), "put", real_put)
    sdir = dv.stage_dir(STAGE)
    assert attempts(dv) == []  # no attempt appeared without its lease
    staged = [n for n in store.names(sdir) if n.startswith(".@")]
    assert len(staged) == 1
    old = sdir / ".@20240101T000000-00000000dead"
    store.write_bytes(old / LEASE, b"{")
    publish(dv, "A")  # the next run sweeps a staging directory once it is older than a lease
    assert sorted(n for n in store.names(sdir) if n.startswith(".@")) == staged
    assert check_output(dv) == "A"


def test_commit_refuses_an_attempt_deleted_under_it(dv: DatasetVersion) -> None:
    publish(dv, "A")
    before = snapshot(dv)
    pub = StagePublisher(dv, STAGE, {"tag": "B"}, depends=["ingest"])
    with pub:
        write_output(pub, "B")
        dv.store.delete(pub.tmp)  # what a confused cleanup elsewhere could do
        dv.store.write_bytes(pub.tmp / "part-00002.bin", b"B" * 1000)  # ... while a late task still wrote
        with pytest.raises(StageError, match=re.escape(f"its attempt {pub.tmp} was removed while the stage ran")):
            pub.commit()
    assert snapshot(dv) == before and check_output(dv) == "A"


def test_a_writer_starting_during_a_commit_leaves_the_committing_attempt_alone(
    dv: DatasetVersion, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another run of the stage cleans up abandoned attempts just as this one publishes its record."""
    real_new = publish_mod.new_attempt  # a run that started long ago: its attempt's name is old
    monkeypatch.setattr(publish_mod, "new_attempt", lambda: "@20200101T000000" + real_new()[16:])
    real_create = publish_mod.create_record
    seen: list[list[str]] = []

    def create_with_a_rival_starting(*args, **kw):
        monkeypatch.setattr(publish_mod, "new_attempt", real_new)
        with StagePublisher(dv, STAGE, {"tag": "R"}, depends=["ingest"]) as rival:
            seen.append(attempts(dv))
            rival.abort()
        return real_create(*args, **kw)

    monkeypatch.setattr(publish_mod, "create_record", create_with_a_rival_starting)
    rec = publish(dv, "A")
    assert rec.path.rsplit("/", 1)[-1] in seen[0]
    monkeypatch.setattr(publish_mod, "create_record", real_create)
    assert check_output(dv) == "A"


def test_a_cleanup_that_read_an_older_record_leaves_a_new_commit_alone(
    dv: DatasetVersion, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run starting while another commits: it reads the record before that commit and lists after it."""
    publish(dv, "A")
    real_new = publish_mod.new_attempt  # a run that started long ago: its attempt's name is old
    monkeypatch.setattr(publish_mod, "new_attempt", lambda: "@20200101T000000" + real_new()[16:])
    committing = StagePublisher(dv, STAGE, {"tag": "B"}, depends=["ingest"])
    committing.__enter__()
    monkeypatch.setattr(publish_mod, "new_attempt", real_new)
    write_output(committing, "B")
    real_remove = publish_mod.remove_abandoned

    def remove_after_a_commit(*args, **kw):
        committing.commit()  # lands between reading the current record and listing the attempts
        committing.__exit__(None, None, None)
        return real_remove(*args, **kw)

    monkeypatch.setattr(publish_mod, "remove_abandoned", remove_after_a_commit)
    with StagePublisher(dv, STAGE, {"tag": "C"}, depends=["ingest"]) as rival:
        _ = rival.tmp
        rival.abort()
    monkeypatch.setattr(publish_mod, "remove_abandoned", real_remove)
    assert check_output(dv) == "B"


def test_a_run_that_loses_to_the_same_fingerprint_defers_to_it(
    dv: DatasetVersion, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs of one stage with the same inputs: the first record stands, the second's attempt is removed."""
    first = StagePublisher(dv, STAGE, {"tag": "A"}, depends=["ingest"])
    second = StagePublisher(dv, STAGE, {"tag": "A"}, depends=["ingest"])
    with first, second:
        write_output(first, "A")
        write_output(second, "A")
        real_create = publish_mod.create_record

        def first_publishes_in_between(*args, **kw):
            monkeypatch.setattr(publish_mod, "create_record", real_create)
            first.commit()  # lands after `second` read the (absent) current record, before it creates its own
            return real_create(*args, **kw)

        monkeypatch.setattr(publish_mod, "create_record", first_publishes_in_between)
        theirs = second.tmp
        rec = second.commit()
    assert records(dv) == ["00000001.json"] and rec == read_manifest(dv).stages[STAGE]
    assert dv.output(STAGE) == first.dv.path / rec.path != theirs
    assert attempts(dv) == [rec.path.rsplit("/", 1)[-1]] and check_output(dv) == "A"


def test_concurrent_publishers_of_one_stage_are_serialised(dv: DatasetVersion) -> None:
    n = 4
    start = threading.Barrier(n)
    errors: list[BaseException] = []
    published: dict[str, StageRecord] = {}

    def run(tag: str) -> None:
        try:
            pub = StagePublisher(dv, STAGE, {"tag": tag, "files": 4, "size": 20_000}, depends=["ingest"])
            start.wait()
            with pub:
                for i in range(4):
                    dv.store.write_bytes(pub.tmp / f"part-{i:05d}.bin", tag.encode() * 20_000)
                published[tag] = pub.commit()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in "ABCD"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # every run published, one after another: consecutive records, each naming its own attempt
    assert records(dv) == [f"{i:08d}.json" for i in range(1, n + 1)]
    docs = [record(dv, STAGE, i) for i in range(1, n + 1)]
    assert sorted(d["params"]["tag"] for d in docs) == list("ABCD")
    assert len({d["path"] for d in docs}) == n and {r.path for r in published.values()} == {d["path"] for d in docs}
    # the current one names a complete attempt of one run, never a mix; the superseded ones are gone
    assert check_output(dv) == docs[-1]["params"]["tag"]
    assert attempts(dv) == [docs[-1]["path"].rsplit("/", 1)[-1]]


def test_concurrent_publishes_of_different_stages_keep_every_record(dv: DatasetVersion) -> None:
    stages = [f"partition/t{i}-p2" for i in range(6)]
    start = threading.Barrier(len(stages))
    errors: list[BaseException] = []

    def run(stage: str) -> None:
        try:
            start.wait()
            publish(dv, stage[-4:], stage=stage)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(s,)) for s in stages]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    m = read_manifest(dv)
    assert set(m.stages) == {"ingest", *stages}
    for s in stages:
        assert check_output(dv, s) == s[-4:]


def test_stage_freshness(dv: DatasetVersion) -> None:
    m = read_manifest(dv)
    with pytest.raises(StageError, match=r"stage 'partition/r-p2' has not run \(published: ingest\)"):
        m.stage(STAGE)
    with pytest.raises(StageError, match="'partition/x' has not run"):
        StagePublisher(dv, "serialize/x", {}, depends=["partition/x"])
    rec = publish(dv, "A")
    m = read_manifest(dv)
    assert m.stage(STAGE) == rec and m.has_stage(STAGE) and m.latest_run("partition") == "r-p2"
    assert [s.name for s in m.stages_with_prefix("partition/")] == [STAGE]
    # the output the record names is gone
    dv.store.delete(dv.output(STAGE))
    with pytest.raises(StageError, match="the output of stage 'partition/r-p2' at .* is missing"):
        read_manifest(dv).stage(STAGE)
    publish(dv, "A")  # no longer current: re-published
    assert read_manifest(dv).has_stage(STAGE)
    # the upstream stage was re-published with another fingerprint: the downstream one is stale
    write_dataset(dv.root, "g", np.array([0, 1]), np.array([1, 0]), version="v1")
    m = read_manifest(dv)
    with pytest.raises(StageError, match="was built from an older 'ingest'; re-run it"):
        m.stage(STAGE)
    assert not m.has_stage(STAGE) and m.latest_run("partition", current_only=True) is None
    assert not StagePublisher(dv, STAGE, {"tag": "A"}, depends=["ingest"]).is_current()


def test_paths_and_names(dv: DatasetVersion) -> None:
    with pytest.raises(StageError, match="stage 'partition/a-p2' has not run"):
        dv.assignment("a-p2")
    publish(dv, "A", stage="partition/a-p2")
    out = dv.output("partition/a-p2")
    assert dv.assignment("a-p2") == out / "assignment" and dv.replicas("a-p2") == out / "replicas"
    assert dv.rejects("edges") == dv.ingest / "rejects" / "edges"
    assert dv.stage_dir("serialize/a-p2") == dv.path / "serialize" / "a-p2"
    for bad in ("../x", "", "a/b", ".hidden"):
        with pytest.raises(StageError, match="must be letters"):
            check_name("partition run", bad)
    with pytest.raises(StageError):
        dv.partition("../../etc")


def test_fingerprints(tmp_path: Path) -> None:
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
    f = tmp_path / "x.csv"
    f.write_text("src,dst\n1,2\n")
    (c,) = file_fingerprints([f], "content")
    (s,) = file_fingerprints([f], "stat")
    assert c["bytes"] == 12 and len(c["sha256"]) == 64 and "mtime_ns" in s and "sha256" not in s
    f.write_text("src,dst\n1,3\n")
    assert file_fingerprints([f], "content")[0]["sha256"] != c["sha256"]


# ---- versions -----------------------------------------------------------------------------------


def ingest_manifest(graph: str, version: str) -> Manifest:
    rec = StageRecord(name="ingest", path="", fingerprint=fingerprint(graph, version, time.time_ns()))
    return Manifest(
        graph=graph, version=version, created_at=now_iso(), schema={"num_vertices": 2}, stages={"ingest": rec}
    )


def test_a_version_appears_only_at_its_commit(dv: DatasetVersion) -> None:
    root = dv.root
    with VersionPublisher(root, "g", "v2") as pub:
        dv.store.write_table(pa.table({"eid": [0, 1]}), pub.tmp_dv.edges / "part-00000.parquet")
        assert dv.store.read_table(pub.tmp_dv.edges).num_rows == 2  # the writer reads its own attempt back
        assert list_versions(root, "g") == ["v1"]
        assert resolve_dataset("g", root) == dv
        with pytest.raises(StageError, match="no published version"):
            resolve_dataset("g/v2", root)
        v2 = pub.commit(ingest_manifest("g", "v2"))
    assert list_versions(root, "g") == ["v1", "v2"] and resolve_dataset("g", root) == v2
    assert dv.store.read_table(v2.edges).num_rows == 2 and read_manifest(v2).schema == {"num_vertices": 2}
    assert not dv.store.exists(v2.ingest / LEASE)


def test_a_failed_ingest_leaves_no_version_and_earlier_ones_intact(dv: DatasetVersion) -> None:
    before = snapshot(dv)
    with pytest.raises(RuntimeError), VersionPublisher(dv.root, "g", "v2") as pub:
        dv.store.write_bytes(pub.tmp_dv.edges / "part-0.parquet", b"partial")
        raise RuntimeError("crash mid-ingest")
    assert list_versions(dv.root, "g") == ["v1"] and snapshot(dv) == before
    assert list(dv.store.files(dv.root / "g" / "v2")) == []
    with pytest.raises(StageError):
        resolve_dataset("g/v2", dv.root)
    # a failed forced re-ingest of v1 itself also keeps v1
    with pytest.raises(RuntimeError), VersionPublisher(dv.root, "g", "v1") as pub:
        dv.store.write_bytes(pub.tmp_dv.edges / "part-0.parquet", b"partial")
        raise RuntimeError("crash")
    assert snapshot(dv) == before and list_versions(dv.root, "g") == ["v1"]


def test_a_forced_reingest_publishes_a_newer_ingest_record(dv: DatasetVersion) -> None:
    head = dv.store.read_bytes(dv.manifest_path)
    old = read_manifest(dv).stages["ingest"]
    again = write_dataset(dv.root, "g", np.array([0, 0, 1]), np.array([1, 2, 2]), version="v1")
    assert again == dv and records(dv, "ingest") == ["00000001.json", "00000002.json"]
    new = read_manifest(dv).stages["ingest"]
    assert new.fingerprint != old.fingerprint and new.path != old.path and new.schema["num_edges"] == 3
    assert dv.store.read_table(dv.edges).num_rows == 3
    assert dv.store.read_bytes(dv.manifest_path) == head  # the version was created once
    assert attempts(dv, "ingest") == [new.path.rsplit("/", 1)[-1]]  # the old ingest attempt is gone
    assert list_versions(dv.root, "g") == ["v1"]


def test_a_store_failure_after_the_ingest_record_leaves_the_version_readable(
    dv: DatasetVersion, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forced re-ingest whose record is published but whose last request fails: what the record names stays."""
    real = publish_mod.Store.create_exclusive

    def store_fails_at_the_version_object(self, uri, data):
        if str(uri).endswith(VERSION_FILE):
            raise OSError("connection reset")
        return real(self, uri, data)

    monkeypatch.setattr(publish_mod.Store, "create_exclusive", store_fails_at_the_version_object)
    with pytest.raises(OSError, match="connection reset"):
        write_dataset(dv.root, "g", np.array([0, 0, 1]), np.array([1, 2, 2]), version="v1")
    monkeypatch.setattr(publish_mod.Store, "create_exclusive", real)
    assert records(dv, "ingest") == ["00000001.json", "00000002.json"]
    m = read_manifest(dv)
    assert m.stage("ingest").schema["num_edges"] == 3 and dv.store.read_table(dv.edges).num_rows == 3
    assert not dv.store.exists(dv.ingest / LEASE)


def test_a_crashed_first_ingest_is_removed_by_the_next_ingest_of_that_version(
    dv: DatasetVersion, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = f"""
import sys, time
sys.path.insert(0, {REPO!r})
import pyarrow as pa
from glisp_core.dataset.publish import VersionPublisher
with VersionPublisher({dv.root.qualified!r}, "g", "v3") as pub:
    pub.dv.store.write_table(pa.table({{"eid": [0]}}), pub.tmp_dv.edges / "part-00000.parquet")
    print("writing", flush=True)
    time.sleep(600)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(proc, "writing")
    kill(proc)
    v3 = DatasetVersion(dv.root, "g", "v3")
    (leftover,) = attempts(v3, "ingest")
    assert list_versions(dv.root, "g") == ["v1"]
    # a first ingest killed between its record and _version.json
    real = publish_mod.Store.create_exclusive

    def crash_at_the_version_object(self, uri, data):
        if str(uri).endswith(VERSION_FILE):
            raise KeyboardInterrupt("killed")
        return real(self, uri, data)

    monkeypatch.setattr(publish_mod.Store, "create_exclusive", crash_at_the_version_object)
    with pytest.raises(KeyboardInterrupt):
        write_dataset(dv.root, "g", np.array([0]), np.array([1]), version="v4")
    monkeypatch.setattr(publish_mod.Store, "create_exclusive", real)
    v4 = DatasetVersion(dv.root, "g", "v4")
    assert records(v4, "ingest") == ["00000001.json"] and list_versions(dv.root, "g") == ["v1"]
    with pytest.raises(StageError):
        resolve_dataset("g/v4", dv.root)
    # the next ingest of each version starts from nothing
    for v in ("v3", "v4"):
        with VersionPublisher(dv.root, "g", v) as pub:
            assert [rel for rel, _ in dv.store.files(pub.dv.path)] == [
                f"{pub.tmp_dv.ingest.relative_to(pub.dv.path)}/{LEASE}"
            ]
            pub.commit(ingest_manifest("g", v))
        assert records(pub.dv, "ingest") == ["00000001.json"]
    assert leftover not in attempts(v3, "ingest") and list_versions(dv.root, "g") == ["v1", "v3", "v4"]


def test_a_first_ingest_finishing_while_another_starts_is_kept(
    dv: DatasetVersion, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second ingest of v2 looks for leftovers of a crashed first one just as the first one commits."""
    first = VersionPublisher(dv.root, "g", "v2")
    dv.store.write_table(pa.table({"eid": [0, 1]}), first.tmp_dv.edges / "part-00000.parquet")
    real_names = publish_mod.Store.names
    ingest_dir = str(first.dv.stage_dir("ingest"))

    def names_while_the_first_commits(self, uri):
        if str(uri) == ingest_dir and not first._done:
            first.commit(ingest_manifest("g", "v2"))
        return real_names(self, uri)

    monkeypatch.setattr(publish_mod.Store, "names", names_while_the_first_commits)
    with VersionPublisher(dv.root, "g", "v2"):
        pass  # started, then gave up: nothing published
    monkeypatch.setattr(publish_mod.Store, "names", real_names)
    assert first._done and list_versions(dv.root, "g") == ["v1", "v2"]
    v2 = resolve_dataset("g/v2", dv.root)
    assert dv.store.read_table(v2.edges).num_rows == 2


def test_resolve_dataset_forms(dv: DatasetVersion, monkeypatch: pytest.MonkeyPatch) -> None:
    root = dv.root
    dv2 = write_dataset(root, "g", np.array([0]), np.array([1]), version="v2")  # created after v1: newer
    dv.store.write_bytes(root / "g" / "broken" / "ingest" / "x", b"no _version.json: never a version")
    assert resolve_dataset(dv.path) == dv and resolve_dataset(dv.path.qualified) == dv  # a version's URI
    assert resolve_dataset(str(dv.path)) == dv
    assert resolve_dataset(root / "g") == dv2 and resolve_dataset((root / "g").qualified) == dv2  # graph: newest
    assert resolve_dataset("g", root) == dv2 and resolve_dataset("g/latest", root) == dv2
    assert resolve_dataset("g/v1", root) == dv and resolve_dataset("g/v2", root.qualified) == dv2
    set_latest(dv)  # LATEST wins over newest
    for spec in ("g", "g/latest", (root / "g").qualified, (root / "g" / "latest").qualified):
        assert resolve_dataset(spec, root) == dv, spec
    assert resolve_dataset("g/v2", root) == dv2  # an explicit version still wins
    with pytest.raises(StageError, match="no published version found"):
        resolve_dataset("h", root)
    with pytest.raises(StageError, match="no published version"):
        resolve_dataset("g/broken", root)
    if root.is_local:  # a relative directory, found from the working directory
        monkeypatch.chdir(root.local)
        assert resolve_dataset("g/v1", "/nonexistent") == dv


# ---- a writer killed in the middle of a publish -------------------------------------------------


@pytest.mark.parametrize("kill_at", ["writing", "before_record", "after_record", "random-1", "random-2"])
def test_sigkill_during_a_publish_to_s3_leaves_every_version_intact(s3_root: StoreURI, kill_at: str) -> None:
    import random

    files, size = 6, 400_000
    big = {"files": files, "size": size}
    v1 = write_dataset(s3_root, "g", np.array([0, 1, 2]), np.array([1, 2, 0]), version="v1")
    pub = StagePublisher(v1, STAGE, {"tag": "A", **big}, depends=["ingest"])
    with pub:
        for i in range(files):
            v1.store.write_bytes(pub.tmp / f"part-{i:05d}.bin", b"A" * size)
        pub.commit()
    set_latest(v1)
    v2 = write_dataset(s3_root, "g", np.array([0, 1]), np.array([1, 0]), version="v2")
    latest = v1.store.read_bytes(s3_root / "g" / "LATEST")

    def intact() -> dict[str, str]:
        assert v1.store.read_bytes(s3_root / "g" / "LATEST") == latest
        resolved = resolve_dataset("g", s3_root)
        assert resolved == v1
        tags = {}
        for v in list_versions(s3_root, "g"):
            d = DatasetVersion(s3_root, "g", v)
            m = read_manifest(d)
            assert d.store.read_table(d.edges).num_rows == m.schema["num_edges"]
            if STAGE in m.stages:
                tags[v] = check_output(d)
        return tags

    assert intact() == {"v1": "A"}
    proc = start_writer(v1, "B", None if kill_at.startswith("random") else kill_at, files=files, size=size)
    if kill_at.startswith("random"):
        wait_for(proc, "attempt")
        time.sleep(random.Random(kill_at).uniform(0.0, 0.4))
    else:
        wait_for(proc, kill_at)
    kill(proc)
    assert list_versions(s3_root, "g") == ["v1", "v2"]
    tags = intact()
    assert tags["v1"] in ("A", "B")
    if kill_at == "after_record":
        assert tags["v1"] == "B"
    elif kill_at in ("writing", "before_record"):
        assert tags["v1"] == "A"
    # a re-run completes: the killed run's attempt is removed, the output is whole
    again = StagePublisher(v1, STAGE, {"tag": "B", **big}, depends=["ingest"])
    if not again.is_current():
        with again:
            for i in range(files):
                v1.store.write_bytes(again.tmp / f"part-{i:05d}.bin", b"B" * size)
            again.commit()
    assert intact() == {"v1": "B"}
    cur = read_manifest(v1).stages[STAGE].path.rsplit("/", 1)[-1]
    assert all(
        a == cur or not v1.store.exists(v1.stage_dir(STAGE) / a / LEASE) for a in attempts(v1)
    )  # no killed writer's attempt is left leased
    assert read_manifest(v2).version == "v2"


def test_an_identical_run_in_progress_is_waited_for_not_repeated(dv: DatasetVersion, capsys) -> None:
    """A second run with the same fingerprint waits for the first's claim and finds its record: no second
    record, no work done twice. A run with other parameters does not wait; a dead holder's claim is taken."""
    from glisp_core.dataset.publish import RUNNING

    first = StagePublisher(dv, STAGE, {"tag": "A"}, depends=["ingest"])
    assert first.claim()
    seen: dict[str, bool] = {}

    def second_run() -> None:
        second = StagePublisher(dv, STAGE, {"tag": "A"}, depends=["ingest"])
        seen["current"] = second.is_current()
        seen["claimed"] = second.claim(poll_s=0.05)

    t = threading.Thread(target=second_run)
    t.start()
    time.sleep(0.5)
    assert t.is_alive(), seen  # waiting on the first run's claim
    assert StagePublisher(dv, STAGE, {"tag": "B"}, depends=["ingest"]).claim()  # other parameters: no wait
    with first:
        write_output(first, "A")
        first.commit()
    t.join(30)
    assert seen == {"current": False, "claimed": False}
    assert records(dv) == ["00000001.json"] and check_output(dv) == "A"
    assert "an identical run is in progress" in capsys.readouterr().out

    claim = dv.path / RUNNING / f"{STAGE.replace('/', '--')}.json"
    dv.store.write_bytes(claim, json.dumps(lease_doc("glisp x", 60.0, fingerprint="f") | {"pid": dead_pid()}).encode())
    again = StagePublisher(dv, STAGE, {"tag": "C"}, depends=["ingest"])
    assert again.claim()  # the holder died: its claim does not hold anyone up
    again.abort()
    assert not dv.store.exists(claim)


def test_a_stage_that_failed_as_the_store_stopped_answering_asks_nothing_more_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the store stopped answering, removing the attempt and the claim would wait out the store's limits
    again for each call (minutes with the defaults), then fail the same way: both are left, without a call, for
    the next run to remove (their holder gone). Any other failure removes them as before (a bare client error is
    not the store's verdict); ingest's attempt is left the same way."""
    from glisp_core.dataset.publish import RUNNING, VersionPublisher
    from glisp_core.storage.store import Store

    dv = write_dataset(parse_uri(tmp_path / "root"), "g", np.array([0, 1, 2, 2]), np.array([1, 2, 0, 3]))
    timeout = OSError("AWS Error NETWORK_CONNECTION during PutObject operation: curl code 28, Timeout was reached")
    stalled = dv.store.backend.failure(dv.path, "dataset.root", timeout)  # as a store call raises it
    assert stalled is not None
    claim = dv.path / RUNNING / f"{STAGE.replace('/', '--')}.json"

    def hangs(self: Store, uri: object) -> None:
        raise AssertionError(f"the store was asked to delete {uri} after it stopped answering")

    pub = StagePublisher(dv, STAGE, {"tag": "A"}, depends=["ingest"])
    assert pub.claim()
    with pytest.raises(OSError, match="did not answer within"), pub:
        write_output(pub, "A")
        left = pub.tmp.name
        monkeypatch.setattr(Store, "delete", hangs)
        raise stalled
    monkeypatch.undo()
    assert attempts(dv) == [left] and dv.store.exists(claim)  # for the next run, whose holder check finds us gone
    dv.store.delete(claim)  # this process still lives: the claim would hold for a run of the same parameters
    pub = StagePublisher(dv, STAGE, {"tag": "B"}, depends=["ingest"])
    assert pub.claim()
    with pytest.raises(OSError, match="Timeout was reached"), pub:
        write_output(pub, "B")
        mine = pub.tmp.name
        raise timeout  # a client's own words, not a store call's: the store may answer again, so clean up
    assert mine not in attempts(dv) and not dv.store.exists(claim)
    ing = VersionPublisher(dv.root, "g", "v9")
    first = ing._attempt.uri if ing._attempt else None
    assert first is not None
    with pytest.raises(OSError, match="Timeout"), ing:
        monkeypatch.setattr(Store, "delete", hangs)
        raise stalled
    monkeypatch.undo()
    assert dv.store.exists(first)
