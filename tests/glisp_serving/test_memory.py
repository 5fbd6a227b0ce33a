"""The server's memory accounting and the compiler-page release, in process (no server needed)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import njit

from glisp_serving.server.memory import _clean_mappings, release_clean_library_pages, snapshot

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc smaps")


def _llvm_resident() -> int:
    return sum(rss for _, _, rss in _clean_mappings("libllvmlite"))


def _touch_llvm() -> None:
    """Read one byte of every page of libLLVM's read-only mappings, so all of them are resident whatever
    the kernel reclaimed earlier in this (long) test process."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and "libllvmlite" in fields[5] and fields[1] in ("r--p", "r-xp"):
            start, end = (int(x, 16) for x in fields[0].split("-"))
            pages = np.ctypeslib.as_array((ctypes.c_uint8 * (end - start)).from_address(start))
            int(pages[::4096].sum())


def _kernel_reports_clean_llvm_pages() -> bool:
    """Whether /proc/self/smaps shows any libLLVM mapping with resident pages and no dirty or anonymous
    ones, read with a parser of its own. Sandboxed kernels (gVisor and the like) report every private
    mapping's pages as dirty and anonymous; there is nothing the release could drop there."""
    blocks = Path("/proc/self/smaps").read_text().split("\n")
    head, fields = "", {}
    for line in blocks + ["0-0 end"]:
        parts = line.split()
        if parts and "-" in parts[0] and not parts[0].endswith(":"):
            if "libllvmlite" in head and fields.get("Rss:", 0) > 0:
                if fields.get("Private_Dirty:", 1) == 0 and fields.get("Anonymous:", 1) == 0:
                    return True
            head, fields = line, {}
        elif len(parts) >= 2 and parts[1].isdigit():
            fields[parts[0]] = int(parts[1])
    return False


def test_release_drops_llvm_pages_and_compiled_code_still_runs():
    @njit(nogil=True)
    def total(a):
        s = 0
        for x in a:
            s += x
        return s

    assert total(np.arange(10)) == 45  # compiled
    _touch_llvm()
    if not _kernel_reports_clean_llvm_pages():
        pytest.skip("this kernel reports no clean libLLVM pages in smaps (sandboxed /proc)")
    before_llvm, before_rss = _llvm_resident(), snapshot()["rss"]
    assert before_llvm > 8 * 2**20
    freed = release_clean_library_pages()
    assert freed >= before_llvm * 0.9
    assert _llvm_resident() < before_llvm * 0.1
    assert snapshot()["rss"] <= before_rss - freed * 0.9
    assert total(np.arange(100)) == 4950  # compiled code is not in those pages

    @njit(nogil=True)
    def biggest(a):
        return a.max()

    assert biggest(np.array([3.0, 7.0, 1.0])) == 7.0  # compiling again faults the pages it needs back in
    assert _llvm_resident() > 0


def test_release_skips_other_libraries():
    assert release_clean_library_pages("no-such-library-name") == 0


_RETENTION = """
import sys
import numpy as np
from glisp_serving.server.memory import map_large_allocations, snapshot
if sys.argv[1] == "1":
    assert map_large_allocations()
a = np.ones(20 << 20, np.uint8); del a         # glibc's dynamic threshold climbs to 20 MiB here
base = snapshot()["anon"]
b = np.ones(20 << 20, np.uint8)                 # ... so this buffer comes from the heap
pin = [bytes(100) for _ in range(2000)]         # small blocks above it keep the heap from shrinking
del b
print((snapshot()["anon"] - base) >> 20)
"""


def _retained_mib(fixed: bool) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _RETENTION, "1" if fixed else "0"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    return int(out.stdout.split()[-1])


def test_map_large_allocations_returns_freed_buffers():
    assert _retained_mib(fixed=False) >= 15  # the default heap keeps a freed response buffer resident
    assert _retained_mib(fixed=True) <= 3


_KEEPER = """
import ctypes, ctypes.util, json, threading
from glisp_serving.server.memory import HeapKeeper, anon_bytes
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
t = [0.0]
keeper = HeapKeeper(slack=8 << 20, every_s=1.0, clock=lambda: t[0])
base = anon_bytes()
pins = []

def burst(n, keep):                         # in a thread of its own, as gRPC's core threads: an arena of its own
    chunks = []
    for _ in range(n):                      # 64 KiB chunks, under glibc's mmap threshold: the arena's
        chunks.append(libc.malloc(64 << 10))
        ctypes.memset(chunks[-1], 1, 64 << 10)
        pins.append(libc.malloc(1024))      # a live chunk after each keeps its pages from the arena's top
        ctypes.memset(pins[-1], 2, 1024)
    if not keep:
        for c in chunks:
            libc.free(c)

def run(n, keep=False):
    th = threading.Thread(target=burst, args=(n, keep))
    th.start()
    th.join()

run(800)                                    # 50 MiB freed, none of it given back by free()
out = {"held": anon_bytes() - base}
t[0] = 0.5
out["early"] = keeper.tick()                # not due yet
t[0] = 1.0
out["due"] = keeper.tick()
out["after"] = anon_bytes() - base
run(400, keep=True)                         # 25 MiB in use: a release frees none of it ...
t[0] = 2.0
out["live"] = keeper.tick()
t[0] = 3.0
out["again"] = keeper.tick()                # ... and is not tried again while it stays in use
out["releases"], out["released"] = keeper.releases, keeper.released_bytes
print(json.dumps(out))
"""


def test_the_heap_keeper_hands_freed_pages_back_once_memory_grew():
    import json

    out = subprocess.run(
        [sys.executable, "-c", _KEEPER],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    r = json.loads(out.stdout.splitlines()[-1])
    assert r["held"] >= 40 << 20, r  # the freed chunks stay resident between the pins
    assert r["early"] is False and r["due"] is True, r
    assert r["after"] <= 8 << 20, r  # given back
    assert r["live"] is True and r["again"] is False, r
    assert r["releases"] == 2 and r["released"] >= 40 << 20, r
