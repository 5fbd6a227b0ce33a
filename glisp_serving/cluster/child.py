"""Start ``glisp serve-cluster`` as a child process for as long as a job needs it.

Used where a batch job trains through the real service rather than a long-running one (the refresh
pipeline's ``train`` stage) and by the benchmarks. The child is a process group leader, so its servers
go with it; on Linux it also gets SIGTERM when this process dies (``PR_SET_PDEATHSIG``), so a killed
pipeline leaves no servers behind. Stopping it sends SIGTERM (the servers drain), then SIGKILL to the
group after ``grace_s`` + 10 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from glisp_core.errors import StageError

_ROOT = Path(__file__).resolve().parent.parent


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux prctl; elsewhere a no-op)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def start_cluster(
    dataset: str | Path,
    run: str,
    cluster_file: Path,
    *,
    threads: int | None = None,
    replicas: int | None = None,
    config_args: Sequence[str] = (),
    timeout_s: float = 300.0,
    quiet: bool = True,
) -> subprocess.Popen:
    """Start serve-cluster and return once it has written ``cluster_file`` (every server SERVING).

    ``config_args`` are the global ``--config``/``--set`` options the servers take (serve.*,
    security). A child that exits first, or no cluster file within ``timeout_s``, is a StageError with
    the child's last output.
    """
    cluster_file = Path(cluster_file)
    cluster_file.unlink(missing_ok=True)  # one left by a killed run would be read before the servers exist
    cmd = [
        sys.executable,
        "-m",
        "glisp_app.cli",
        "serve-cluster",
        str(dataset),
        "--run",
        run,
        "--cluster-file",
        str(cluster_file),
        *config_args,
    ]
    if threads:
        cmd += ["--threads", str(threads)]
    if replicas:
        cmd += ["--replicas", str(replicas)]
    log = tempfile.TemporaryFile()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.DEVNULL if quiet else None,
        stderr=log,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    end = time.monotonic() + timeout_s
    while not cluster_file.exists():
        if proc.poll() is not None or time.monotonic() > end:
            timed_out = proc.poll() is None
            stop_cluster(proc)
            log.seek(0)
            tail = log.read().decode(errors="replace").strip().splitlines()[-5:]
            why = f"exited with code {proc.returncode}" if not timed_out else f"not SERVING within {timeout_s:.0f} s"
            raise StageError(f"serve-cluster of {dataset} run {run} {why}: " + (" | ".join(tail) or "no output"))
        time.sleep(0.1)
    log.close()
    return proc


def stop_cluster(proc: subprocess.Popen, grace_s: float = 30.0) -> int | None:
    """SIGTERM the serve-cluster (it stops its servers), SIGKILL its group if it does not exit in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s + 10.0)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


@contextmanager
def local_cluster(dataset: str | Path, run: str, workdir: Path | None = None, **kw) -> Iterator[Path]:
    """The cluster file of a serve-cluster of ``run`` that lives for the ``with`` block."""
    with tempfile.TemporaryDirectory(prefix="glisp-cluster-", dir=workdir) as tmp:
        cf = Path(tmp) / "cluster.json"
        proc = start_cluster(dataset, run, cf, **kw)
        try:
            yield cf
        finally:
            stop_cluster(proc)
