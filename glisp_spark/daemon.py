"""PySpark's Python worker daemon, with the libraries a stage's tasks use imported once, before it forks.

PySpark starts one daemon per executor (per Python and environment); the daemon forks a worker for each task
slot, and every fresh worker imports what its tasks need: numpy, pyarrow and numba (about 1 CPU-s), and for
inference torch with torch_geometric (about 4.5 CPU-s, a third of it torch's compiler stack, which PyG
imports). Workers are forked again whenever one was idle for a minute or ran in another environment, so a
local session forks dozens. Imported here, in the daemon, each worker starts with them in its copy-on-write
memory. Which modules: the executor environment's ``GLISP_WORKER_PRELOAD`` (comma-separated), set by
:func:`glisp_spark.session.get_spark` for a local master.

PySpark's own daemon imports nothing before it forks, so that no library's thread is running at a fork. The
libraries preloaded here start none at import but the Arrow allocator's background thread, which jemalloc
itself makes safe across fork. A module that cannot be imported is left to the task, which fails with its own
error; nothing an import prints reaches the daemon's stdout, where it tells the JVM its port.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Mapping

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


def requested(env: Mapping[str, str] = os.environ) -> list[str]:
    """The modules ``GLISP_WORKER_PRELOAD`` names, in its order."""
    return [n.strip() for n in env.get(PRELOAD_ENV, "").split(",") if n.strip()]


if __name__ == "__main__":
    for _name, _why in preload(requested()).items():
        if _why:  # in the executor's log: the tasks that need it will fail with the same error
            print(f"glisp_spark.daemon: not preloaded {_name}: {_why}", file=sys.stderr, flush=True)
    from pyspark.daemon import manager

    manager()
