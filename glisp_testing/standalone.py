"""A real Spark standalone cluster on this machine: one master and two workers, started with pyspark's own
``bin/spark-class`` on 127.0.0.1, whose workers share nothing with the driver but the dataset store.

Each worker runs in its own mount namespace (``unshare -m``, so root only) where, before the worker starts:

- ``/tmp`` and ``/dev/shm`` are fresh private tmpfs mounts; the worker's ``HOME``, ``SPARK_WORKER_DIR``,
  ``SPARK_LOCAL_DIRS`` and ``TMPDIR`` live in that ``/tmp``;
- the driver's virtualenv is bind-mounted read-only at ``EXEC_PYTHON_HOME`` (``/tmp/glisp-python``, which does
  not exist on the driver's side), and the executors run ``EXEC_PYTHON`` through ``spark.pyspark.python``;
- then the driver's virtualenv, its checkout and every directory its editable install points at are covered
  by empty tmpfs mounts, so no executor can import GLISP or read a file from where the driver has them;
- the worker's own directory under ``NUMBA_CACHE_HOST`` (``/var/tmp``, kept between test sessions, as a
  host's local disk would be) is bind-mounted at ``/tmp/glisp-numba-cache``, the executors'
  ``NUMBA_CACHE_DIR``: numba's kernels, keyed by the code zip's content, compile once per code version and
  worker, not once per test session.

The worker's environment is built from scratch (no ``PYTHONPATH``, no ``VIRTUAL_ENV``, no ``PYSPARK_*``), and
Spark's home is the pyspark inside the bind-mounted virtualenv. The dataset roots of the tests live under
``/var/tmp``, which both sides see (``/tmp`` is private to each worker). Two workers on one host need
``spark.shuffle.readHostLocalDisk=false``: otherwise an executor reads the other's shuffle files straight
from a disk it cannot see.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout (or site-packages) this code runs from
EXEC_PYTHON_HOME = "/tmp/glisp-python"  # where the workers see the virtualenv; nothing is there on the driver's side
STAGE = Path("/var/tmp/glisp-venv-mount")  # an empty host directory the workers mount the venv on before /tmp
EXEC_PYTHON = f"{EXEC_PYTHON_HOME}/bin/python"
NUMBA_CACHE = "/tmp/glisp-numba-cache"  # the executors' NUMBA_CACHE_DIR, inside each worker's private /tmp
NUMBA_CACHE_HOST = Path("/var/tmp/glisp-numba-cache")  # worker-<i>/ below it: each worker's persistent cache
NUMBA_CACHE_KEEP = 4  # code versions whose kernels a worker keeps (the most recently compiled ones)
WORKERS = 2
WORKER_MEMORY, WORKER_TMP = "2g", "4g"  # a test's worker: its executors' memory, its private /tmp (shuffle files)
BASE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "JAVA_HOME", "TZ")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# what a driver sets for this cluster: the workers' Python, their one host, both executors before the first task
EXECUTOR_CONF = {
    "spark.pyspark.python": EXEC_PYTHON,
    "spark.shuffle.readHostLocalDisk": "false",  # two workers on one host cannot read each other's disks
    "spark.executor.memory": "1g",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    # each worker's own persistent directory: kernels compiled by one application serve the next ones
    "spark.executorEnv.NUMBA_CACHE_DIR": NUMBA_CACHE,
}


def driver_env() -> dict[str, str]:
    """A driver subprocess's environment: this checkout's code, and no executor Python inherited from here."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def driver_paths() -> list[str]:
    """What the workers must not see: the driver's virtualenv, this checkout and the checkouts its editable
    install maps GLISP's packages to (outermost first, nested ones dropped: they are covered already)."""
    paths = {Path(sys.prefix).resolve(), ROOT}
    for name, mod in list(sys.modules.items()):
        if name.startswith("__editable__") and isinstance(getattr(mod, "MAPPING", None), dict):
            paths |= {Path(p).resolve().parent for p in mod.MAPPING.values()}
    out: list[str] = []
    for p in sorted(paths, key=lambda p: len(p.parts)):
        if p != Path("/") and not any(p.is_relative_to(q) for q in out):
            out.append(str(p))
    return out


def worker_script(
    spark_home: str,
    master_url: str,
    port: int,
    ui_port: int,
    numba_cache: Path,
    memory: str = WORKER_MEMORY,
    tmp_size: str = WORKER_TMP,
) -> str:
    """The shell run inside the worker's new mount namespace: the mounts, then ``exec`` the Worker JVM
    (``memory``: what its executors may take; ``tmp_size``: its private /tmp, where its shuffle files go)."""
    venv = str(Path(sys.prefix).resolve())
    if not Path(spark_home).resolve().is_relative_to(venv):
        raise RuntimeError(f"the workers bind-mount the virtualenv {venv}, which must hold pyspark ({spark_home})")
    rel_home = Path(spark_home).resolve().relative_to(venv)
    # the venv is held on a mount point outside /tmp first, so it survives the private /tmp even when it lies under it
    STAGE.mkdir(parents=True, exist_ok=True)
    hidden = [p for p in driver_paths() if not Path(p).is_relative_to("/tmp")]  # the private /tmp hides the rest
    hide = "\n".join(f"mount -t tmpfs -o size=1m,mode=755 glisp-hidden {shlex.quote(p)}" for p in hidden)
    return f"""set -eu
mount --make-rprivate /
mount --bind {shlex.quote(venv)} {STAGE}
mount -t tmpfs -o mode=1777,size={tmp_size} glisp-worker-tmp /tmp
mount -t tmpfs -o mode=1777,size=256m glisp-worker-shm /dev/shm
mkdir -p {EXEC_PYTHON_HOME} /tmp/home /tmp/work /tmp/local {NUMBA_CACHE}
mount --bind {shlex.quote(str(numba_cache))} {NUMBA_CACHE}
mount --move {STAGE} {EXEC_PYTHON_HOME}
mount -o remount,bind,ro {EXEC_PYTHON_HOME}
{hide}
export SPARK_HOME={EXEC_PYTHON_HOME}/{shlex.quote(str(rel_home))}
cd /tmp/work
exec "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --port {port} \\
    --webui-port {ui_port} --cores 1 --memory {memory} --work-dir /tmp/work {master_url}
"""


def worker_numba_cache(i: int, host: Path = NUMBA_CACHE_HOST) -> Path:
    """Worker ``i``'s persistent kernel cache on the host, holding the kernels of the ``NUMBA_CACHE_KEEP`` code
    versions compiled last (one directory per code zip; about 12 MB each), so it does not grow without end."""
    d = host / f"worker-{i}"
    d.mkdir(parents=True, exist_ok=True)

    def written(version: Path) -> float:
        return max((f.stat().st_mtime for f in version.rglob("*") if f.is_file()), default=version.stat().st_mtime)

    for old in sorted(d.glob("glisp-zip-*"), key=written, reverse=True)[NUMBA_CACHE_KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    return d


def base_env(**extra: str) -> dict[str, str]:
    """A fresh environment: nothing of the driver's Python (PYTHONPATH, VIRTUAL_ENV, PYSPARK_*) leaks in."""
    env = {k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ}
    env["PATH"] = SYSTEM_PATH if "JAVA_HOME" not in env else f"{env['JAVA_HOME']}/bin:{SYSTEM_PATH}"
    env.update(SPARK_LOCAL_IP="127.0.0.1", **extra)
    return env


@dataclass
class Standalone:
    """A running master and its workers; ``url`` is what ``--master`` takes."""

    logs: Path
    spark_home: str
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)  # each worker's mount namespace (/proc/PID/ns/mnt)
    worker_env: dict[str, str] = field(default_factory=dict)  # what the hosts' environment gives (store credentials)
    worker_memory: str = WORKER_MEMORY
    worker_tmp: str = WORKER_TMP

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        out = open(self.logs / f"{name}.log", "wb")  # the child keeps its own copy of the descriptor
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd="/")
        out.close()
        self.procs.append(p)
        return p

    def start(self, timeout: float = 120.0) -> None:
        """Start the master, then the workers; return once both registered with the master."""
        spark_class = str(Path(self.spark_home) / "bin" / "spark-class")
        master_cmd = [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        master_cmd += ["--port", str(self.port), "--webui-port", str(self.ui_port)]
        no_rest = "-Dspark.master.rest.enabled=false"  # its fixed port 6066 would clash with another cluster
        env = base_env(SPARK_HOME=self.spark_home, HOME=str(self.logs), SPARK_MASTER_OPTS=no_rest)
        self._spawn("master", master_cmd, env)
        for i in range(WORKERS):
            cache = worker_numba_cache(i)
            script = worker_script(
                self.spark_home, self.url, free_port(), free_port(), cache, self.worker_memory, self.worker_tmp
            )
            env = base_env(HOME="/tmp/home", SPARK_WORKER_DIR="/tmp/work", SPARK_LOCAL_DIRS="/tmp/local", TMPDIR="/tmp")
            env.update(self.worker_env)
            p = self._spawn(f"worker-{i}", ["unshare", "-m", "sh", "-c", script], env)
            self.namespaces.append(_namespace_of(p))
        self._wait_registered(timeout)

    def _wait_registered(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        alive = -1
        while time.monotonic() < deadline:
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a cluster process exited: {dead}\n{self.log_tails()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                    alive = int(json.load(r).get("aliveworkers", 0))
            except OSError:
                alive = -1
            if alive == WORKERS:
                return
            time.sleep(0.5)
        raise RuntimeError(
            f"{WORKERS} workers did not register in {timeout:.0f} s (alive: {alive})\n{self.log_tails()}"
        )

    def executor_logs(self) -> str:
        """The executors' stderr, read through each worker's own view of its private /tmp."""
        parts = []
        for p in self.procs[1:]:
            base = Path(f"/proc/{p.pid}/root/tmp/work")
            for f in sorted(base.glob("*/*/stderr")) if base.exists() else []:
                parts.append(f"--- worker pid {p.pid}: {f.relative_to(base)}\n{_tail(f)}")
        return "\n".join(parts)

    def log_tails(self) -> str:
        return "\n".join(f"--- {f.name}\n{_tail(f)}" for f in sorted(self.logs.glob("*.log")))

    def stop(self) -> None:
        """SIGTERM each process group (workers, their executors and Python workers), SIGKILL what is left, then
        kill any process still inside a worker's mount namespace (a daemon that left the group)."""
        for p in reversed(self.procs):
            _signal_group(p, signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait(timeout=15)
        for pid in _pids_in(set(self.namespaces) - {""}):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _tail(f: Path, n: int = 4000) -> str:
    try:
        return f.read_bytes()[-n:].decode(errors="replace")
    except OSError as e:
        return f"({e})"


def _signal_group(p: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(p.pid, sig)  # start_new_session: the group id is the child's pid
    except ProcessLookupError:
        pass


def _namespace_of(p: subprocess.Popen[bytes], timeout: float = 10.0) -> str:
    """The mount namespace the worker runs in, once ``unshare`` has made it (not the one it started in)."""
    mine = os.readlink("/proc/self/ns/mnt")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and p.poll() is None:
        try:
            ns = os.readlink(f"/proc/{p.pid}/ns/mnt")
        except OSError:
            break
        if ns != mine:
            return ns
        time.sleep(0.05)
    return ""


def _pids_in(namespaces: set[str]) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.readlink(d / "ns" / "mnt") in namespaces:
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def unavailable() -> str:
    """Why the cluster cannot start here ("" when it can)."""
    if os.geteuid() != 0:
        return "the standalone cluster needs root (mount namespaces with private tmpfs mounts per worker)"
    if shutil.which("unshare") is None:
        return "the standalone cluster needs util-linux 'unshare'"
    r = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs t /tmp"], capture_output=True, text=True)
    return "" if r.returncode == 0 else f"'unshare -m' cannot mount a private /tmp here: {r.stderr.strip()}"
