"""What a server's memory is made of, for the Stats RPC and the benchmark.

A server's RSS mixes three things: the Python/numba/gRPC runtime (numba alone maps libLLVM, about
120 MiB of mostly shared pages), the partition's memory-mapped files (resident only where touched,
page cache shared with every other process reading them), and anonymous memory grown while serving
(request buffers, allocator arenas). ``snapshot`` separates them so that the part attributable to the
partition can be compared with the partition's file bytes: ``rss - baseline`` where the baseline is
taken after imports and kernel warm-up on a tiny synthetic partition, before the real one is opened.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from pathlib import Path

import psutil


def _status_kib() -> dict[str, int]:
    """RssAnon/RssFile/RssShmem of /proc/self/status in bytes ({} off Linux)."""
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "RssFile", "RssShmem"):
                out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def mapped_resident(under: Path) -> int:
    """Resident bytes of the file mappings under ``under`` (the partition's memmaps); 0 if unreadable."""
    prefix = str(Path(under).resolve())
    try:
        return int(sum(m.rss for m in psutil.Process().memory_maps(grouped=True) if m.path.startswith(prefix)))
    except (psutil.Error, OSError, AttributeError):
        return 0


def snapshot(partition_dir: Path | None = None) -> dict[str, int]:
    """rss, uss, pss (0 when psutil cannot read smaps), anon/file resident bytes, and partition pages."""
    p = psutil.Process()
    out = {"rss": int(p.memory_info().rss), "uss": 0, "pss": 0}
    try:
        full = p.memory_full_info()
        out["uss"], out["pss"] = int(full.uss), int(getattr(full, "pss", 0))
    except (psutil.Error, OSError, AttributeError):
        pass
    st = _status_kib()
    out["anon"] = st.get("RssAnon", 0)
    out["file"] = st.get("RssFile", 0) + st.get("RssShmem", 0)
    out["partition_resident"] = mapped_resident(partition_dir) if partition_dir is not None else 0
    return out


def release_free_heap() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc ``malloc_trim``; no-op elsewhere)."""
    gc.collect()
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):
        pass
