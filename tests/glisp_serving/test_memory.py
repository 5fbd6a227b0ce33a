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
