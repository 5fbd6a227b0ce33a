"""Ingest throughput and fixed cost: R-MAT CSV at several scales and a built-in graph, with the phases.

    .venv/bin/python bench/ingest.py --scales 19,20,21 --builtin cora       # this tree, local[2]
    .venv/bin/python bench/ingest.py --scales 19 --baseline-code /tmp/main   # against another checkout

Every measurement is a fresh process (``--child``): start Spark, run one tiny job (Spark has started),
then time ``run_ingest`` alone; the CPU seconds are those of the whole process tree (driver, JVM,
Python workers; Linux /proc). So the built-in graph's time is the fixed cost of an ingest right after
Spark has started, and ``--baseline-code DIR`` measures another source tree (e.g. ``git archive main``)
the same way on the same input, for ratios taken in the same run. The R-MAT inputs are generated once
per scale under the work directory (kept with --keep DIR, and reused when already there).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path and "--child" not in sys.argv:  # a child imports the tree on its PYTHONPATH
    sys.path.insert(0, str(ROOT))


def tree_cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of a process and all its live descendants (Linux).

    Each live process counts its own time and that of the children it has already reaped (cutime,
    cstime), so Python workers that Spark retired during the run (idle timeout) still count."""
    root = pid or os.getpid()
    procs: dict[int, tuple[int, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                st = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            procs[int(p)] = (int(st[1]), sum(int(x) for x in st[11:15]) / tick)
    keep, changed = {root}, True
    while changed:
        changed = False
        for p, (pp, _) in procs.items():
            if pp in keep and p not in keep:
                keep.add(p)
                changed = True
    return sum(procs[p][1] for p in keep if p in procs)


def load_1min() -> float:
    """The machine's 1-minute load average (how many runnable processes shared the cores)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def cores_of(master: str) -> int:
    m = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if m:
        return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))
    return 1 if master == "local" else os.cpu_count() or 1


# ---- child: one measured ingest ------------------------------------------------------------------
def child(args) -> int:
    from glisp_core.config import SparkConfig, load_config, with_values
    from glisp_core.dataset.manifest import read_manifest
    from glisp_spark.session import get_spark
    from spark_jobs.ingest.job import run_ingest

    spark = get_spark(
        SparkConfig(
            master=args.master, app_name="glisp-bench-ingest", driver_memory=args.driver_memory, log_level="ERROR"
        )
    )
    spark.range(10).count()  # Spark has started
    cfg = with_values(
        load_config(args.config, env={}) if args.config else load_config(env={}), "dataset", root=args.root
    )
    ing = cfg.ingest
    if not args.config:
        from spark_jobs.generate.builtin import builtin_config

        ing = builtin_config(args.builtin, cfg.ingest)
    l0, c0, t0 = load_1min(), tree_cpu_seconds(), time.perf_counter()
    dv = run_ingest(spark, cfg, ing, force=True, log=lambda s: None)
    wall, cpu, load = time.perf_counter() - t0, tree_cpu_seconds() - c0, (l0 + load_1min()) / 2
    rec = read_manifest(dv).stages["ingest"]
    out = {
        "wall_s": wall,
        "cpu_s": cpu,
        "load": load,
        "rows": rec.counts.get("input_edge_rows"),
        "timings": rec.timings,
    }
    print("BENCH " + json.dumps(out), flush=True)
    spark.stop()
    return 0


def measure(code: Path, master: str, driver_memory: str, root: Path, config: Path | None, builtin: str) -> dict:
    """One fresh-process measurement of the ingest in source tree ``code``."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--master", master, "--root", str(root)]
    cmd += ["--driver-memory", driver_memory] + (["--config", str(config)] if config else ["--builtin", builtin])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(code))
    lines = [x for x in res.stdout.splitlines() if x.startswith("BENCH ")]
    if res.returncode != 0 or not lines:
        raise SystemExit(
            f"measurement failed ({code}, {config or builtin}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
        )
    return json.loads(lines[-1][6:])


# ---- parent: inputs, runs, tables ------------------------------------------------------------------
def generate_inputs(scales: list[int], work: Path, master: str, driver_memory: str) -> dict[int, Path]:
    from glisp_core.config import RmatConfig, SparkConfig
    from glisp_spark.session import get_spark
    from spark_jobs.generate.rmat import generate_rmat

    out, spark = {}, None
    for s in scales:
        d = work / f"rmat{s}"
        if not (d / "ingest.toml").exists():
            spark = spark or get_spark(SparkConfig(master=master, driver_memory=driver_memory, log_level="ERROR"))
            print(f"generating R-MAT scale {s} CSV under {d} ...", flush=True)
            generate_rmat(spark, RmatConfig(scale=s, seed=1), d, fmt="csv")
        out[s] = d / "ingest.toml"
    if spark is not None:
        spark.stop()
    return out


def print_table(head: list[str], rows: list[list[str]]) -> None:
    w = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = lambda r: "  ".join(v.ljust(w[0]) if i == 0 else v.rjust(w[i]) for i, v in enumerate(r))  # noqa: E731
    print(fmt(head))
    print("  ".join("-" * x for x in w))
    for r in rows:
        print(fmt(r))


def phase_rows(t: dict) -> list[list[str]]:
    """Phases in order (seconds, share of the total, Spark jobs), then the tasks' CPU per activity."""
    total = float(t.get("total_s", 0)) or 1.0
    rows = []
    for k, v in t.items():
        if k.endswith("_jobs") and k != "total_jobs":
            name = k[:-5]
            s = float(t.get(f"{name}_s", 0))
            rows.append([f"  {name}", f"{s:.2f}", f"{100 * s / total:.0f}%", str(v)])
    rows.append(["  total", f"{total:.2f}", "100%", str(t.get("total_jobs", "-"))])
    for k, v in t.items():
        if k.startswith("task_") and k.endswith("_cpu_s"):
            rows.append([f"  task CPU: {k[5:-6]}", f"{float(v):.2f}", "", ""])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scales", default="19,20,21", help="comma-separated R-MAT scales ('' for none)")
    ap.add_argument("--builtin", default="cora", help="built-in graph for the fixed cost ('' for none)")
    ap.add_argument("--reps", type=int, default=1, help="measurements per case (the median is shown)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--baseline-code", metavar="DIR", help="another source tree to measure the same way")
    ap.add_argument("--keep", metavar="DIR", help="work directory to keep (inputs are reused when present)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)

    scales = [int(s) for s in args.scales.split(",") if s.strip()]
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="glisp-bench-ingest-")
    work = Path(args.keep or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    trees = [("this", ROOT)] + ([("baseline", Path(args.baseline_code).resolve())] if args.baseline_code else [])
    cores = cores_of(args.master)
    try:
        inputs = generate_inputs(scales, work, args.master, args.driver_memory)
        cases = ([(args.builtin, None)] if args.builtin else []) + [(f"rmat s{s} csv", inputs[s]) for s in scales]
        summary, breakdown, medians = [], {}, {}
        for name, config in cases:
            runs: dict[str, list[dict]] = {tag: [] for tag, _ in trees}
            for _ in range(args.reps):  # the trees take turns, so a change in the machine's load hits both
                for tag, code in trees:
                    r = measure(code, args.master, args.driver_memory, work / "data", config, args.builtin)
                    runs[tag].append(r)
                    print(
                        f"{name} [{tag}]: {r['wall_s']:.1f} s, {r['cpu_s']:.1f} CPU-s, load {r['load']:.1f}", flush=True
                    )
            for tag, _ in trees:
                med = sorted(runs[tag], key=lambda r: r["wall_s"])[len(runs[tag]) // 2]
                wall = statistics.median(r["wall_s"] for r in runs[tag])
                cpu = statistics.median(r["cpu_s"] for r in runs[tag])
                medians[f"{name} [{tag}]"] = (wall, cpu)
                rows = int(med["rows"] or 0)
                summary.append(
                    [
                        f"{name} [{tag}]",
                        f"{rows:,}",
                        f"{wall:.2f}",
                        f"{rows / wall:,.0f}",
                        f"{rows / wall / cores:,.0f}",
                        f"{cpu:.1f}",
                        f"{rows / max(cpu, 1e-9):,.0f}",
                        str(med["timings"].get("total_jobs", "-")),
                        f"{statistics.median(r['load'] for r in runs[tag]):.1f}",
                    ]
                )
                breakdown[f"{name} [{tag}]"] = med["timings"]
        print(
            f"\ningest on {args.master} ({cores} cores), median of {args.reps}; wall = run_ingest after Spark started;"
            " load = the machine's 1-minute load average over the run (above the core count the cores were shared)"
        )
        head = ["case", "edge rows", "wall s", "edges/s", "edges/s/core", "CPU-s", "edges/CPU-s", "jobs", "load"]
        print_table(head, summary)
        if len(trees) > 1:
            print()
            for name, _ in cases:
                (wa, ca), (wb, cb) = medians[f"{name} [this]"], medians[f"{name} [baseline]"]
                print(f"{name}: this tree takes {wa / wb:.2f}x the baseline's wall time and {ca / cb:.2f}x its CPU-s")
        for case, t in breakdown.items():
            if case.endswith("[this]"):
                print(f"\nphases of {case}")
                print_table(["phase", "seconds", "share", "jobs"], phase_rows(t))
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
