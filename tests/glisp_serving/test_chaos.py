"""A replicated cluster under client load through a seeded random sequence of faults (glisp_testing.chaos).

Real ``serve-cluster`` and ``glisp serve`` subprocesses: real SIGKILLs, SIGSTOP of the supervisor, hot reloads
through the supervisor's admin socket, and hostile requests. The test asserts what a user of the service is
promised (docs/reliability.md): no request lost while a replica of each partition is up, every client on the
served version soon after a reload, health that agrees with the answers, and memory within the budget.
"""

from __future__ import annotations

from glisp_testing.chaos import KINDS, run_chaos
from tests.glisp_serving.conftest import EC_RUN, Cluster

RSS_LIMIT_MIB = 1024  # per server, throughout: runtime + partition + serve.max_inflight_mb (256 here)
VERSION_BOUND_S = 5.0


def test_random_faults_under_load_lose_no_request_and_keep_health_true(two_versions, tmp_path, server_processes):
    dv1, dv2 = two_versions
    cluster = Cluster(
        dv1, EC_RUN, tmp_path, ["--replicas", "2", "--threads", "1", "--set", "serve.max_inflight_mb=256"]
    )
    try:
        versions = [(str(dv.path), EC_RUN, f"{dv.graph}/{dv.version}") for dv in (dv1, dv2)]
        res = run_chaos(cluster.cluster_file, cluster.proc.pid, versions, seed=42, events=10, gap_s=(1.0, 2.5))
    finally:
        code = cluster.stop()
    print(res.report())
    assert code == 0, "".join(cluster.lines[-20:])
    assert {e.kind for e in res.events} == set(KINDS)
    assert sum(1 for s in res.samples if not s[3]) > 100, "the clients hardly ran"
    lost = res.errors_outside_outages()
    assert lost == [], lost[:3]
    stale = res.stale_after_reloads(VERSION_BOUND_S)
    assert stale == [], stale[:3]
    lies = res.health_lies()
    assert lies == [], lies[:3]
    peak = max(p.rss for p in res.probes) >> 20
    assert peak < RSS_LIMIT_MIB, f"a server reached {peak} MiB"
    assert set(res.hostile) <= {
        "huge message: RESOURCE_EXHAUSTED",
        "huge fanout: INVALID_ARGUMENT",
        "many seeds: INVALID_ARGUMENT",
    }, res.hostile
