"""Result lines of earlier rungs rebuilt from their published tables (``docs/results/scale-*.md``), so that
``bench/scale.py --report`` fits exponents and plots over rungs whose result files are gone.

A rebuilt line has what the table shows (seconds, peak MB per role, I/O, output, jobs, shuffle); its total
peak is the sum of the roles' peaks and it has no figures (``extra``). The new root's result file gets the
rebuilt lines first, then every line of ``--root``'s own file (a later line of a rung and stage wins).

    .venv/bin/python bench/scale_rebuild.py --root /tmp/glisp-scale --out /tmp/glisp-scale-all \\
        docs/results/scale-2026-11-29.md:s16,s18 docs/results/scale-2026-11-29-rmat22.md:s20,s22
    .venv/bin/python bench/scale.py --root /tmp/glisp-scale-all --report
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

MB = 2**20


def _num(s: str) -> float:
    return 0.0 if s.strip() in ("-", "") else float(s.replace(",", ""))


def rebuilt(row: str, doc: str, rungs: set[str]) -> dict[str, Any] | None:
    """One table row as a result line (None for any other line of the page)."""
    f = row.split()
    if len(f) < 15 or f[0] not in rungs or ":" in f[1] or not f[2].replace(",", "").isdigit():
        return None
    rung, stage, edges = f[0], f[1].rstrip("*"), int(f[2].replace(",", ""))
    wall, drv, jvm, wk = _num(f[3]), _num(f[5]), _num(f[6]), f[7]
    servers, i = ([], 9) if f[8] == "-" else ([_num(f[8])] * int(f[9].lstrip("x")), 10)
    trainer, rd, wr, out, jobs, sh = (
        _num(f[i]),
        _num(f[i + 1]),
        _num(f[i + 2]),
        _num(f[i + 3]),
        f[i + 4],
        _num(f[i + 5]),
    )
    wsum, wmax = (_num(wk.split("/")[0]), _num(wk.split("/")[1])) if wk != "-" else (0.0, 0.0)
    rss = {"driver": drv, "jvm": jvm, "workers": wsum, "worker_max": wmax, "servers": servers, "trainer": trainer}
    rss["total"] = (trainer or drv) + jvm + wsum + sum(servers)
    spark = {} if jobs == "-" else {"apps": 1, "jobs": int(jobs), "shuffle_write_bytes": sh * MB}
    return {
        "rung": rung, "scale": int(rung[1:]), "edge_factor": 16, "edges": edges, "stage": stage,
        "prep": f[1].endswith("*"), "cmd": f"(rebuilt from {doc})", "wall_s": wall, "lock_wait_s": 0.0, "cores": 2,
        "edges_per_s_core": round(edges / wall / 2, 1), "rss_mb": rss,
        "io": {"source": doc, "read_bytes": rd * MB, "write_bytes": wr * MB}, "out_bytes": out * MB,
        "spark": spark, "extra": {}, "finished_at": "",
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tables", nargs="+", help="PAGE:RUNG,RUNG (the rungs of that page's table to take)")
    ap.add_argument("--root", required=True, help="a ladder root whose own lines follow the rebuilt ones")
    ap.add_argument("--out", required=True, help="the new root (its scale-results.jsonl is written)")
    args = ap.parse_args(argv)
    lines = []
    for spec in args.tables:
        doc, rungs = spec.rsplit(":", 1)
        for row in Path(doc).read_text().splitlines():
            line = rebuilt(row, doc, set(rungs.split(",")))
            if line is not None:
                lines.append(json.dumps(line))
    own = Path(args.root) / "scale-results.jsonl"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mine = [ln for ln in own.read_text().splitlines() if ln.strip()] if own.exists() else []
    (out / "scale-results.jsonl").write_text("\n".join(lines + mine) + "\n")
    print(f"{len(lines)} rebuilt lines, {len(mine)} of {own}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
