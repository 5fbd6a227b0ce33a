"""A trainer-like client process under load, for tests of what a client prints while its cluster changes.

``python -m glisp_testing.client_load CLUSTER_FILE [--threads N] [--clients K]`` samples from N threads
over K ``SamplingClient`` s (thread i uses client i mod K; thread 0 through ``loader``, which keeps
batches in flight, the others one ``sample`` at a time) and logs at INFO on stderr, as a trainer
would. It prints ``ready`` once every thread has a batch, then reads one command from stdin:

- ``stop``: the threads finish their batch and the clients close;
- ``close``: the clients are closed while the threads are still sampling (streams open, requests in
  flight); each thread calls on until a call fails.

Then it collects garbage (asyncio reports an exception nobody retrieved when its future is collected)
and prints one JSON line: ``batches``, ``errors`` (requests that failed before the close), ``after_close``
(what requests raised once the clients were closing), ``hung`` (threads still waiting 20 s after) and
the clients' summed ``metrics``. :class:`ClientLoad` runs it from a test; :func:`noise` picks what a
user should never see in its stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

# what stderr must not hold after load that succeeded: asyncio's reports of outcomes nobody looked at,
# Python's of coroutines never run or objects that failed to finalize, any traceback or ERROR record
NOISE = ("Traceback", "never retrieved", "never awaited", "Task was destroyed", "Exception ignored", "ERROR ")


def noise(stderr: str) -> list[str]:
    """The lines of ``stderr`` a user should not see when every request that mattered succeeded."""
    return [line for line in stderr.splitlines() if any(m in line for m in NOISE)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m glisp_testing.client_load")
    ap.add_argument("cluster", type=Path)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--batch", type=int, default=48)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")

    from glisp_core.config import ClientConfig
    from glisp_serving.client.sampling_client import SamplingClient

    # a short backoff: a dead replica is tried again (and its connection refused) many times while it is down
    cfg = ClientConfig(deadline_s=5.0, retries=4, backoff_s=0.02, local_reads="never", prefetch=4)
    clients = [SamplingClient(args.cluster, cfg) for _ in range(args.clients)]
    n = clients[0].routing.num_vertices
    lock, stop, closing = threading.Lock(), threading.Event(), threading.Event()
    done = [0] * args.threads
    errors: list[str] = []
    after_close: list[str] = []

    def batches(i: int) -> Iterator[Any]:
        client, rng = clients[i % len(clients)], np.random.default_rng(i)
        if i == 0:
            while True:
                yield from client.loader(np.arange(n), args.batch, [4, 3], seed=int(rng.integers(1 << 30)))
        while True:
            yield client.sample(rng.choice(n, args.batch, replace=False), [4, 3], seed=int(rng.integers(1 << 30)))

    def load(i: int) -> None:
        it = batches(i)
        while not stop.is_set():
            try:
                next(it)
                with lock:
                    done[i] += 1
            except Exception as e:  # noqa: BLE001 - every failure is reported
                with lock:
                    (after_close if closing.is_set() else errors).append(f"{type(e).__name__}: {e}")
                if closing.is_set():
                    return
                it = batches(i)

    workers = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(args.threads)]
    for w in workers:
        w.start()
    while min(done) == 0 and not errors:
        time.sleep(0.05)
    print("ready", flush=True)
    # after a close the threads go on calling until a call fails (each returns then), so every one meets the
    # closed client's error instead of stopping between two calls
    if sys.stdin.readline().strip() == "close":
        closing.set()
        for c in clients:
            c.close()
    else:
        stop.set()
    t = time.monotonic()
    for w in workers:
        w.join(max(0.0, 20 - (time.monotonic() - t)))
    stop.set()
    hung = sum(w.is_alive() for w in workers)
    for c in clients:
        c.close()
    gc.collect()
    metrics: dict[str, int] = {}
    for c in clients:
        for k, v in dataclasses.asdict(c.metrics).items():
            metrics[k] = metrics.get(k, 0) + v
    out = {"batches": sum(done), "errors": errors, "after_close": after_close, "hung": hung, "metrics": metrics}
    print(json.dumps(out), flush=True)
    return 0


class ClientLoad:
    """``client_load`` in a subprocess; its stderr goes to ``workdir/client-load.err``."""

    def __init__(self, cluster: Path, workdir: Path, root: Path, threads: int = 4, clients: int = 2) -> None:
        self.err_path = workdir / "client-load.err"
        cmd = [sys.executable, "-m", "glisp_testing.client_load", str(cluster), "--threads", str(threads)]
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(
                [*cmd, "--clients", str(clients)],
                cwd=root,
                env=dict(os.environ, PYTHONPATH=str(root)),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            raise RuntimeError(f"client_load: {line!r}; stderr:\n{self.stderr()[-3000:]}")

    def finish(self, command: str = "stop", timeout: float = 90) -> dict[str, Any]:
        """Send ``command`` (stop | close); the process's JSON summary."""
        try:
            out, _ = self.proc.communicate(command + "\n", timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        if self.proc.returncode != 0:
            raise RuntimeError(f"client_load exited {self.proc.returncode}; stderr:\n{self.stderr()[-3000:]}")
        return dict(json.loads(out.strip().splitlines()[-1]))

    def stderr(self) -> str:
        return self.err_path.read_text()


if __name__ == "__main__":
    sys.exit(main())
