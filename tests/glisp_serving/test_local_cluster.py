"""glisp_serving.cluster.child: a serve-cluster started for one job (``glisp train --serve``, the refresh
pipeline's train stage) stops with its job, even when the job is SIGKILLed, and a cluster that cannot
start is a clear error. Real serve-cluster subprocesses on the served test graph."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from glisp_testing.servers import cluster_servers
from tests.glisp_serving.conftest import ROOT, VC_RUN

_JOB = """
import sys, time
from glisp_serving.cluster.child import start_cluster
p = start_cluster(sys.argv[1], sys.argv[2], sys.argv[3], threads=1, config_args=["--set", "serve.start_timeout_s=300"])
print(p.pid, flush=True)
time.sleep(600)
"""


def test_a_killed_job_takes_its_servers_with_it(graph, tmp_path, server_processes):
    job = subprocess.Popen(
        [sys.executable, "-c", _JOB, str(graph.dv.path), VC_RUN, str(tmp_path / "c.json")],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    line = job.stdout.readline()
    assert line.strip().isdigit(), f"the job did not start its cluster (exit {job.poll()})"
    cluster = psutil.Process(int(line))
    servers = cluster.children(recursive=True)  # the servers and the fork server they were forked from
    assert len(cluster_servers(cluster.pid)) == 3 and (tmp_path / "c.json").exists()
    try:
        job.kill()  # no cleanup code runs in the job
        job.wait()
        gone, alive = psutil.wait_procs([cluster, *servers], timeout=60)
        assert not alive, f"still running after the job was killed: {[p.pid for p in alive]}"
    finally:
        for p in [cluster, *servers]:
            if p.is_running():
                os.killpg(cluster.pid, signal.SIGKILL)
                break


def test_a_cluster_that_cannot_start_is_a_clear_error(graph, tmp_path, server_processes):
    from glisp_core.errors import StageError
    from glisp_serving.cluster.child import start_cluster

    with pytest.raises(StageError, match="serve-cluster of .* run no-such-run exited with code 1: .*no-such-run"):
        start_cluster(graph.dv.path, "no-such-run", tmp_path / "c.json", timeout_s=120)
    assert not (tmp_path / "c.json").exists()


_EARLY_STOP = """
import json, sys
from glisp_serving.cluster.forked import fork_context, start_server
from glisp_serving.cluster.supervisor import stop_children
if __name__ == "__main__":
    ctx = fork_context()
    argv = ["serve", sys.argv[1], "--run", sys.argv[2], "--partition", "0", "--port", "0"]
    procs = [start_server(ctx, argv, 0, r) for r in range(3)]  # each stopped as soon as it is forked
    print(json.dumps([stop_children([p], 30.0)[0] for p in procs]), flush=True)
"""


def test_a_server_stopped_as_it_is_forked_is_a_clean_stop(graph, tmp_path, server_processes):
    """serve-cluster's stop can meet a server it has just restarted: SIGTERM in its first milliseconds, before
    it installs its handlers, ends it with -15 (it held nothing yet); that stop is clean, so the cluster exits
    0. A server that exits 1, or is SIGKILLed after the grace, is not."""
    import json

    from glisp_serving.cluster.supervisor import unclean_stops

    script = tmp_path / "early_stop.py"  # a file: the fork server re-imports the main module by its path
    script.write_text(_EARLY_STOP)
    r = subprocess.run(
        [sys.executable, str(script), str(graph.dv.path), VC_RUN],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    codes = json.loads(r.stdout.strip().splitlines()[-1])
    assert -signal.SIGTERM in codes and set(codes) <= {0, -signal.SIGTERM}, codes  # the signal, or a clean start's stop
    names = [f"replica {i}" for i in range(len(codes))]
    assert unclean_stops(names, codes) == []
    assert unclean_stops(["a", "b", "c"], [0, -signal.SIGKILL, 1]) == ["b (code -9)", "c (code 1)"]
