"""What a server's memory is made of, for the Stats RPC and the benchmark.

A server's RSS mixes three things: the Python/numba/gRPC runtime (numba alone maps libLLVM, about
120 MiB of mostly shared pages), the partition's memory-mapped files (resident only where touched,
page cache shared with every other process reading them), and anonymous memory grown while serving
(request buffers, allocator arenas). ``snapshot`` separates them so that the part attributable to the
partition can be compared with the partition's file bytes: ``rss - baseline`` where the baseline is
taken after imports and kernel warm-up on a tiny synthetic partition, before the real one is opened.

Large response buffers (a batch's features are megabytes) would otherwise stay in the heap: glibc
raises its mmap threshold after the first large free, so later large buffers come from the heap and
its high-water mark never shrinks (+95–160 MiB on imdb's 1250-d features). ``map_large_allocations``
pins the threshold, so every buffer over it is its own mapping, returned to the OS when freed. Smaller
buffers come from glibc's arenas, which keep freed pages below a live chunk; ``HeapKeeper`` hands them back
once the process's anonymous memory has grown (requests gRPC refuses by size never reach Python).

Once every kernel is compiled, the compiler's own code is dead weight: ``release_clean_library_pages``
unmaps the clean (never written) pages of libLLVM from the process, about 100 MiB of RSS. They stay in
the page cache and fault back in if numba ever compiles again, so this is safe at any time.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import re
import time
from pathlib import Path
from typing import Any

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
    trim_heap()


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, looked up once (``find_library`` runs ``ldconfig``, a subprocess, on every call)."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        return ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None


def _libc_function(fn: str) -> Any:
    """The C library's function ``fn``, or None where there is no such library or function."""
    lib = _libc()
    return getattr(lib, fn, None) if lib is not None else None


def trim_heap() -> bool:
    """glibc's ``malloc_trim(0)``: free pages in every arena go back to the OS. False where there is none."""
    malloc_trim = _libc_function("malloc_trim")
    if malloc_trim is None:
        return False
    malloc_trim(0)
    return True


def anon_bytes() -> int:
    """Anonymous resident bytes of this process now (0 off Linux)."""
    return _status_kib().get("RssAnon", 0)


class HeapKeeper:
    """Hands freed heap pages back to the OS once anonymous memory has grown ``slack`` bytes past the lowest
    level seen since the last release; called from the server's main loop, it checks at most every ``every_s``.

    glibc keeps the pages of freed chunks inside an arena while a live chunk above them pins its top, and
    gRPC's core threads each take an arena: bursts of concurrent requests that gRPC refuses by size (the data
    in flight before each refusal) left 60-130 MiB in a server that nothing ever used again. Neither Python
    nor the servicer sees those calls, so the release follows the process's memory, not the requests. A
    release that finds nothing to free raises the level, so memory that is in use costs one check per
    ``every_s``, not a trim.
    """

    def __init__(self, slack: int = 16 << 20, every_s: float = 1.0, clock=time.monotonic) -> None:
        self.slack, self.every_s, self.clock = slack, every_s, clock
        self.level = anon_bytes()
        self.next_check = clock() + every_s
        self.releases = 0
        self.released_bytes = 0

    def tick(self) -> bool:
        """Release if due and grown; True when it released."""
        now = self.clock()
        if now < self.next_check:
            return False
        self.next_check = now + self.every_s
        anon = anon_bytes()
        if anon < self.level + self.slack:
            self.level = min(self.level, anon)
            return False
        if not trim_heap():
            return False
        self.level = anon_bytes()
        self.releases += 1
        self.released_bytes += max(0, anon - self.level)
        return True


_MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$")
_MADV_DONTNEED = 4


def _clean_mappings(name_part: str) -> list[tuple[int, int, int]]:
    """(start, end, resident bytes) of file mappings whose path contains ``name_part`` and that hold no
    private dirty or anonymous pages, i.e. whose every resident page equals the file's."""
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return []
    out, cur, fields = [], None, {}
    for line in lines + ["0-0 ---- 0 0 0"]:
        m = _MAPPING.match(line)
        if m is None:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Private_Dirty", "Anonymous"):
                fields[key] = int(rest.split()[0]) * 1024
            continue
        if cur is not None and name_part in cur[2] and fields.get("Rss", 0) > 0:
            if fields.get("Private_Dirty", 1) == 0 and fields.get("Anonymous", 1) == 0:
                out.append((cur[0], cur[1], fields["Rss"]))
        cur, fields = (int(m.group(1), 16), int(m.group(2), 16), m.group(3)), {}
    return out


def release_clean_library_pages(name_part: str = "libllvmlite") -> int:
    """Unmap the resident clean pages of the shared libraries matching ``name_part``; returns the bytes.

    ``madvise(MADV_DONTNEED)`` on a private file mapping with no dirty page drops the process's page
    table entries only: the pages stay in the page cache and fault back in on the next access. Mappings
    with any dirty page (relocated data) are left alone, since DONTNEED would revert them to the file.
    Linux only; 0 elsewhere.
    """
    madvise = _libc_function("madvise")
    if madvise is None:
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    freed = 0
    for start, end, rss in _clean_mappings(name_part):
        if madvise(start, end - start, _MADV_DONTNEED) == 0:
            freed += rss
    return freed


_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter


def map_large_allocations(threshold: int = 1 << 20) -> bool:
    """Serve every malloc of ``threshold`` bytes or more by its own mmap (freed straight back to the OS).

    Setting the threshold explicitly also turns off glibc's dynamic threshold, which would otherwise climb
    to the largest freed buffer and keep later ones in the heap. False where there is no glibc mallopt.
    """
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, int(threshold)))
