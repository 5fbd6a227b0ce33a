"""Faults injected into real pipeline runs: a killed Spark JVM or driver in every stage, and a full disk.

Each run is a ``glisp pipeline`` subprocess with its own local Spark JVM, so a test can kill exactly
that JVM (or the whole driver) by PID while a stage is half-written. What must hold afterwards, every
time: the run exits non-zero naming the failing stage; every version and stage published before it is
byte-for-byte unchanged; whatever the manifest lists can be read; and a plain re-run completes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from glisp_core.dataset.layout import DatasetVersion, list_versions
from glisp_core.dataset.manifest import read_manifest
from glisp_core.dataset.stages import run_of
from glisp_core.dataset.versions import read_latest
from glisp_core.partition_format import open_partition
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri
from glisp_testing.graphs import rmat_edges
from tests.tiers import needs

STAGES = {  # where a stage's attempts appear, relative to the graph directory
    "ingest": re.compile(r"^[^/]+/ingest/@[^/]+/"),
    "partition": re.compile(r"^[^/]+/partition/[^/]+/@[^/]+/"),
    "serialize": re.compile(r"^[^/]+/serialize/[^/]+/@[^/]+/"),
    "reorder": re.compile(r"^[^/]+/reorder/[^/]+/[^/]+/@[^/]+/"),
}


def _write_edges(uri: StoreURI, seed: int) -> StoreURI:
    src, dst = rmat_edges(13, 6, seed=seed)
    text = "src,dst\n" + "\n".join(f"{s},{d}" for s, d in zip(src.tolist(), dst.tolist(), strict=True))
    store_for(uri).write_bytes(uri, text.encode())
    return uri


def _cmd(edges: StoreURI, root: StoreURI) -> list[str]:
    return [
        sys.executable,
        "-m",
        "glisp_app.cli",
        "pipeline",
        "--edges",
        str(edges),
        "--graph",
        "g",
        "--root",
        str(root),
        "--parts",
        "2",
        "--master",
        "local[2]",
        "--set",
        "spark.driver_memory='1g'",
        "--set",
        "partition.progress=false",
    ]


def _digest(uri: StoreURI) -> str:
    """One hash over every file below ``uri`` (names and bytes), so any change shows."""
    h, store = hashlib.sha256(), store_for(uri)
    for rel, _ in sorted(store.files(uri)):
        h.update(rel.encode())
        h.update(store.read_bytes(uri / rel))
    return h.hexdigest()


def _stage_digests(gdir: StoreURI) -> dict[tuple[str, str], tuple[str, str]]:
    """(version, stage) -> (record fingerprint, digest of its output) for everything published."""
    out = {}
    for v in list_versions(gdir.parent, gdir.name):
        m = read_manifest(DatasetVersion(gdir.parent, gdir.name, v))
        for name, rec in m.stages.items():
            if name != "ingest":  # ingest's output is the version itself, covered by the version digest
                out[(v, name)] = (rec.fingerprint, _digest(gdir / v / rec.path))
    return out


def _attempts(gdir: StoreURI, stage: str) -> set[str]:
    """The attempt prefixes of ``stage`` that hold at least one object (any version, published or not)."""
    found = (STAGES[stage].match(rel) for rel, _ in store_for(gdir).files(gdir))
    return {m.group(0) for m in found if m}


def _java_of(proc: subprocess.Popen) -> psutil.Process | None:
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    return next((k for k in kids if k.name() == "java"), None)


def _run_and_kill(cmd: list[str], gdir: StoreURI, stage: str, victim: str, timeout: float = 600) -> tuple[int, str]:
    """Start the pipeline, wait until ``stage`` writes into a new attempt, then SIGKILL the JVM or the driver."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    earlier, tree = _attempts(gdir, stage), []
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )
    try:
        deadline = time.time() + timeout
        while not _attempts(gdir, stage) - earlier:
            if proc.poll() is not None:
                pytest.fail(f"the pipeline ended before {stage} started staging:\n{proc.stdout.read()}")
            assert time.time() < deadline, f"{stage} did not start"
            time.sleep(0.02)
        if victim == "jvm":
            java, wait_until = _java_of(proc), time.time() + 60
            while java is None and time.time() < wait_until and proc.poll() is None:  # a lazy session starts late
                time.sleep(0.05)
                java = _java_of(proc)
            assert java is not None, "no Spark JVM under the pipeline process"
            tree = _tree(proc)  # Python workers leave the group (PySpark's daemon makes its own): killed below too
            java.kill()
        else:
            tree = _tree(proc)
            proc.kill()
        out, _ = proc.communicate(timeout=180)
        return proc.returncode, out
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # leave no orphan JVM behind
        except ProcessLookupError:
            pass
        _kill_all(tree)


def _tree(proc: subprocess.Popen) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _kill_all(procs: list[psutil.Process]) -> None:
    """The killed run ends whole: a Python worker it left behind would still write into its attempt while the
    re-run removes it, and leave litter the re-run cannot know about."""
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


def _check_consistent(gdir: StoreURI) -> None:
    """Everything the manifests list is there and readable; nothing unpublished is listed."""
    for v in list_versions(gdir.parent, gdir.name):
        dv = DatasetVersion(gdir.parent, gdir.name, v)
        m = read_manifest(dv)
        for name in m.stages:
            m.stage(name)  # raises on a missing output or one that is not the record's
        if not gdir.is_local:
            continue  # partitions in a bucket are opened by servers through their cache (tests/glisp_serving)
        for name in m.stages:
            if name.startswith("serialize/"):
                run = run_of(name)
                for k in range(m.stages[name].counts["parts"]):
                    open_partition(dv.partition_dir(run, k), verify=True)


@pytest.fixture(scope="module", params=["local", "s3"])
@needs("subprocess_jvm")
def published(tmp_path_factory, request):
    """A root holding one fully published version (snapshot A) that no later fault may touch; the root is a
    local directory, then a prefix of the S3 server's bucket (inputs in the bucket too). Published by the
    same command the faults interrupt, not in the test session's JVM: these tests then need no session, and
    run beside the Spark workers (docs/testing.md)."""
    if request.param == "local":
        root = parse_uri(tmp_path_factory.mktemp("faults") / "root")
    else:
        root = request.getfixturevalue("new_s3_root")("faults") / "root"
    a = _write_edges(root.parent / "in" / "snapshot-a.csv", seed=1)
    b = _write_edges(root.parent / "in" / "snapshot-b.csv", seed=2)
    done = subprocess.run(_cmd(a, root), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root / "g", DatasetVersion(root, "g", read_latest(root / "g")), b


def test_killed_jvm_or_driver_in_every_stage_loses_nothing_and_a_rerun_completes(published, jvm_processes):
    gdir, dv_a, snapshot_b = published
    before_a = _digest(dv_a.path)
    cmd = _cmd(snapshot_b, gdir.parent)
    kills = (("ingest", "jvm"), ("partition", "jvm"), ("serialize", "driver"), ("reorder", "jvm"))
    if not gdir.is_local:  # the store's half of the protocol: a driver killed while it writes to the bucket
        kills = (("ingest", "driver"), ("serialize", "driver"))
    for stage, victim in kills:
        published_before = _stage_digests(gdir)
        rc, out = _run_and_kill(cmd, gdir, stage, victim)
        assert rc != 0, out
        if victim == "jvm":  # the driver survives to say which stage failed and why
            assert f"pipeline stage '{stage}' failed" in out and "JVM" in out, out[-2000:]
            assert f"glisp pipeline: stage={stage} status=failed seconds=" in out, out[-2000:]  # structured progress
        assert _digest(dv_a.path) == before_a, f"snapshot A changed after a kill in {stage}"
        assert read_latest(gdir) == dv_a.version  # a failed refresh never moves latest
        after = _stage_digests(gdir)
        for key, d in published_before.items():  # every stage published before the kill is untouched
            assert after.get(key) == d, f"{key} changed after a kill in {stage}"
        _check_consistent(gdir)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert all(f"glisp pipeline: stage={s} status=done" in done.stdout for s in ("ingest", "partition", "reorder"))
    versions = list_versions(gdir.parent, "g")
    assert len(versions) == 2 and _digest(dv_a.path) == before_a
    dv_b = DatasetVersion(gdir.parent, "g", next(v for v in versions if v != dv_a.version))
    m = read_manifest(dv_b)
    for name in ("ingest", "partition/adadne-p2", "serialize/adadne-p2", "reorder/adadne-p2/pds"):
        m.stage(name)
    _check_consistent(gdir)
    assert read_latest(gdir) == dv_b.version  # moved once every stage of B was published
    assert not _unnamed_attempts(gdir), _unnamed_attempts(gdir)  # the re-run removed what the kills left


def _unnamed_attempts(gdir: StoreURI) -> list[str]:
    """Attempt prefixes of published versions that no current record names (a killed writer's litter)."""
    out = []
    for v in list_versions(gdir.parent, gdir.name):
        named = {rec.path for rec in read_manifest(DatasetVersion(gdir.parent, gdir.name, v)).stages.values()}
        found = {m.group(0).rstrip("/") for stage in STAGES for m in map(STAGES[stage].match, _files(gdir)) if m}
        out += [a for a in sorted(found) if a.startswith(f"{v}/") and a[len(v) + 1 :] not in named]
    return out


def _files(gdir: StoreURI) -> list[str]:
    return [rel for rel, _ in store_for(gdir).files(gdir)]


_LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\dT\S+ ")  # a Spark (log4j) record's first line
_OWN = ("glisp ", "ingest", "big-rc=", "versions ", "leftover ", "WARNING:")


def _own_lines(lines: list[str]) -> list[str]:
    """The output without Spark's own log records (a failed task's record quotes the worker's Python
    traceback; that is Spark's log, not what glisp prints)."""
    keep, in_record = [], False
    for ln in lines:
        if _LOG_RECORD.match(ln):
            in_record = True
            continue
        if ln.startswith(_OWN):
            in_record = False
        if not in_record:
            keep.append(ln)
    return keep


def test_full_disk_ends_with_a_clean_error_and_no_corrupt_version(tmp_path, jvm_processes):
    """A 2 MiB file system: a small graph fits, the next snapshot does not."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a small private tmpfs")
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m none {tmp_path}"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private tmpfs here: {probe.stderr.decode().strip()}")
    small = tmp_path / "in" / "small.csv"
    small.parent.mkdir()
    small.write_text("src,dst\n" + "\n".join(f"{i},{i + 1}" for i in range(200)))
    big = tmp_path / "in" / "big.csv"
    src, dst = rmat_edges(14, 16, seed=3)  # 262k edges: far more than the disk holds
    np.savetxt(big, np.stack([src, dst], axis=1), fmt="%d", delimiter=",", header="src,dst", comments="")
    disk = tmp_path / "disk"
    disk.mkdir()
    root = disk / "root"
    common = ["--root", str(root), "--master", "local[2]", "--set", "spark.driver_memory=1g"]
    repo = str(Path(__file__).resolve().parent.parent)
    check = (
        f"import sys; sys.path.insert(0, {repo!r})\n"
        "from glisp_core.dataset.layout import list_versions, resolve_dataset\n"
        "from glisp_core.dataset.manifest import read_manifest\n"
        f"dv = resolve_dataset('small', {str(root)!r}); m = read_manifest(dv); m.stage('ingest')\n"
        "import pyarrow.parquet as pq; assert pq.read_table(str(dv.edges)).num_rows == 200\n"
        "print('versions', list_versions(dv.root, 'small'), list_versions(dv.root, 'big'))\n"
    )
    # both ingests in one process (one JVM), each through the CLI's own entry point and exit code
    ingests = (
        f"import sys; sys.path.insert(0, {repo!r}); from glisp_app.cli import main\n"
        f"assert main(['ingest', '--edges', {str(small)!r}, '--graph', 'small', *{common!r}]) == 0\n"
        f"rc = main(['ingest', '--edges', {str(big)!r}, '--graph', 'big', *{common!r}])\n"
        "sys.stdout.flush(); sys.stderr.flush(); print(f'big-rc={rc}', flush=True)\n"
    )
    script = " && ".join(
        [
            f"mount -t tmpfs -o size=1m none {disk}",
            f'{sys.executable} -c "$INGESTS"',
            f'{sys.executable} -c "$CHECK"',
            f"find {root}/big -name '@*' | sed 's/^/leftover /'",
        ]
    )
    env = dict(os.environ, PYTHONUNBUFFERED="1", CHECK=check, INGESTS=ingests)
    res = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "big-rc=1" in out, out[-4000:]
    assert "no space left on device" in out.lower(), out[-4000:]
    lines = out.splitlines()
    assert any(ln.startswith("glisp ingest: error: no space left on device") for ln in lines), out[-4000:]
    assert "Traceback" not in "\n".join(_own_lines(lines)), out[-4000:]  # a clean error, not a stack trace
    assert "versions [" in out and "] []" in out, out[-4000:]  # the small graph intact, no 'big' version
    assert "leftover" not in out, out[-4000:]
    print(next(ln for ln in out.splitlines() if "error:" in ln))


def test_failure_reason_names_known_causes():
    from glisp_core.errors import failure_reason

    class Py4JNetworkError(Exception):
        pass

    assert failure_reason(Py4JNetworkError("Answer from Java side is empty")).startswith("the Spark JVM died")

    class Py4JError(Exception):
        pass

    # the JVM died between two calls: py4j logs the socket error and raises a bare error (seen in a kill test)
    bare = Py4JError("An error occurred while calling o33.getLocalProperty")
    assert failure_reason(bare).startswith("the Spark JVM died or stopped answering")
    static = Py4JError("An error occurred while calling z:org.apache.spark.sql.catalyst.trees.PySparkCurrentOrigin.set")
    assert failure_reason(static).startswith("the Spark JVM died or stopped answering")  # seen in a kill test

    class Py4JJavaError(Exception):
        pass

    java = Py4JJavaError("An error occurred while calling o12.collect.\n: java.lang.IllegalStateException: bad")
    assert not failure_reason(java).startswith("the Spark JVM died")  # a Java exception is not a dead JVM
    try:  # a known cause deep in the chain is found
        try:
            raise Py4JNetworkError("Error while sending or receiving")
        except Py4JNetworkError as inner:
            raise RuntimeError("wrapper") from inner
    except RuntimeError as outer:
        try:
            raise ValueError("outermost") from outer
        except ValueError as top:
            assert failure_reason(top).startswith("the Spark JVM died (")
    e = RuntimeError("Job aborted.\n  at x\nCaused by: java.io.IOException: No space left on device\n  at y")
    assert failure_reason(e).startswith("no space left on device (Caused by: java.io.IOException")
    assert failure_reason(ValueError("plain")) == "ValueError: plain"
