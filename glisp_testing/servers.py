"""A serve-cluster for a benchmark or a test: started in a work directory, its cluster file beside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from glisp_core.dataset.layout import DatasetVersion
from glisp_serving.cluster.child import start_cluster


def serve_in(dv: DatasetVersion, run: str, workdir: Path, threads: int) -> tuple[subprocess.Popen[bytes], Path]:
    """serve-cluster of ``run`` (``threads`` per server) and its cluster file, once every server is SERVING."""
    cf = workdir / f"{dv.graph}-{run}.json"
    return start_cluster(str(dv.path), run, cf, threads=threads), cf


def cluster_servers(cluster_pid: int) -> dict[tuple[int, int], Any]:
    """The live servers of the serve-cluster ``cluster_pid`` by (partition, replica), as ``psutil.Process``:
    forked ones (the default) found by their name, ones started with ``--start exec`` by their port file."""
    import psutil

    found: dict[tuple[int, int], Any] = {}
    for p in psutil.Process(cluster_pid).children(recursive=True):
        try:
            name, cmd = p.name(), p.cmdline()
        except psutil.Error:  # ended (or a zombie) between the listing and the read
            continue
        m = re.fullmatch(r"glisp p(\d+) r(\d+)", name)
        if m is None:
            port_file = next((a for a in cmd if a.endswith(".port")), "") if "serve" in cmd else ""
            m = re.search(r"part-(\d+)-r(\d+)\.port$", port_file)
        if m is not None:
            found[(int(m.group(1)), int(m.group(2)))] = p
    return found
