"""The pipeline on a Spark standalone cluster and on ``local[2]``: equal partitions, equal inference.

Every driver is a subprocess running the real CLI (``glisp pipeline``, then ``glisp infer`` with one small
model published into both versions), because this pytest process already holds the ``local[2]`` session.
Both runs set ``spark.hadoop.fs.defaultFS=hdfs://127.0.0.1:1``: a path handed to Spark without a scheme
would go to that unreachable namenode, so a run that finishes shows every Spark path is qualified. The
local reference runs in a thread while the cluster runs (the cluster's own runs queue for its two cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.storage.uri import StoreURI, parse_uri
from glisp_testing.jvm_opts import TEST_JVM_OPTS
from glisp_testing.standalone import EXEC_PYTHON, EXECUTOR_CONF, ROOT, Standalone, driver_env, driver_paths
from tests.tiers import needs

GRAPH, VERSION, RUN, MODEL = "cora", "v1", "adadne-p2", "tiny"
COMMON_CONF = {"spark.hadoop.fs.defaultFS": "hdfs://127.0.0.1:1"}
CLUSTER_CONF = {**EXECUTOR_CONF, "spark.executor.extraJavaOptions": TEST_JVM_OPTS}
TIMEOUT = 420
# the partition's vertex state in executor tasks (cora in 2 shards, 3 cells, p = 2: three rounds, the finishing
# pass and one relocation round): with the driver's state a graph of cora's size is partitioned in the driver
SHARDED = ("partition.state=sharded", "partition.shard_vertices=1400", "partition.adadne.refine_rounds=1")
SHARDED += ("partition.max_rounds=3",)


@dataclass
class Run:
    root: StoreURI
    log: str  # every command's output, for a failure's message

    @property
    def dv(self) -> DatasetVersion:
        return DatasetVersion(self.root, GRAPH, VERSION)


def glisp(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "glisp_app.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=driver_env(), cwd=ROOT, timeout=TIMEOUT)


def spark_set(conf: dict[str, str]) -> str:
    """``--set spark.conf={...}`` as a TOML inline table."""
    return "spark.conf={" + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in conf.items()) + "}"


def publish_tiny_model(root: StoreURI) -> None:
    """One small GraphSAGE with fixed random weights (no training: the outputs only have to agree)."""
    import torch

    from glisp_core.models import ModelSpec, build_model
    from glisp_train.publish import publish_model

    torch.manual_seed(7)
    model = build_model(ModelSpec(arch="sage", in_dim=1433, hidden=16, out_dim=7, layers=2, task="node")).eval()
    publish_model(DatasetVersion(root, GRAPH, VERSION), MODEL, model, RUN)


def run_all(root: StoreURI, master: str, conf: dict[str, str]) -> Run:
    """``glisp pipeline`` (ingest, partition, serialize, reorder), the model, then ``glisp infer``."""
    common = ["--root", root.qualified, "--master", master, "--set", spark_set({**COMMON_CONF, **conf})]
    log = []
    sharded = [x for kv in SHARDED for x in ("--set", kv)]
    r = glisp("pipeline", "--builtin", GRAPH, "--parts", "2", "--set", f"ingest.version={VERSION}", *sharded, *common)
    log.append(f"$ glisp pipeline ({master}) -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    if r.returncode == 0:
        publish_tiny_model(root)
        r = glisp("infer", f"{GRAPH}/{VERSION}", "--model", MODEL, *common)
        log.append(f"$ glisp infer ({master}) -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    if r.returncode != 0:
        pytest.fail("\n".join(log), pytrace=False)
    return Run(root, "\n".join(log))


@pytest.fixture(scope="session")
@needs("subprocess_jvm")
def reference(shared_dir: Path) -> Iterator[Future[Run]]:
    """The local[2] run, started at once in a thread; a test waits for it with ``.result()``."""
    with ThreadPoolExecutor(1) as pool:
        yield pool.submit(run_all, parse_uri(shared_dir / "local"), "local[2]", {})


def test_executors_run_the_configured_python_and_see_nothing_of_the_driver(reference, standalone: Standalone):
    """A task on each executor: Python is spark.pyspark.python's, GLISP comes from the shipped zip, and the
    driver's virtualenv, checkout and editable install are not there."""
    assert not Path(EXEC_PYTHON).exists()  # a path only the workers have
    hidden = [str(Path(sys.prefix) / "bin" / "python")]
    hidden += [str(Path(p) / "glisp_core" / "__init__.py") for p in driver_paths()] + [str(ROOT / "pyproject.toml")]
    conf = json.dumps({**COMMON_CONF, **CLUSTER_CONF})
    probe = str(Path(__file__).with_name("executor_probe.py"))
    r = subprocess.run(
        [sys.executable, probe, standalone.url, conf, *hidden],
        capture_output=True,
        text=True,
        env=driver_env(),
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, f"{r.stderr[-4000:]}\n{standalone.executor_logs()}"
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(rows) == 4
    for row in rows:
        assert row["python"] == EXEC_PYTHON
        assert not any(row["exists"].values()), row["exists"]
        assert ".zip" in row["glisp_core"] and row["home"] == "/tmp/home"
    namespaces = {row["mnt_ns"] for row in rows}
    assert len(namespaces) == 2 and os.readlink("/proc/self/ns/mnt") not in namespaces  # both workers, not here


def _equal_results(cluster: Run, local: Run) -> None:
    """Partition assignment and replicas, inference predictions, embeddings and every layer: equal."""
    for stage, sub, key in (
        (f"partition/{RUN}", "assignment", "eid"),
        (f"partition/{RUN}", "replicas", "vid"),
        (f"infer/{MODEL}-pds", "predictions", "vid"),
        (f"infer/{MODEL}-pds", "embeddings", "vid"),
    ):
        a, b = (r.dv.store.read_table(r.dv.output(stage) / sub).sort_by(key) for r in (cluster, local))
        assert a.num_rows > 0 and a.equals(b), f"{sub} differs between the cluster and local[2]"
    from glisp_infer.read import InferenceRun

    runs = [InferenceRun.open(r.dv.path, f"{MODEL}-pds") for r in (cluster, local)]
    for layer in range(runs[0].layers + 1):
        assert np.array_equal(np.asarray(runs[0].layer(layer)[:]), np.asarray(runs[1].layer(layer)[:]))


def test_pipeline_with_its_root_in_a_bucket_on_standalone_equals_local(reference, standalone: Standalone, new_s3_root):
    """The workers share nothing with the driver but the S3 server: the root, the built-in inputs, every
    hand-off (the sharded partition's shard files too) and the Zarr store are in the bucket (the workers'
    hosts carry the store's credentials). Partition, predictions, embeddings and every layer equal the local
    run's: every partition decision is made in tasks from shard files and O(p) thresholds."""
    root = new_s3_root("cluster")
    try:
        cluster = run_all(root, standalone.url, CLUSTER_CONF)
    except BaseException:
        print(standalone.executor_logs())
        raise
    assert any(True for _ in cluster.dv.store.files(root / "_builtin" / GRAPH))
    from glisp_core.dataset.manifest import read_manifest

    counts = read_manifest(cluster.dv).stage(f"partition/{RUN}").counts
    assert counts["shards"] == 2 and {j["kind"] for j in counts["spark_jobs"]} >= {"round", "finish", "relocate"}
    _equal_results(cluster, reference.result(timeout=2 * TIMEOUT))


def test_local_root_pipeline_runs_with_an_hdfs_default_fs(reference):
    """``fs.defaultFS=hdfs://127.0.0.1:1`` (nothing listens there): the local-root pipeline still runs."""
    from glisp_core.dataset.manifest import read_manifest

    local = reference.result(timeout=2 * TIMEOUT)
    m = read_manifest(local.dv)
    for stage in ("ingest", f"partition/{RUN}", f"serialize/{RUN}", f"reorder/{RUN}/pds", f"infer/{MODEL}-pds"):
        assert local.dv.store.is_dir(local.dv.path / m.stage(stage).path)
    assert not local.dv.store.exists(local.root / "_builtin")  # a local master reads the built-in files in place


@needs("subprocess_jvm")
def test_executors_that_never_start_fail_the_stage_in_bounded_time_naming_why(standalone: Standalone, tmp_path):
    """A JVM option every executor dies of before it registers (as a broken image or a missing agent would do):
    the master relaunches executors without end, so the stage fails by spark.no_executor_timeout_s, with the
    reason in its message, instead of waiting."""
    broken = {**CLUSTER_CONF, "spark.executor.extraJavaOptions": "-javaagent:/nonexistent/agent.jar"}
    broken["spark.scheduler.maxRegisteredResourcesWaitingTime"] = "2s"  # not Spark's 30 s wait before the first job
    t0 = time.monotonic()
    r = glisp(
        "ingest", "--builtin", GRAPH, "--root", str(tmp_path / "root"), "--master", standalone.url,
        "--set", spark_set(broken), "--set", "spark.no_executor_timeout_s=6",
    )  # fmt: skip
    took = time.monotonic() - t0
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "no executor has been up for" in r.stderr and "spark.no_executor_timeout_s = 6" in r.stderr, r.stderr[-3000:]
    assert took < 90, took  # the JVM's start, 2 s, 6 s and the poll: not the stage's own timeout (420 s)
