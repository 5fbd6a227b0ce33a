"""PySpark's Python worker daemon, with the libraries a stage's tasks use imported once, before it forks.

PySpark starts one daemon per executor (per Python and environment); the daemon forks a worker for each task
slot, and every fresh worker imports what its tasks need: numpy, pyarrow and numba (about 1 CPU-s), and for
inference torch with torch_geometric (about 4.5 CPU-s, a third of it torch's compiler stack, which PyG
imports). Workers are forked again whenever one was idle for a minute or ran in another environment, so a
local session forks dozens. Imported here, in the daemon, each worker starts with them in its copy-on-write
memory. Which modules: the executor environment's ``GLISP_WORKER_PRELOAD`` (comma-separated), set by
:func:`glisp_spark.session.get_spark` for a local master.

PySpark puts its own sources first on the path, as ``pyspark.zip`` and py4j's source zip: zips hold no
bytecode, so every daemon, and every worker for what the daemon did not import, compiled PySpark again (about
0.5 CPU-s a daemon). Where those zips are the ones inside the PySpark installed in this interpreter (with
a pip-installed PySpark, a local master's always are), :func:`prefer_installed_pyspark` takes them off the
path and the installed package, the same files with their bytecode, is imported instead.

PySpark's own daemon imports nothing before it forks, so that no library's thread is running at a fork. The
libraries preloaded here start none at import but the Arrow allocator's background thread, which jemalloc
itself makes safe across fork. A module that cannot be imported is left to the task, which fails with its own
error; nothing an import prints reaches the daemon's stdout, where it tells the JVM its port.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

PRELOAD_ENV = "GLISP_WORKER_PRELOAD"
MODULE = "glisp_spark.daemon"  # spark.python.daemon.module


def preload(names: Iterable[str]) -> dict[str, str | None]:
    """Import each module, file descriptor 1 pointed at stderr meanwhile; name -> None, or why it failed."""
    out: dict[str, str | None] = {}
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        for name in names:
            try:
                importlib.import_module(name)
                out[name] = None
            except Exception as e:  # noqa: BLE001 - the task that needs it fails with the error itself
                out[name] = f"{type(e).__name__}: {e}"
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    return out


def installed_copies(path: Iterable[str]) -> list[str]:
    """The entries of ``path`` that are PySpark's source zips of the PySpark installed here: ``pyspark.zip``
    inside the installed package, and py4j's ``py4j-<version>-src.zip`` there when that py4j version is the
    installed one. A zip from another Spark (a cluster's own installation) is not one of them."""
    try:
        home = Path(str(importlib.metadata.distribution("pyspark").locate_file("pyspark"))).resolve()
        py4j = importlib.metadata.version("py4j")
    except importlib.metadata.PackageNotFoundError:
        return []
    out = []
    for entry in path:
        p = Path(entry)
        if p.suffix != ".zip" or not p.resolve().is_relative_to(home):
            continue
        m = re.fullmatch(r"py4j-(.+)-src\.zip", p.name)
        if p.name == "pyspark.zip" or (m and m.group(1) == py4j):
            out.append(entry)
    return out


def prefer_installed_pyspark() -> list[str]:
    """Take the installed PySpark's own source zips off ``sys.path`` (see the module's docstring); what it took."""
    dropped = installed_copies(sys.path)
    sys.path[:] = [e for e in sys.path if e not in dropped]
    return dropped


def requested(env: Mapping[str, str] = os.environ) -> list[str]:
    """The modules ``GLISP_WORKER_PRELOAD`` names, in its order."""
    return [n.strip() for n in env.get(PRELOAD_ENV, "").split(",") if n.strip()]


if __name__ == "__main__":
    prefer_installed_pyspark()
    for _name, _why in preload(requested()).items():
        if _why:  # in the executor's log: the tasks that need it will fail with the same error
            print(f"glisp_spark.daemon: not preloaded {_name}: {_why}", file=sys.stderr, flush=True)
    from pyspark.daemon import manager

    manager()
