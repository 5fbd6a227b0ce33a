"""CPU time of every process a command starts, counted by the kernel (BSD process accounting, ``acct(2)``).

Sampling ``/proc`` misses processes shorter than its period and classes a JVM by the first command line it
sees; the kernel writes one record per process at its exit instead (its CPU, parent, command name and
lifetime), so every process of a test run is counted, however short. Accounting is the machine's, not the
command's: every process that ends while the command runs is counted (a JVM that outlives its Python parent
is recorded under init, so a count by descent from the command would lose it); run it on a quiet machine.
Needs root, and the machine's one accounting file: nothing else may be using ``acct`` meanwhile.

    sudo .venv/bin/python tools/cpu_by_process.py -- make test-rest
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

# struct acct_v3 (linux/acct.h): flag, version, tty, exit code, uid, gid, pid, ppid, start time, elapsed
# time (a float), user and system time and six more counters as comp_t, command name
_V3 = struct.Struct("<BBHIIIIIIf8H16s")
HZ = 100  # AHZ: comp_t counts hundredths of a second


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    comm: str
    cpu_s: float
    start: int
    elapsed_s: float


def comp_t(value: int) -> int:
    """A comp_t's value: 13 bits of mantissa, 3 bits of base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def read_records(data: bytes) -> Iterator[Proc]:
    """The v3 records of an accounting file (other versions are skipped)."""
    for off in range(0, len(data) - _V3.size + 1, _V3.size):
        f = _V3.unpack_from(data, off)
        if f[1] != 3:
            continue
        comm = f[18].split(b"\0")[0].decode(errors="replace")
        yield Proc(f[6], f[7], comm, (comp_t(f[10]) + comp_t(f[11])) / HZ, f[8], f[9] / HZ)


def subtree_cpu(procs: list[Proc]) -> list[float]:
    """Each process's CPU with that of every descendant, in the order of ``procs``.

    A process that outlives its parent is recorded with init as parent, but its own children still name it.
    A parent id is matched to the latest process of that pid that started no later than the child, so a
    reused pid is not taken for the parent."""
    by_pid: dict[int, list[int]] = collections.defaultdict(list)
    for i, p in enumerate(procs):
        by_pid[p.pid].append(i)
    parent: dict[int, int] = {}
    for i, p in enumerate(procs):
        parents = [j for j in by_pid.get(p.ppid, []) if j != i and procs[j].start <= p.start]
        if parents:
            parent[i] = max(parents, key=lambda j: procs[j].start)
    total = [p.cpu_s for p in procs]
    for i, p in enumerate(procs):  # each process's own CPU added to every ancestor's
        j, hops = parent.get(i), 0
        while j is not None and hops < 64:  # bounded: damaged records must not make a loop
            total[j] += p.cpu_s
            j, hops = parent.get(j), hops + 1
    return total


def report(procs: list[Proc], top: int = 15) -> str:
    """CPU per command name, then the processes with the most CPU, own and with their descendants."""
    lines = [f"{len(procs)} processes, {sum(p.cpu_s for p in procs):,.1f} CPU-s"]
    names: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for p in procs:
        names[p.comm][0] += 1
        names[p.comm][1] += p.cpu_s
    lines += [
        f"{cpu:10.1f} CPU-s {n:7d} x {name}" for name, (n, cpu) in sorted(names.items(), key=lambda x: -x[1][1])[:top]
    ]
    sub = subtree_cpu(procs)
    lines.append(f"{'own':>10} {'with children':>14} {'lifetime s':>11}  pid  command")
    for i in sorted(range(len(procs)), key=lambda i: -procs[i].cpu_s)[:top]:
        p = procs[i]
        lines.append(f"{p.cpu_s:10.1f} {sub[i]:14.1f} {p.elapsed_s:11.1f}  {p.pid}  {p.comm}")
    return "\n".join(lines)


def _acct(path: str | None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(path.encode() if path else None) != 0:
        raise OSError(ctypes.get_errno(), f"acct({path!r}): {os.strerror(ctypes.get_errno())} (root is needed)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--keep", help="keep the accounting file at this path")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run")
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("give the command after --")
    if args.keep:
        path = args.keep
        open(path, "wb").close()  # acct(2) appends to a file that exists
    else:
        fd, path = tempfile.mkstemp(prefix="glisp-acct-")
        os.close(fd)
    _acct(path)
    try:
        rc = subprocess.call(cmd)
    finally:
        _acct(None)
    with open(path, "rb") as f:
        print(report(list(read_records(f.read())), args.top), file=sys.stderr)
    if not args.keep:
        os.unlink(path)
    return rc


if __name__ == "__main__":
    sys.exit(main())
