"""Plain helpers shared by the ingest test files (imported as a module; pytest puts this folder on sys.path)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from glisp_core.dataset.manifest import Manifest, read_manifest


def read_table(path: Path) -> pd.DataFrame:
    """A published Parquet directory as pandas (no Spark), in a stable row order."""
    df = pq.read_table(str(path)).to_pandas()
    key = [c for c in ("eid", "vid") if c in df.columns][:1] or list(df.columns)
    return df.sort_values(key).reset_index(drop=True)


def edges_back(dv) -> list[tuple]:
    """Published edges joined back to the user's ids: [(src, dst, etype name, weight|None, ts|None)]."""
    m = read_manifest(dv)
    e = read_table(dv.edges)
    idm = read_table(dv.idmap).set_index("vid")["orig_id"]
    et = m.schema["edge_types"]
    out = []
    for r in e.itertuples(index=False):
        w = float(r.weight) if "weight" in e.columns else None
        ts = int(r.ts) if "ts" in e.columns else None
        out.append((idm[r.src], idm[r.dst], et[r.etype], w, ts))
    return out


def manifest(dv) -> Manifest:
    return read_manifest(dv)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
