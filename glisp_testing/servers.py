"""A serve-cluster for a benchmark or a test: started in a work directory, its cluster file beside it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from glisp_core.dataset.layout import DatasetVersion
from glisp_serving.cluster.child import start_cluster


def serve_in(dv: DatasetVersion, run: str, workdir: Path, threads: int) -> tuple[subprocess.Popen[bytes], Path]:
    """serve-cluster of ``run`` (``threads`` per server) and its cluster file, once every server is SERVING."""
    cf = workdir / f"{dv.graph}-{run}.json"
    return start_cluster(str(dv.path), run, cf, threads=threads), cf
