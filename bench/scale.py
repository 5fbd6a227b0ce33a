"""Scale ladder: every stage of GLISP as a user runs it, on R-MAT graphs of growing size, with fitted exponents.

One R-MAT graph per rung (default scales 20, 22, 23, edge factor 16, --features-d features, 8 classes), taken
through the pipeline with the ``glisp`` CLI, each stage its own process, default configuration but the root:

- ``generate*``: ``glisp generate rmat --format parquet`` (the input files; input preparation, marked ``*``);
- ``ingest``; ``partition-p8`` and ``partition-p32`` (AdaDNE, runs adadne-p8 and adadne-p32);
- ``serialize`` and ``reorder`` (PDS) of adadne-p8;
- ``serve``: ``glisp serve-cluster`` of adadne-p8 in the background, timed until its cluster file exists and
  every server answers grpc.health SERVING; stopped with SIGTERM after training and after a client that only
  samples (as the trainer does, three windows of 8 s: the service's own rate, recorded on this line);
- ``train``: ``glisp train --cluster``: node task, SAGE, fanouts 15,10, batch 1024, one epoch of at most
  --train-steps batches (``train.max_batches``); the sampling rate (sampled edges and trees per second of the
  epoch) comes from the published record;
- ``infer``: ``glisp infer --incremental`` over every vertex (a full run drawing stable samples: a refresh can
  copy rows only from such a run, docs/inference.md);
- ``refresh-input*``: the snapshot with 1% of the edge rows changed, half removed uniformly, half added with
  degree-proportional endpoints (``bench/incremental.change`` per Parquet batch of the generated files, in
  numpy, in a process of its own: the generator's rows are independent R-MAT draws, so a batch's endpoints
  sample the degrees; the vertex files are the first snapshot's);
- ``refresh-ingest``, ``refresh-partition`` (``--incremental`` from the first version), ``refresh-serialize``,
  ``refresh-reorder``, ``refresh-infer`` (``--incremental``; ``glisp infer`` carries the model trained on the
  first version into the new one, as ``glisp pipeline`` does);
- ``refresh2-*``: a second refresh, of the first refresh's snapshot changed again (another seed), from the
  first refresh's version (``--refreshes``): a scheduled refresh's steady state, where inference can predict
  its fallback from the refresh before it (docs/inference.md).

The report ends with each refresh against the fresh run, stage by stage and in total.

Per stage and rung: wall seconds (from the CLI's start, after the lock); edges/s/core (edges of the rung / wall
/ os.cpu_count()); peak RSS sampled from /proc every 0.2 s over the stage's process tree: the driver (the CLI's
python), the JVM, Spark's Python workers (largest sum and largest one), each server, the trainer; storage-layer
bytes read and written by the whole tree (/proc/<pid>/io: a child reaped by this process adds its counters to
ours, this process adopts orphans such as a JVM that outlives its driver, and the workers PySpark's daemon
forks, which the kernel reaps, count as last sampled; page-cache hits are no reads), and the size of the
published output; Spark jobs and shuffle bytes from Spark's event log (``--set spark.conf={...}``).

Each stage runs under ``flock --lock`` (the benches' lock, held per stage; serve and train share one hold).
Results go to ``<root>/scale-results.jsonl``, one line per (rung, stage); a rerun skips every stage that has
a line and reuses its outputs. At the end (or with --report alone) one table, the fitted exponents (least
squares of log seconds and log peak memory on log edges over the rungs present) and ``<root>/scale.png``.

    nice -n 10 .venv/bin/python bench/scale.py                                        # rungs 20, 22, 23
    nice -n 10 .venv/bin/python bench/scale.py --scales 12 13 --root /tmp/scale-dev  # a quick check
    .venv/bin/python bench/scale.py --root /tmp/scale-dev --report
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.incremental import change  # noqa: E402
from bench.ingest import print_table  # noqa: E402
from bench.proc_memory import Sampler  # noqa: E402

MB = 2**20
CORES = os.cpu_count() or 1
RUN8, RUN32 = "adadne-p8", "adadne-p32"
MODEL = f"node-sage-{RUN8}"
STAGES = [
    "generate",
    "ingest",
    "partition-p8",
    "partition-p32",
    "serialize",
    "reorder",
    "serve",
    "train",
    "infer",
    "refresh-input",
    "refresh-ingest",
    "refresh-partition",
    "refresh-serialize",
    "refresh-reorder",
    "refresh-infer",
    "refresh2-input",
    "refresh2-ingest",
    "refresh2-partition",
    "refresh2-serialize",
    "refresh2-reorder",
    "refresh2-infer",
]
PREP = {"generate", "refresh-input", "refresh2-input"}  # input preparation: timed, marked
REFRESHED = ("ingest", "partition", "serialize", "reorder", "infer")  # a refresh's stages, each against the fresh one
IO_SOURCE = "/proc/<pid>/io read_bytes/write_bytes of the stage's process tree (storage layer)"
LIVE: set[int] = set()  # stage processes this script started and still waits for (never reaped by settle)
REAPED: set[int] = set()  # adopted processes settle reaped: their I/O is in ours already


# ---- the process tree: roles, peak RSS, adopted orphans, I/O ------------------------------------------------
def _subcommand(cmd: list[str]) -> str:
    """The glisp subcommand of a command line (``python -m glisp_app.cli serve ...``, ``.../bin/glisp train``)."""
    for i, a in enumerate(cmd[:-1]):
        if a == "glisp_app.cli" or a.endswith("/glisp"):
            return cmd[i + 1]
    return ""


def _role(pid: int, info: dict[int, tuple[int, str, list[str], float]]) -> str:
    """jvm, worker (a Python under the JVM; ``daemon-child``: one PySpark's daemon forked), server, driver (any
    other Python: the CLI, serve-cluster, the trainer) or ''."""
    ppid, name, cmd, _ = info[pid]
    if name.startswith("java"):
        return "jvm"
    if name.startswith("glisp p"):  # a server serve-cluster forked (glisp_serving.cluster.forked.process_name)
        return "server"
    if not cmd or "python" not in Path(cmd[0]).name:
        return ""  # flock, a shell
    up = ppid
    while up in info:
        if info[up][1].startswith("java"):
            return "daemon-child" if "pyspark.daemon" in " ".join(info[ppid][2]) else "worker"
        up = info[up][0]
    if ppid in info and info[ppid][2] == cmd:
        return ""  # a fork about to exec another program (a server's ctypes.util.find_library): the parent's pages
    return "server" if _subcommand(cmd) == "serve" else "driver"


@dataclass
class Peaks:
    """Peak RSS in MB per role of one process tree (``workers``: the largest sum at one sample)."""

    driver: float = 0.0
    jvm: float = 0.0
    workers: float = 0.0
    worker_max: float = 0.0
    servers: dict[int, float] = field(default_factory=dict)
    total: float = 0.0  # the largest sum over the whole tree at one sample


class TreeSampler(Sampler):
    """``with TreeSampler(pid) as s: ...``: peak RSS per role of ``pid`` and its descendants, every ``interval`` s.

    Why: ``ru_maxrss`` sees one process; a stage is a CLI driver, a JVM, Python workers, servers. Also the last
    I/O counters seen of every Python worker PySpark's daemon forked: the daemon ignores SIGCHLD, so the kernel
    reaps them without adding their counters to any parent's (their writes after the last sample are missed)."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        super().__init__(interval)
        self.pid = pid
        self.peaks = Peaks()
        self.unreaped_io: dict[int, tuple[int, int]] = {}

    def sample(self) -> None:
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        info: dict[int, tuple[int, str, list[str], float]] = {}
        for p in procs:
            try:
                info[p.pid] = (p.ppid(), p.name(), p.cmdline(), p.memory_info().rss / MB)
            except psutil.Error:
                continue  # ended between listing and reading it
        pk, workers = self.peaks, 0.0
        for p in procs:
            role = _role(p.pid, info) if p.pid in info else ""
            rss = info[p.pid][3] if role else 0.0
            if role == "daemon-child":
                try:
                    io = p.io_counters()
                    self.unreaped_io[p.pid] = (io.read_bytes, io.write_bytes)
                except psutil.Error:
                    pass
            if role in ("worker", "daemon-child"):
                workers += rss
                pk.worker_max = max(pk.worker_max, rss)
            elif role == "server":
                pk.servers[p.pid] = max(pk.servers.get(p.pid, 0.0), rss)
            elif role in ("driver", "jvm"):
                setattr(pk, role, max(getattr(pk, role), rss))
        pk.workers = max(pk.workers, workers)
        pk.total = max(pk.total, sum(v[3] for v in info.values()))


def adopt_orphans() -> None:
    """Become the subreaper of the stages' processes: a JVM outliving its driver stays ours, so a stage ends when
    it exits (its event log is complete then) and its I/O counters add to ours when we reap it."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def settle(timeout: float = 180.0) -> list[int]:
    """Wait for (and reap) every adopted process, except the stage processes in LIVE; returns those still left."""
    end = time.monotonic() + timeout
    while True:
        left = []
        for c in psutil.Process().children():
            if c.pid in LIVE:
                continue
            try:
                if c.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(c.pid, 0)
                    REAPED.add(c.pid)
                else:
                    left.append(c.pid)
            except (psutil.Error, ChildProcessError):
                pass
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.2)


def self_io() -> tuple[int, int]:
    """This process's storage-layer bytes read and written, the descendants it (or they) reaped included."""
    d = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(d["read_bytes"]), int(d["write_bytes"])


def tree_io(before: tuple[int, int], *samplers: TreeSampler) -> tuple[int, int]:
    """Bytes read and written since ``before`` by everything reaped into this process, plus the PySpark workers
    the samplers saw (reaped by the kernel)."""
    now = self_io()
    extra = [v for s in samplers for pid, v in s.unreaped_io.items() if pid not in REAPED]
    return now[0] - before[0] + sum(r for r, _ in extra), now[1] - before[1] + sum(w for _, w in extra)


def dir_bytes(path: Path) -> int:
    """Bytes of the files under ``path``: a published stage's output."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


# ---- Spark's event log ---------------------------------------------------------------------------------------
def spark_set(evdir: Path) -> str:
    """``--set spark.conf={...}`` (a TOML inline table, as tests/cluster/test_standalone.py) logging events to
    ``evdir``, uncompressed."""
    conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": evdir.as_uri(), "spark.eventLog.compress": "false"}
    return "spark.conf={" + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in conf.items()) + "}"


def spark_events(evdir: Path) -> dict[str, int]:
    """Applications, jobs (SparkListenerJobStart) and shuffle bytes (SparkListenerTaskEnd) logged under ``evdir``."""
    out = {"apps": 0, "jobs": 0, "shuffle_write_bytes": 0, "shuffle_read_bytes": 0}
    for f in sorted(evdir.rglob("*")):
        if not f.is_file() or f.name.startswith((".", "appstatus")):
            continue
        with f.open(errors="replace") as fh:
            for line in fh:
                if '"SparkListenerJobStart"' in line:
                    out["jobs"] += 1
                elif '"SparkListenerApplicationStart"' in line:
                    out["apps"] += 1
                elif '"SparkListenerTaskEnd"' in line:
                    m = json.loads(line).get("Task Metrics") or {}
                    w, r = m.get("Shuffle Write Metrics", {}), m.get("Shuffle Read Metrics", {})
                    out["shuffle_write_bytes"] += int(w.get("Shuffle Bytes Written", 0))
                    out["shuffle_read_bytes"] += int(r.get("Remote Bytes Read", 0)) + int(r.get("Local Bytes Read", 0))
    return out


# ---- one stage: a CLI process under the lock -----------------------------------------------------------------
class StageFailed(RuntimeError):
    pass


@dataclass
class Bench:
    root: Path
    lock: str
    glisp: list[str]
    results: dict[tuple[str, str], dict[str, Any]]

    def log_path(self, rung: str, stage: str) -> Path:
        return self.root / "_logs" / rung / f"{stage}.log"


@dataclass
class Measured:
    cmd: list[str]
    wall_s: float
    lock_wait_s: float
    peaks: Peaks
    read_bytes: int = 0
    write_bytes: int = 0
    spark: dict[str, int] = field(default_factory=dict)
    output: str = ""


def glisp_argv(b: Bench, rung: str, stage: str, argv: list[str], spark: bool) -> list[str]:
    """``glisp ARGV --root ROOT``; with Spark's event log in a fresh directory of the stage when it runs Spark."""
    cmd = [*b.glisp, *argv, "--root", str(b.root)]
    if spark:
        evdir = b.root / "_eventlog" / rung / stage
        shutil.rmtree(evdir, ignore_errors=True)  # a failed attempt's applications are not this run's
        evdir.mkdir(parents=True)
        cmd += ["--set", spark_set(evdir)]
    return cmd


def launch(b: Bench, rung: str, stage: str, cmd: list[str], locked: bool = True) -> subprocess.Popen:
    """Start ``cmd`` under ``flock LOCK`` (the lock held for its life), its output into the stage's log."""
    log = b.log_path(rung, stage)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        proc = subprocess.Popen((["flock", b.lock] if b.lock and locked else []) + cmd, stdout=fh, stderr=fh)
    LIVE.add(proc.pid)
    return proc


def started(proc: subprocess.Popen, t0: float) -> float:
    """When the CLI itself started: flock's child appears once the lock is ours (waiting for it is not timed)."""
    if not isinstance(proc.args, list) or proc.args[0] != "flock":
        return t0
    while proc.poll() is None:
        try:
            if psutil.Process(proc.pid).children():
                return time.perf_counter()
        except psutil.Error:
            break
        time.sleep(0.02)
    return time.perf_counter()


def finish(b: Bench, rung: str, stage: str, proc: subprocess.Popen, cmd: list[str]) -> str:
    """Reap the stage and what it left behind; its output, or StageFailed with the command and the log's tail."""
    rc = proc.wait()
    LIVE.discard(proc.pid)
    left = settle()
    if left:
        print(f"  warning: processes {left} of {rung} {stage} still running", flush=True)
    text = b.log_path(rung, stage).read_text(errors="replace")
    if rc != 0:
        tail = "\n".join(text.splitlines()[-25:])
        raise StageFailed(f"{rung} {stage} exited with {rc}: {shlex.join(cmd)}\n{tail}")
    return text


def run_cmd(b: Bench, rung: str, stage: str, cmd: list[str], spark: bool, locked: bool = True) -> Measured:
    """One stage: wall time from the command's start, peaks over its tree, its I/O once all of it is reaped, its
    Spark jobs and shuffle bytes."""
    REAPED.clear()  # a pid reaped in an earlier stage may be reused in this one
    before = self_io()
    t0 = time.perf_counter()
    proc = launch(b, rung, stage, cmd, locked)
    with TreeSampler(proc.pid) as s:
        t1 = started(proc, t0)
        text = finish(b, rung, stage, proc, cmd)
        wall = time.perf_counter() - t1
    rd, wr = tree_io(before, s)
    ev = spark_events(b.root / "_eventlog" / rung / stage) if spark else {}
    return Measured(cmd, wall, t1 - t0, s.peaks, rd, wr, ev, text)


def run_cli(b: Bench, rung: str, stage: str, argv: list[str], spark: bool = True, locked: bool = True) -> Measured:
    """``glisp ARGV`` as one stage."""
    return run_cmd(b, rung, stage, glisp_argv(b, rung, stage, argv, spark), spark, locked)


# ---- serve-cluster and training through it -------------------------------------------------------------------
def wait_serving(proc: subprocess.Popen, cluster_file: Path, timeout: float = 900.0) -> int:
    """Until the cluster file exists and every server in it answers grpc.health SERVING; the number of servers."""
    from glisp_serving.cluster.supervisor import wait_healthy

    end = time.monotonic() + timeout
    while not cluster_file.exists():
        if proc.poll() is not None or time.monotonic() > end:
            raise StageFailed(f"serve-cluster exited with {proc.poll()} or wrote no cluster file in {timeout:.0f} s")
        time.sleep(0.05)
    addrs = [a for part in json.loads(cluster_file.read_text())["addresses"] for a in part]
    for a in addrs:
        wait_healthy(a, time.time() + max(1.0, end - time.monotonic()), None)
    return len(addrs)


def stop_serving(proc: subprocess.Popen) -> None:
    """SIGTERM to serve-cluster itself (flock does not forward signals); SIGKILL after two minutes."""
    try:
        kids = [p for p in psutil.Process(proc.pid).children() if _subcommand(p.cmdline()) == "serve-cluster"]
    except psutil.Error:
        kids = []
    target = kids[0].pid if kids else proc.pid
    if proc.poll() is None:
        os.kill(target, signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.kill(target, signal.SIGKILL)


def serve_and_train(b: Bench, rung: str, dataset: str, steps: int) -> tuple[Measured, Measured, dict[str, Any]]:
    """serve-cluster in the background (under the lock for its whole life), training through it (no lock of its
    own: serve's holds); the servers' peaks over the serve's life and during training."""
    cf = b.root / "_cluster" / f"{rung}.json"
    cf.parent.mkdir(parents=True, exist_ok=True)
    cf.unlink(missing_ok=True)
    argv = ["serve-cluster", dataset, "--run", RUN8, "--cluster-file", str(cf)]
    train = ["train", "--cluster", str(cf), "--task", "node", "--model", "sage", "--fanouts", "15,10"]
    train += ["--batch-size", "1024", "--epochs", "1", "--set", f"train.max_batches={steps}", "--force"]
    before = self_io()
    t0 = time.perf_counter()
    cmd = glisp_argv(b, rung, "serve", argv, spark=False)
    proc = launch(b, rung, "serve", cmd)
    try:
        with TreeSampler(proc.pid) as life:
            t1 = started(proc, t0)
            servers = wait_serving(proc, cf)
            serve_s = time.perf_counter() - t1
            with TreeSampler(proc.pid) as during:
                tm = run_cli(b, rung, "train", train, spark=False, locked=False)
            alone, sampler = service_rate(b, rung, cf)
            t2 = time.perf_counter()
            stop_serving(proc)
            stop_s = time.perf_counter() - t2
    finally:
        if proc.poll() is None:
            stop_serving(proc)
    text = finish(b, rung, "serve", proc, cmd)
    rd, wr = tree_io(before, life)
    tm.peaks.servers = during.peaks.servers
    rd, wr = rd - tm.read_bytes - sampler.read_bytes, wr - tm.write_bytes - sampler.write_bytes  # children of ours
    sm = Measured(cmd, serve_s, t1 - t0, life.peaks, rd, wr, {}, text)
    return sm, tm, {"servers": servers, "stop_s": round(stop_s, 2), **alone}


def service_rate(b: Bench, rung: str, cf: Path) -> tuple[dict[str, Any], Measured]:
    """The service's own rate (``--service-rate`` in a child), and the child's measure (its I/O is not the
    serve stage's): the trainer's rate also pays its forward and backward on the same cores, so it says little
    of the service by itself."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--service-rate", str(cf)]
    m = run_cmd(b, rung, "sample", cmd, spark=False, locked=False)
    return json.loads(m.output.strip().splitlines()[-1]), m


def sample_windows(cf: str, windows: int = 3, window_s: float = 8.0) -> dict[str, Any]:
    """A client that only samples, as the trainer does (fanouts 15,10, batch 1024, features and labels, prefetch
    2, in-neighbours, seeds a random permutation of the vertices), windows of at least ``window_s`` and 20 batches
    after two warm-up batches: the median window's sampled edges/s and distinct input vertices/s, and the median
    batch's sampled edges and distinct inputs. A batch's cost follows its distinct inputs (features read, ids
    routed and merged), which grow with the graph as the seeds' neighbourhoods overlap less."""
    from glisp_core.config import ClientConfig
    from glisp_serving.client.sampling_client import SamplingClient

    rates: list[float] = []
    per_s: list[float] = []
    inputs: list[int] = []
    edges_of: list[int] = []
    with SamplingClient(cf, ClientConfig(prefetch=2), direction="in") as client:  # train.direction's default
        seeds, pos = np.random.default_rng(7).permutation(client.backend.num_vertices), 0
        for w in range(windows):
            it = client.loader(np.roll(seeds, -pos)[: 1024 * 2000], 1024, [15, 10], shuffle=False, seed=w)
            next(it)
            next(it)
            t0, n, done, first = time.perf_counter(), 0, 0, len(inputs)
            for batch in it:
                n, done = n + 1, done + len(batch.seeds)
                inputs.append(len(batch.input_ids))
                edges_of.append(int(batch.num_sampled_edges))
                if n >= 20 and time.perf_counter() - t0 >= window_s:
                    break
            dt = time.perf_counter() - t0
            rates.append(round(sum(edges_of[first:]) / dt, 1))
            per_s.append(round(sum(inputs[first:]) / dt, 1))
            it.close()
            pos += done + 2048
    return {
        "service_edges_per_s": float(np.median(rates)),
        "service_windows": rates,
        "service_inputs_per_s": float(np.median(per_s)),
        "inputs_per_batch": int(np.median(inputs)),
        "edges_per_batch": int(np.median(edges_of)),
    }


# ---- the changed snapshot --------------------------------------------------------------------------------------
def write_refresh_inputs(src: Path, out: Path, frac: float, batch_rows: int = 1 << 22, seed: int = 1) -> dict[str, Any]:
    """The changed snapshot's input files: ``change`` per Parquet batch of each generated edge file (written as it
    goes), the same vertex files; ``ingest.toml`` last, so its presence means the files are complete."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.rmtree(out, ignore_errors=True)
    (out / "edges").mkdir(parents=True)
    rows = changed = 0
    for i, f in enumerate(sorted((src / "edges").glob("*.parquet"))):
        pf = pq.ParquetFile(f)
        schema = pf.schema_arrow.remove_metadata()
        if schema.names != ["src", "dst"]:
            raise StageFailed(f"{f}: expected the generator's columns src, dst (got {schema.names})")
        with pq.ParquetWriter(out / "edges" / f"part-{i:05d}.parquet", schema) as w:
            for j, batch in enumerate(pf.iter_batches(batch_size=batch_rows)):
                rng = np.random.default_rng([seed, i, j])
                s, d = change(batch.column(0).to_numpy(), batch.column(1).to_numpy(), frac, rng)
                w.write_table(pa.Table.from_arrays([pa.array(s), pa.array(d)], schema=schema))
                rows += len(s)
                changed += 2 * int(round(batch.num_rows * frac / 2))
    toml = (src / "ingest.toml").read_text()
    old, new = (f"path = {json.dumps(str(d / 'edges'))}" for d in (src, out))
    if toml.count(old) != 1:
        raise StageFailed(f"{src / 'ingest.toml'}: no single line {old!r}")
    (out / "ingest.toml").write_text(toml.replace(old, new))
    return {"edge_rows": rows, "changed_rows": changed}


def refresh_input(
    b: Bench, rung: str, src: Path, out: Path, frac: float, k: int = 1
) -> tuple[Measured, dict[str, Any]]:
    """Input preparation as a stage of its own: this script in a child process (``--write-refresh``)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--write-refresh", str(src), str(out), str(frac), str(k)]
    m = run_cmd(b, rung, f"{refresh_prefix(k)}input", cmd, spark=False)
    return m, json.loads(m.output.strip().splitlines()[-1])


# ---- records of the published stages ---------------------------------------------------------------------------
def stage_record(root: Path, dataset: str, name: str) -> tuple[Any, Any]:
    """The version and the published record of stage ``name``."""
    from glisp_core.dataset.layout import resolve_dataset
    from glisp_core.dataset.manifest import read_manifest

    dv = resolve_dataset(dataset, str(root))
    return dv, read_manifest(dv).stage(name)


def published(root: Path, dataset: str, name: str) -> tuple[int, Any]:
    """Bytes of the stage's published attempt, and its record."""
    dv, rec = stage_record(root, dataset, name)
    return dir_bytes(Path(dv.path.local) / rec.path), rec


def version_of(output: str, root: Path, graph: str) -> str:
    """The version ``glisp ingest`` printed (its directory, on a line of its own)."""
    m = re.findall(rf"^{re.escape(str(root / graph))}/(\S+)\s*$", output, re.M)
    if not m:
        raise StageFailed(f"glisp ingest printed no version directory under {root / graph}")
    return m[-1]


def train_extra(rec: Any) -> dict[str, Any]:
    """The sampling rate the trainer saw (its epochs' sampled edges and trees, i.e. seeds, per second) and where
    the rest of the process's time went."""
    ep = rec.metrics.get("epochs", [])
    secs = sum(float(e["epoch_s"]) for e in ep) or float("nan")
    edges, trees = sum(int(e["sampled_edges"]) for e in ep), sum(int(e["examples"]) for e in ep)
    return {
        "batches": sum(int(e["batches"]) for e in ep),
        "epoch_s": round(secs, 3),
        "sampled_edges_per_s": round(edges / secs, 1),
        "trees_per_s": round(trees / secs, 1),
        "wait_share": ep[-1].get("wait_share") if ep else None,
        "test_acc": rec.metrics.get("test_acc"),
        "timings": rec.timings,
    }


def infer_extra(rec: Any) -> dict[str, Any]:
    """Which path an (incremental) inference took and why: a refresh's seconds mean little without it."""
    inc = rec.counts.get("incremental") or {}
    keep = ("path", "reason", "affected_share", "affected_work_share", "recomputed_share", "full_from_layer")
    return {"vertices": rec.counts.get("vertices"), "timings": rec.timings, **{k: inc[k] for k in keep if k in inc}}


def partition_extra(rec: Any) -> dict[str, Any]:
    """Quality beside the seconds (a faster run that replicates more is no gain), and a refresh's path."""
    inc = rec.counts.get("incremental") or {}
    out = {k: rec.metrics.get(k) for k in ("rf", "vb", "eb")}
    return {**out, **{k: inc[k] for k in ("path", "reason", "mode", "seconds") if k in inc}}


# ---- the ladder ----------------------------------------------------------------------------------------------
@dataclass
class Rung:
    scale: int
    edge_factor: int
    root: Path

    @property
    def name(self) -> str:
        return f"s{self.scale}"

    @property
    def edges(self) -> int:
        return self.edge_factor << self.scale

    @property
    def graph(self) -> str:
        return f"rmat-s{self.scale}-ef{self.edge_factor}-seed1"

    @property
    def inputs(self) -> Path:
        return self.root / "inputs" / self.name

    @property
    def refresh_inputs(self) -> Path:
        return self.refresh_dir(1)

    def refresh_dir(self, k: int) -> Path:
        """The input files of refresh ``k`` (0: the first snapshot's)."""
        if k == 0:
            return self.inputs
        return self.root / "inputs" / (f"{self.name}-refresh" + (str(k) if k > 1 else ""))


def refresh_prefix(k: int) -> str:
    """The stage names' prefix of refresh ``k``: ``refresh-``, ``refresh2-``, ..."""
    return "refresh-" if k == 1 else f"refresh{k}-"


def result_line(r: Rung, stage: str, m: Measured, out_bytes: int, extra: dict[str, Any]) -> dict[str, Any]:
    """One JSON line: everything --report needs, so the table and the plot never rerun anything."""
    pk = asdict(m.peaks)
    pk["servers"] = [round(v, 1) for v in m.peaks.servers.values()]
    pk["trainer"] = m.peaks.driver if stage == "train" else 0.0
    return {
        "rung": r.name,
        "scale": r.scale,
        "edge_factor": r.edge_factor,
        "edges": r.edges,
        "stage": stage,
        "prep": stage in PREP,
        "cmd": shlex.join(m.cmd),
        "wall_s": round(m.wall_s, 3),
        "lock_wait_s": round(m.lock_wait_s, 3),
        "cores": CORES,
        "edges_per_s_core": round(r.edges / m.wall_s / CORES, 1),
        "rss_mb": {k: (round(v, 1) if isinstance(v, float) else v) for k, v in pk.items()},
        "io": {"source": IO_SOURCE, "read_bytes": m.read_bytes, "write_bytes": m.write_bytes},
        "out_bytes": out_bytes,
        "spark": m.spark,
        "extra": extra,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def record_line(b: Bench, line: dict[str, Any]) -> None:
    """Append the line (it marks the stage done for a rerun) and say what the stage took."""
    b.results[(line["rung"], line["stage"])] = line
    with (b.root / "scale-results.jsonl").open("a") as fh:
        fh.write(json.dumps(line) + "\n")
    mem = line["rss_mb"]
    print(
        f"{line['rung']} {line['stage']}: {line['wall_s']:.1f} s, {line['edges_per_s_core']:,.0f} edges/s/core, "
        f"tree peak {mem['total']:.0f} MB, jobs {line['spark'].get('jobs', '-')}",
        flush=True,
    )


def step(b: Bench, r: Rung, stage: str, fn: Callable[[], tuple[Measured, int, dict[str, Any]]]) -> dict[str, Any]:
    """Run a stage unless its result line exists (then its published outputs are reused)."""
    if (r.name, stage) in b.results:
        print(f"{r.name} {stage}: done before, skipped", flush=True)
        return b.results[(r.name, stage)]
    m, out_bytes, extra = fn()
    line = result_line(r, stage, m, out_bytes, extra)
    record_line(b, line)
    return line


def dstep(
    b: Bench,
    r: Rung,
    stage: str,
    ds: str,
    argv: list[str],
    name: str,
    extra: Callable[[Any], dict[str, Any]] = lambda rec: {},
    before: Callable[[], dict[str, Any]] = dict,
) -> dict[str, Any]:
    """A dataset stage: ``before`` (untimed), the CLI, then its published output's size and its own figures."""

    def run() -> tuple[Measured, int, dict[str, Any]]:
        pre = before()
        m = run_cli(b, r.name, stage, argv)
        size, rec = published(b.root, ds, name)
        return m, size, {**pre, **extra(rec)}

    return step(b, r, stage, run)


def ingest(b: Bench, r: Rung, stage: str, inputs: Path) -> str:
    """``glisp ingest`` of generated files; the version it made."""

    def run() -> tuple[Measured, int, dict[str, Any]]:
        m = run_cli(b, r.name, stage, ["ingest", "--config", str(inputs / "ingest.toml"), "--force"])
        version = version_of(m.output, b.root, r.graph)
        size, rec = published(b.root, f"{r.graph}/{version}", "ingest")
        return m, size, {"version": version, **{k: rec.counts.get(k) for k in ("vertices", "edges")}}

    return str(step(b, r, stage, run)["extra"]["version"])


def serialize_reorder(b: Bench, r: Rung, ds: str, prefix: str) -> None:
    """serialize and reorder (PDS) of adadne-p8: the run served, trained on and inferred over."""
    argv = ["serialize", ds, "--partition", RUN8, "--force"]
    dstep(
        b,
        r,
        f"{prefix}serialize",
        ds,
        argv,
        f"serialize/{RUN8}",
        lambda rec: {"bytes_per_edge": rec.metrics.get("bytes_per_edge")},
    )
    argv = ["reorder", ds, "--partition", RUN8, "--order", "pds", "--force"]
    dstep(b, r, f"{prefix}reorder", ds, argv, f"reorder/{RUN8}/pds")


def partition(b: Bench, r: Rung, ds: str, p: int, run: str) -> None:
    argv = ["partition", ds, "--algorithm", "adadne", "--parts", str(p), "--name", run, "--force"]
    dstep(b, r, f"partition-p{p}", ds, argv, f"partition/{run}", partition_extra)


def first_version(b: Bench, r: Rung, args: argparse.Namespace) -> str:
    """generate, ingest, both partitions (p = 32 at the rung's end with ``--p32-last``), serialize, reorder;
    the version's name."""
    gen = ["generate", "rmat", "--scale", str(r.scale), "--edge-factor", str(r.edge_factor), "--seed", "1"]
    gen += ["--features", str(args.features), "--classes", "8", "--format", "parquet", "--out", str(r.inputs)]
    step(b, r, "generate", lambda: (run_cli(b, r.name, "generate", gen), dir_bytes(r.inputs), {}))
    ds = f"{r.graph}/{ingest(b, r, 'ingest', r.inputs)}"
    partition(b, r, ds, 8, RUN8)
    if not args.p32_last:
        partition(b, r, ds, 32, RUN32)
    serialize_reorder(b, r, ds, "")
    return ds.split("/")[-1]


def serve_train_infer(b: Bench, r: Rung, ds: str, steps: int) -> None:
    """serve + train (one pair: both lines or neither is taken as done), then inference with the model."""
    if (r.name, "serve") in b.results and (r.name, "train") in b.results:
        print(f"{r.name} serve, train: done before, skipped", flush=True)
    else:
        sm, tm, extra = serve_and_train(b, r.name, ds, steps)
        size, rec = published(b.root, ds, f"train/{MODEL}")
        record_line(b, result_line(r, "train", tm, size, train_extra(rec)))
        record_line(b, result_line(r, "serve", sm, 0, extra))
    argv = ["infer", ds, "--model", MODEL, "--incremental", "--force"]
    dstep(b, r, "infer", ds, argv, f"infer/{MODEL}-pds", infer_extra)


def refresh(b: Bench, r: Rung, base: str, change_frac: float, k: int = 1) -> str:
    """Refresh ``k``: the snapshot before it changed again, through ingest, incremental partition from ``base``
    (a version), serialize, reorder, incremental inference; the version it made."""
    pre, src, out = refresh_prefix(k), r.refresh_dir(k - 1), r.refresh_dir(k)

    def prep() -> tuple[Measured, int, dict[str, Any]]:
        m, extra = refresh_input(b, r.name, src, out, change_frac, k)
        return m, dir_bytes(out / "edges"), extra

    step(b, r, f"{pre}input", prep)
    version = ingest(b, r, f"{pre}ingest", out)
    ds = f"{r.graph}/{version}"
    argv = ["partition", ds, "--algorithm", "adadne", "--parts", "8", "--name", RUN8, "--incremental"]
    argv += ["--set", f"partition.incremental_base={base}", "--force"]
    dstep(b, r, f"{pre}partition", ds, argv, f"partition/{RUN8}", partition_extra)
    serialize_reorder(b, r, ds, pre)
    argv = ["infer", ds, "--model", MODEL, "--incremental", "--force"]
    dstep(b, r, f"{pre}infer", ds, argv, f"infer/{MODEL}-pds", infer_extra)  # glisp infer carries the model
    return version


# ---- the report ------------------------------------------------------------------------------------------------
def load_results(root: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The result lines, the last one per (rung, stage)."""
    path = root / "scale-results.jsonl"
    out: dict[tuple[str, str], dict[str, Any]] = {}
    if path.exists():
        for text in path.read_text().splitlines():
            if text.strip():
                line = json.loads(text)
                out[(line["rung"], line["stage"])] = line
    return out


def ordered(results: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """Rungs by scale, stages in pipeline order."""
    rank = {s: i for i, s in enumerate(STAGES)}
    return sorted(results.values(), key=lambda x: (x["scale"], rank.get(x["stage"], len(rank))))


def table_row(x: dict[str, Any]) -> list[str]:
    """One row of the table ('-': the stage has no such process or figure)."""
    m, sp, io = x["rss_mb"], x["spark"], x["io"]

    def mb(v: float) -> str:
        return f"{v:,.0f}" if v else "-"

    servers = m.get("servers") or []
    return [
        x["rung"],
        x["stage"] + ("*" if x["prep"] else ""),
        f"{x['edges']:,}",
        f"{x['wall_s']:.1f}",
        f"{x['edges_per_s_core']:,.0f}",
        mb(m["driver"]),
        mb(m["jvm"]),
        f"{mb(m['workers'])}/{mb(m['worker_max'])}" if m["workers"] else "-",
        f"{max(servers):,.0f} x{len(servers)}" if servers else "-",
        mb(m.get("trainer", 0.0)),
        f"{io['read_bytes'] / MB:,.1f}",
        f"{io['write_bytes'] / MB:,.1f}",
        f"{x['out_bytes'] / MB:,.1f}" if x["out_bytes"] else "-",
        str(sp.get("jobs", "-")),
        f"{sp['shuffle_write_bytes'] / MB:,.1f}" if sp else "-",
    ]


def exponents(lines: list[dict[str, Any]], key: Callable[[dict[str, Any]], float]) -> dict[str, float]:
    """Per stage, the least-squares slope of log(key) on log(edges) over the rungs present (nan below two)."""
    out = {}
    for st in STAGES:
        pts = [(x["edges"], key(x)) for x in lines if x["stage"] == st and key(x) > 0]
        if len({e for e, _ in pts}) >= 2:
            out[st] = float(np.polyfit(np.log([e for e, _ in pts]), np.log([v for _, v in pts]), 1)[0])
        elif pts:
            out[st] = float("nan")
    return out


def wall(x: dict[str, Any]) -> float:
    return float(x["wall_s"])


def memory(x: dict[str, Any]) -> float:
    return float(x["rss_mb"]["total"])


def plot(lines: list[dict[str, Any]], png: Path) -> None:
    """Log-log seconds and peak memory per stage against edges, each stage's exponent in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(16, 7))
    colours = plt.get_cmap("tab20")
    panels = ((wall, "wall seconds"), (memory, "peak RSS of the stage's process tree (MB)"))
    for ax, (key, label) in zip(axes, panels, strict=True):
        exp = exponents(lines, key)
        for i, st in enumerate(STAGES):
            pts = sorted((x["edges"], key(x)) for x in lines if x["stage"] == st and key(x) > 0)
            if pts:
                xs, ys = zip(*pts, strict=True)
                name = st + ("*" if st in PREP else "")
                style = "--" if st in PREP else "-"
                ax.plot(xs, ys, style, marker="o", color=colours(i % 20), label=f"{name} ({exp[st]:.2f})")
        ax.set(xscale="log", yscale="log", xlabel="edges", ylabel=label, title=f"{label} (fitted exponent)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle(f"GLISP scale ladder ({CORES} cores; * input preparation)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def notes(lines: list[dict[str, Any]]) -> list[str]:
    """Per rung: partition quality, the trainer's sampling rate, inference paths."""
    out = []
    for x in lines:
        e, st = x["extra"], x["stage"]
        if "partition" in st and e.get("rf") is not None:
            path = f", {e['path']} ({e.get('mode', '')}: {e.get('reason', '')})" if "path" in e else ""
            out.append(f"{x['rung']} {st}: RF {e['rf']:.3f} VB {e['vb']:.3f} EB {e['eb']:.3f}{path}")
        elif st == "train" and "batches" in e:  # a line rebuilt from a published table has no figures
            out.append(
                f"{x['rung']} train: {e['batches']} batches in {e['epoch_s']:.2f} s: {e['sampled_edges_per_s']:,.0f} "
                f"sampled edges/s, {e['trees_per_s']:,.0f} trees/s (seeds), waiting {e['wait_share']}; "
                f"timings {e.get('timings')}"
            )
        elif st == "serve" and "service_edges_per_s" in e:
            out.append(
                f"{x['rung']} serve: the service alone sampled {e['service_edges_per_s']:,.0f} edges/s "
                f"(median of windows {e['service_windows']}), {e.get('service_inputs_per_s', 0):,.0f} distinct input "
                f"vertices/s; a batch: {e.get('edges_per_batch', '-')} sampled edges, {e.get('inputs_per_batch', '-')} "
                "distinct inputs"
            )
        elif st == "infer" or st.endswith("-infer"):
            path = e.get("path", "-")
            out.append(
                f"{x['rung']} {st}: {e.get('vertices')} vertices, path {path} {e.get('reason', '')} "
                f"affected {e.get('affected_share', '-')} recomputed {e.get('recomputed_share', '-')}"
                + (f"; model carried in {e['model_carried_s']} s" if "model_carried_s" in e else "")
            )
    return out


TARGET_EDGES = 10**10
MACHINE_CORES, MACHINE_GB = 16, 64
NET = 1.11  # the cluster's time per edge over local mode's (docs/results/scale-2026-12-02-network.md)


def cost_model(lines: list[dict[str, Any]], machines: int, net: float) -> list[list[str]]:
    """Per stage: seconds per edge per core and written bytes per edge at the largest rung, and what they
    predict for 10^10 edges on ``machines`` of 16 cores: hours (the cost per edge carried to 10^10 edges by
    the stage's fitted exponent, times ``net``, the cluster's factor over local mode) and the per-edge part
    of the peak memory per machine (the growth of the stage's process tree between the smallest and the
    largest rung, per edge, times the edges per machine, plus the smallest rung's peak)."""
    ws = exponents(lines, wall)
    rows = []
    for st in STAGES:
        pts = sorted((x for x in lines if x["stage"] == st and not x["prep"]), key=lambda x: x["edges"])
        if not pts:
            continue
        lo, hi = pts[0], pts[-1]
        per_edge_core = hi["wall_s"] * CORES / hi["edges"]
        alpha = ws.get(st, 1.0)
        alpha = 1.0 if not np.isfinite(alpha) else max(alpha, 1.0)  # never predict better than linear
        secs = per_edge_core * (TARGET_EDGES / hi["edges"]) ** (alpha - 1) * TARGET_EDGES
        hours = secs * net / (machines * MACHINE_CORES) / 3600
        grow = (memory(hi) - memory(lo)) / max(hi["edges"] - lo["edges"], 1) if hi is not lo else 0.0
        per_machine_gb = (memory(lo) + max(grow, 0.0) * TARGET_EDGES / machines) / 1024
        rows.append(
            [
                st,
                f"{per_edge_core * 1e6:.2f}",
                f"{hi['io']['write_bytes'] / hi['edges']:.0f}",
                f"{alpha:.2f}",
                f"{hours:.2f}",
                f"{per_machine_gb:.1f}" + (" (!)" if per_machine_gb > MACHINE_GB else ""),
            ]
        )
    return rows


def refresh_rows(lines: list[dict[str, Any]]) -> list[list[list[str]]]:
    """Per rung and refresh: [rung refresh, stage, fresh s, refresh s, ratio] for each refreshed stage and the
    total (over the stages both ran), one table each."""
    wall_of = {(x["rung"], x["stage"]): x["wall_s"] for x in lines}
    out = []
    for rung in dict.fromkeys(x["rung"] for x in lines):
        for k in range(1, 10):
            pre = refresh_prefix(k)
            pairs: list[tuple[str, float, float]] = []
            for st in REFRESHED:
                f, s = wall_of.get((rung, "partition-p8" if st == "partition" else st)), wall_of.get((rung, pre + st))
                if f and s:
                    pairs.append((st, float(f), float(s)))
            if not pairs:
                continue
            name = f"{rung} {pre.rstrip('-')}"
            rows = [[name, st, f"{f:.1f}", f"{s:.1f}", f"{s / f:.2f}"] for st, f, s in pairs]
            fresh, ref = sum(f for _, f, _ in pairs), sum(s for _, _, s in pairs)
            rows.append([name, "total", f"{fresh:.1f}", f"{ref:.1f}", f"{ref / fresh:.2f}"])
            out.append(rows)
    return out


def report(root: Path, net: float = NET) -> None:
    """The table, the exponents, the cost model and the PNG, from the result lines alone."""
    lines = ordered(load_results(root))
    if not lines:
        print(f"no results in {root / 'scale-results.jsonl'}")
        return
    head = ["rung", "stage", "edges", "wall s", "edges/s/core", "driver MB", "JVM MB", "workers MB sum/max"]
    head += ["servers MB max xN", "trainer MB", "io read MB", "io write MB", "output MB", "jobs", "shuffle MB"]
    print(f"\nscale ladder under {root} ({CORES} cores; * input preparation). io read/write: {IO_SOURCE}, page-cache")
    print("hits are no reads; output: the published stage (the input files for *); shuffle: bytes written.")
    print_table(head, [table_row(x) for x in lines])
    print()
    for line in notes(lines):
        print(line)
    ws, ms = exponents(lines, wall), exponents(lines, memory)
    print("\nfitted exponents (log-log least squares over the rungs present): stage, seconds, peak memory")
    for st in ws:
        print(f"  {st + ('*' if st in PREP else ''):<20s} {ws[st]:6.2f} {ms.get(st, float('nan')):6.2f}")
    head = ["stage", "us/edge/core", "written B/edge", "exponent used", "hours", "peak GB per machine"]
    for machines in (64, 256):
        print(
            f"\ncost model: 10^10 edges on {machines} machines x {MACHINE_CORES} cores ({MACHINE_GB} GB), network factor {net}"
        )
        print_table(head, cost_model(lines, machines, net))
    for rows in refresh_rows(lines):
        print(f"\n{rows[0][0]} against the fresh run (wall seconds; the fresh partition is p = 8's)")
        print_table(["refresh", "stage", "fresh s", "refresh s", "refresh/fresh"], rows)
    png = root / "scale.png"
    plot(lines, png)
    print(f"plot: {png}")


def glisp_command() -> list[str]:
    """The venv's ``glisp`` script beside this interpreter, else ``python -m glisp_app.cli``."""
    exe = Path(sys.executable).parent / "glisp"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "glisp_app.cli"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="/tmp/glisp-scale", help="dataset root, inputs, logs and results")
    ap.add_argument("--scales", type=int, nargs="+", default=[20, 22, 23], help="R-MAT scales, one rung each")
    ap.add_argument("--edge-factor", type=int, default=16)
    ap.add_argument("--features", type=int, default=32, help="synthetic feature width of the generated graph")
    ap.add_argument("--train-steps", type=int, default=50, help="training batches (train.max_batches, one epoch)")
    ap.add_argument("--change", type=float, default=0.01, help="share of edge rows changed by the refresh")
    ap.add_argument("--refreshes", type=int, default=2, help="refreshes in a row, each of the one before")
    ap.add_argument("--lock", default="/tmp/glisp-bench.lock", help="flock this file per stage ('' for none)")
    ap.add_argument("--report", action="store_true", help="only print the table and write the plot")
    ap.add_argument("--net", type=float, default=NET, help="cost model: the cluster's time per edge over local mode's")
    ap.add_argument("--p32-last", action="store_true", help="partition at p = 32 after the refresh (nothing needs it)")
    ap.add_argument("--write-refresh", nargs=4, metavar=("SRC", "OUT", "FRAC", "SEED"), help=argparse.SUPPRESS)
    ap.add_argument("--service-rate", metavar="CLUSTER_FILE", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.service_rate:  # the serve stage's sampling-only client, a process of its own
        print(json.dumps(sample_windows(args.service_rate)), flush=True)
        return 0
    if args.write_refresh:  # the refresh-input stage's own process
        src, out, frac, seed = args.write_refresh
        print(json.dumps(write_refresh_inputs(Path(src), Path(out), float(frac), seed=int(seed))), flush=True)
        return 0
    root = Path(args.root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if not args.report:
        adopt_orphans()
        b = Bench(root, args.lock, glisp_command(), load_results(root))
        for scale in args.scales:
            r = Rung(scale, args.edge_factor, root)
            try:
                base = first_version(b, r, args)
                serve_train_infer(b, r, f"{r.graph}/{base}", args.train_steps)
                version = base
                for k in range(1, args.refreshes + 1):
                    version = refresh(b, r, version, args.change, k)
                if args.p32_last:
                    partition(b, r, f"{r.graph}/{base}", 32, RUN32)
            except StageFailed as e:
                print(f"\nFAILED: {e}", file=sys.stderr, flush=True)
                report(root, args.net)
                return 1
    report(root, args.net)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
