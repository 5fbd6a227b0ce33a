"""What ``glisp report`` checks of a version's artifacts: missing records, missing, truncated or damaged files.

By default (cheap, on every report) it lists and sizes files only: each stage's output exists, every
stage it depends on has a record, and each serialized partition holds every file its ``meta.json``
names at the recorded size. ``--verify`` also reads every partition file and compares its SHA-256
with the one the writer recorded. Everything goes through the storage layer, so a version in an
object store is checked the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.manifest import Manifest
from glisp_core.storage.store import Store
from glisp_core.storage.uri import StoreURI


def problems(dv: DatasetVersion, manifest: Manifest, verify: bool = False) -> list[str]:
    """One line per missing, truncated or damaged artifact of ``dv`` (empty when all is well)."""
    store, out = dv.store, []
    for name, rec in sorted(manifest.stages.items()):
        out += [
            f"stage {name}: depends on stage {dep!r}, whose record is missing"
            for dep in rec.depends
            if dep not in manifest.stages
        ]
        where = dv.path / rec.path
        if not store.exists(where):
            out.append(f"stage {name}: its output {where} is missing")
        elif name.startswith("serialize/"):
            out += [f"stage {name}: {p}" for p in _partition_problems(store, where, verify)]
    if "ingest" not in manifest.stages and manifest.stages:
        out.append("stage ingest: its record is missing (every later stage reads its output)")
    return out


def _partition_problems(store: Store, run_dir: StoreURI, verify: bool) -> Iterator[str]:
    for part in sorted(n for n in store.names(run_dir) if n.startswith("part-")):
        d = run_dir / part
        text = store.read_text(d / "meta.json")
        if text is None:
            yield f"{d / 'meta.json'} is missing"
            continue
        try:
            meta = json.loads(text)
            fields = dict(meta["fields"])
        except (ValueError, KeyError, TypeError) as e:
            yield f"{d / 'meta.json'} is damaged ({e!r})"
            continue
        sizes, algo = dict(store.files(d)), str(meta.get("checksum_algo", "sha256"))
        for name, fm in sorted(fields.items()):
            file = str(fm.get("file", f"{name}.bin"))
            size, want = sizes.get(file), int(fm.get("nbytes", -1))
            if size is None:
                yield f"{d / file} (field {name}) is missing"
            elif size != want:
                yield f"{d / file} (field {name}) is truncated or padded: {size} bytes, recorded {want}"
            elif verify and "checksum" in fm and store.digest(d / file, algo) != fm["checksum"]:
                yield f"{d / file} (field {name}) does not match its recorded hash: the file is damaged"
