"""serve-cluster's start and a killed server's restart: every server a new interpreter (``--start exec``, the
baseline) against every server forked from the warm fork server (``--start fork``, the default), in turns.

Per round and mode, under the benches' lock: ``glisp serve-cluster`` of ``RUN`` is started and timed until
its cluster file exists (every server SERVING), with the CPU of its whole process tree at that moment (the
supervisor, the fork server, the servers). Then one server is SIGKILLed and timed until its replacement
answers SERVING with its restart count raised, with the replacement's CPU at that moment. Medians over
``--rounds``. ``--dataset`` defaults to the demo's Cora (``make demo`` writes it).

    .venv/bin/python bench/server_start.py --dataset data/demo/cora --run adadne-p4 --rounds 5
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODES = {"exec": "each server a new interpreter (baseline)", "fork": "forked from the warm fork server"}


def _tree_cpu(pid: int) -> float:
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


def _restarts(addr: str) -> int:
    import grpc

    from glisp_serving.proto import sampling_pb2 as pb
    from glisp_serving.proto import sampling_pb2_grpc as pb_grpc

    try:
        with grpc.insecure_channel(addr) as ch:
            st = pb_grpc.SamplingStub(ch).Stats(pb.StatsRequest(), timeout=2)
            return int(st.restarts) if st.serving else -1
    except grpc.RpcError:
        return -1


def one(mode: str, dataset: str, run: str, work: Path) -> dict[str, float]:
    """Start, restart and stop one cluster; seconds and CPU-s."""
    from glisp_testing.servers import cluster_servers

    cf = work / f"{mode}.json"
    cf.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "glisp_app.cli", "serve-cluster", dataset, "--run", run]
    cmd += ["--cluster-file", str(cf), "--threads", "1", "--start", mode]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not cf.exists():
            if proc.poll() is not None:
                raise SystemExit(f"serve-cluster --start {mode} exited with {proc.returncode}")
            time.sleep(0.02)
        start_s, start_cpu = time.perf_counter() - t0, _tree_cpu(proc.pid)
        addr = json.loads(cf.read_text())["addresses"][0][0]
        victim = cluster_servers(proc.pid)[(0, 0)]
        t1 = time.perf_counter()
        victim.kill()
        while _restarts(addr) < 1:
            time.sleep(0.02)
        restart_s = time.perf_counter() - t1
        restart_cpu = sum(cluster_servers(proc.pid)[(0, 0)].cpu_times()[:2])
        return {"start_s": start_s, "start_cpu": start_cpu, "restart_s": restart_s, "restart_cpu": restart_cpu}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default=str(ROOT / "data" / "demo" / "cora"))
    ap.add_argument("--run", default="adadne-p4")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lock", default="/tmp/glisp-bench.lock")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="glisp-server-start-"))
    got: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    with open(a.lock, "w") as lock:
        for r in range(a.rounds):
            for mode in MODES:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    got[mode].append(one(mode, a.dataset, a.run, work))
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
                print(f"round {r + 1} {mode}: " + ", ".join(f"{k} {v:.2f}" for k, v in got[mode][-1].items()))
    keys = ["start_s", "start_cpu", "restart_s", "restart_cpu"]
    med = {m: {k: statistics.median(x[k] for x in got[m]) for k in keys} for m in MODES}
    print(
        f"\n{'mode':6} {'start s':>8} {'start CPU-s':>12} {'restart s':>10} {'restart CPU-s':>14}  (medians of {a.rounds})"
    )
    for m, what in MODES.items():
        v = med[m]
        print(
            f"{m:6} {v['start_s']:8.2f} {v['start_cpu']:12.2f} {v['restart_s']:10.2f} {v['restart_cpu']:14.2f}  {what}"
        )
    b, f = med["exec"], med["fork"]
    print("fork / exec: " + ", ".join(f"{k} {f[k] / b[k]:.2f}x" for k in keys))


if __name__ == "__main__":
    main()
