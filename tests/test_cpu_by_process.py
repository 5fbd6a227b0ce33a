"""tools/cpu_by_process.py: the kernel's accounting records read as linux/acct.h lays them out, and every
process's CPU summed into its ancestors', reused pids and orphans included. Records are built here byte by
byte (turning accounting on would take the machine's one accounting file from whoever measures)."""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "cpu_by_process", Path(__file__).parents[1] / "tools" / "cpu_by_process.py"
)
assert _spec is not None and _spec.loader is not None
cpu = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = cpu  # its dataclass looks its module up
_spec.loader.exec_module(cpu)


def record(pid: int, ppid: int, comm: str, utime: int, stime: int, start: int, version: int = 3) -> bytes:
    """One struct acct_v3 at linux/acct.h's offsets: the times as comp_t, elapsed 1.5 s."""
    b = bytearray(64)
    b[1] = version
    struct.pack_into("<II", b, 16, pid, ppid)
    struct.pack_into("<I", b, 24, start)
    struct.pack_into("<f", b, 28, 150.0)
    struct.pack_into("<HH", b, 32, utime, stime)
    b[48 : 48 + len(comm)] = comm.encode()
    return bytes(b)


@pytest.mark.parametrize(
    ("encoded", "ticks"),
    [(0, 0), (8191, 8191), ((1 << 13) | 1024, 8192), ((2 << 13) | 5, 320), ((7 << 13) | 1, 8**7)],
)
def test_comp_t_is_13_bits_of_mantissa_and_a_base_8_exponent(encoded: int, ticks: int) -> None:
    assert cpu.comp_t(encoded) == ticks


def test_records_read_at_the_kernels_offsets_and_other_versions_skipped() -> None:
    data = record(42, 7, "java", 250, (1 << 13) | 1000, 1000) + record(43, 7, "old", 1, 1, 1000, version=2)
    (p,) = cpu.read_records(data)
    assert (p.pid, p.ppid, p.comm, p.start) == (42, 7, "java", 1000)
    assert p.cpu_s == pytest.approx(2.5 + 80.0)
    assert p.elapsed_s == pytest.approx(1.5)


def test_descendants_count_in_their_ancestors_with_reused_pids_and_orphans() -> None:
    data = b"".join(
        [
            record(10, 1, "python", 100, 0, 100),  # a driver: 1 s
            record(11, 10, "java", 200, 0, 101),  # its JVM: 2 s
            record(12, 11, "chmod", 50, 0, 101),  # forked by the JVM in the same second: 0.5 s
            record(13, 1, "java", 400, 0, 102),  # a JVM that outlived its driver: recorded under init
            record(14, 13, "python", 100, 0, 103),  # its worker still names it
            record(10, 1, "python", 300, 0, 200),  # pid 10 again, later: 3 s
            record(15, 10, "python", 700, 0, 201),  # the second pid 10's child, not the first's
        ]
    )
    procs = list(cpu.read_records(data))
    total = dict(zip([(p.pid, p.start) for p in procs], cpu.subtree_cpu(procs), strict=True))
    assert total[(10, 100)] == pytest.approx(3.5)
    assert total[(11, 101)] == pytest.approx(2.5)
    assert total[(13, 102)] == pytest.approx(5.0)
    assert total[(10, 200)] == pytest.approx(10.0)
    out = cpu.report(procs, top=3)
    assert "7 processes, 18.5 CPU-s" in out
    assert out.splitlines()[1].split() == ["12.0", "CPU-s", "4", "x", "python"]  # per command name, the most first
