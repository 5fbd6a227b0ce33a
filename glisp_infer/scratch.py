"""Where an inference task keeps its local files (static caches, its rows for its next layer).

Why memory when there is room: a layer task writes about three times its rows' bytes to local files (its rows in
place in the next layer's static cache, the foreign rows it is sent, the halo it sends), and a disk caps those
writes at its write-back rate: 300 MB/s on the benchmark machine, where a layer of R-MAT 20 at width 256 writes
2.5 GB. The files are scratch, never read by another host or after the run, so a tmpfs (``/dev/shm``) loses
nothing. It is used only when it has room for the run's files on that host, and, inside a memory-limited container
(cgroup v2 or v1: YARN, Kubernetes), when the container's memory has that headroom too (tmpfs pages count against
it). The choice is made once per host and run, by the first task there, and kept in a marker file, so that a
layer's task finds the file its previous layer's task left on the same host.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

SHM = Path("/dev/shm")


def host_scratch(configured: str, token: str, need: int) -> Path:
    """The run's scratch directory on this host: ``configured`` when set, else memory or the temp dir (above)."""
    base = Path(configured) if configured else _chosen_base(token, need)
    d = base / "glisp-infer" / (token or "run")
    d.mkdir(parents=True, exist_ok=True)
    return d


def marker(token: str) -> Path:
    """The file holding this host's choice for the run ``token`` (removed with the run's scratch)."""
    return Path(tempfile.gettempdir()) / "glisp-infer" / f"{token or 'run'}.scratch"


def _chosen_base(token: str, need: int) -> Path:
    m = marker(token)
    try:
        return Path(m.read_text())
    except FileNotFoundError:
        pass
    m.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale([SHM / "glisp-infer", m.parent])
    tmp = m.with_name(f".{m.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(str(SHM if memory_has_room(need) else Path(tempfile.gettempdir())))
    try:
        os.link(tmp, m)  # the first task on this host decides; the others read its choice
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return Path(m.read_text())


STALE_S = 24 * 3600  # a run's scratch untouched this long belongs to a run whose tasks were killed


def sweep_stale(dirs: list[Path], now: float | None = None) -> int:
    """Remove the runs' scratch directories and markers below ``dirs`` untouched for ``STALE_S``: a killed task
    never removes its files, and in memory they would hold the host's RAM until it reboots. Returns how many."""
    import shutil
    import time

    cutoff, gone = (now if now is not None else time.time()) - STALE_S, 0
    for d in dirs:
        try:
            entries = list(d.iterdir())
        except OSError:
            continue
        for e in entries:
            try:
                if e.stat().st_mtime >= cutoff:
                    continue
                shutil.rmtree(e) if e.is_dir() else e.unlink()
                gone += 1
            except OSError:
                pass
    return gone


def memory_has_room(need: int, shm: Path = SHM, meminfo: Path = Path("/proc/meminfo")) -> bool:
    """Whether ``shm`` is a writable directory with ``need`` bytes free, the host has twice ``need`` available
    (a tmpfs's size is nominal, often the whole RAM: its pages take the memory the tasks need; R-MAT 23's
    refresh filled 18 GB of /dev/shm on a 24 GB host and the kernel killed a worker), and the container's
    memory (if limited) has ``need`` bytes of headroom."""
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        return False
    st = os.statvfs(shm)
    if st.f_bavail * st.f_frsize < need:
        return False
    available = host_available(meminfo)
    if available is not None and available < 2 * need:
        return False
    headroom = cgroup_headroom()
    return headroom is None or headroom >= need


def host_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """The host's MemAvailable in bytes (None where the kernel does not say)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cgroup_headroom(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes the container may still use (its memory limit minus its usage), or None when it has no limit."""
    files = (("memory.max", "memory.current"), ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"))
    for limit_file, usage_file in files:
        try:
            limit = (root / limit_file).read_text().strip()
            usage = int((root / usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or int(limit) >= 1 << 60:  # v1 writes "no limit" as a huge number
            return None
        return int(limit) - usage
    return None


MEMORY_FS = ("tmpfs", "ramfs")


def in_memory(path: Path) -> bool:
    """Whether ``path`` lies on a memory filesystem (the mount with the longest prefix of it, in /proc/mounts)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    p, best, kind = os.path.realpath(path), "", ""
    for line in mounts:
        f = line.split()
        if len(f) < 3:
            continue
        mp = f[1].replace("\\040", " ")
        if (p == mp or p.startswith(mp.rstrip("/") + "/")) and len(mp) > len(best):
            best, kind = mp, f[2]
    return kind in MEMORY_FS


def allocate(path: Path, nbytes: int) -> bool:
    """Create ``path`` with ``nbytes`` reserved (not a sparse file), or return False when the filesystem has no
    room: a memory map over a full tmpfs would die with SIGBUS on its first write to a page it cannot have."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, max(nbytes, 1))
        return True
    except OSError:
        os.close(fd)
        fd = -1
        path.unlink(missing_ok=True)
        return False
    finally:
        if fd >= 0:
            os.close(fd)


def disk_scratch(token: str) -> Path:
    """The run's directory in the temp dir: where a file goes when memory turned out to be full."""
    d = Path(tempfile.gettempdir()) / "glisp-infer" / (token or "run")
    d.mkdir(parents=True, exist_ok=True)
    return d


IN_PLACE_SHARE = 0.25  # a static cache's file on disk is read in place when it is at most this share of memory


def reads_in_place(path: Path, meminfo: Path = Path("/proc/meminfo")) -> bool:
    """Whether a task serves its static cache's rows from the file's pages rather than by chunk copies into the
    dynamic cache: the file is in memory (a tmpfs), or the page cache keeps it (at most ``IN_PLACE_SHARE`` of
    the memory the host, and the container if limited, has available when the layer starts).

    Both paths read the same mapped file; a chunk copy pays only where the page cache cannot keep the file and
    the dynamic cache's slots hold the hot chunks. Where it can, each miss copies 64 rows of which a batch uses
    a few: a full run at R-MAT 23 (2.3 GB a task, 24 GB host) took 0.875x with in-place reads."""
    if in_memory(path):
        return True
    try:
        size = path.stat().st_size
    except OSError:
        return False
    room = [x for x in (host_available(meminfo), cgroup_headroom()) if x is not None]
    return bool(room) and size <= IN_PLACE_SHARE * min(room)
