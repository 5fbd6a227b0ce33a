"""A server's local copy of a partition whose dataset lives on an object store.

The sampling kernels read a partition through memory maps, which need a local file: a server given an
``s3://`` dataset first copies its partition into ``serve.cache_dir``, at
``<cache_dir>/<graph>/<version>/<attempt>/part-NNNNN`` (the serialize attempt's name is in the path, so a
re-published run is a new entry, never a stale one). The copy lands in a temporary directory and is renamed
into place only after every file matched the hash its writer recorded in ``meta.json``: a crash leaves a
temporary directory, never an entry that looks valid. A restart reuses the entry after checking it (sizes
always; content hashes unless ``serve.verify = "off"``); a corrupt or partial entry is discarded and
copied again. A local dataset is memory-mapped where it is, as before.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

from glisp_core.config import ServeConfig
from glisp_core.dataset.layout import DatasetVersion
from glisp_core.errors import FormatError, StageError
from glisp_core.partition_format import open_partition
from glisp_core.partition_format.integrity import verify_checksums
from glisp_core.storage.uri import StoreURI


def _say(msg: str) -> None:
    print(f"glisp serve: {msg}", flush=True)  # the server's own lines go to stdout, as in servicer.py


def cache_entry(dv: DatasetVersion, src: StoreURI, cache_dir: str | os.PathLike[str]) -> Path:
    """Where the partition at ``src`` (``.../serialize/<run>/<attempt>/part-NNNNN``) is cached."""
    return Path(cache_dir).expanduser() / dv.graph / dv.version / src.parent.name / src.name


def local_partition(dv: DatasetVersion, run: str, part: int, cfg: ServeConfig) -> tuple[Path, bool]:
    """The partition as a local directory, and whether its content hashes were checked on the way here.

    A local dataset is its own directory (nothing copied, nothing hashed here); a remote one is the cache
    entry, reused when it checks out, else downloaded and verified.
    """
    src = dv.partition_dir(run, part)
    if src.is_local:
        return src.local, False
    return cached_copy(dv, src, cfg.cache_dir, cfg.verify != "off", f"partition {part}")


def cached_copy(
    dv: DatasetVersion, src: StoreURI, cache_dir: str | os.PathLike[str], verify: bool, what: str
) -> tuple[Path, bool]:
    """The cache entry of the remote partition ``src``: reused when it checks out (content hashes too with
    ``verify``), else downloaded and verified; and whether its hashes were checked. Inference tasks on an
    object-store dataset share these entries with the servers of their host."""
    entry = cache_entry(dv, src, cache_dir)
    listing = dict(dv.store.files(src))
    if not listing:
        raise StageError(f"{src}: no partition files in the store")
    if entry.is_dir():
        problem = _entry_problem(entry, listing, hashes=verify)
        if problem is None:
            _say(f"{what}: reusing the cached copy {entry}")
            return entry, verify
        _say(f"{what}: discarding the cache entry {entry} ({problem}); downloading it again")
        _discard(entry)
    _download(dv, src, entry, listing)
    return entry, True


def _entry_problem(entry: Path, listing: dict[str, int], hashes: bool) -> str | None:
    """What is wrong with a cache entry (a file missing or of another size, a hash mismatch), or None."""
    for rel, size in listing.items():
        p = entry / rel
        if not p.is_file():
            return f"{rel} missing"
        if p.stat().st_size != size:
            return f"{rel} has {p.stat().st_size} bytes, the store {size}"
    if not hashes:
        return None
    try:
        bad = verify_checksums(open_partition(entry, verify=False))
    except FormatError as e:
        return str(e)
    return f"content hash mismatch in {', '.join(bad)}" if bad else None


def _download(dv: DatasetVersion, src: StoreURI, entry: Path, listing: dict[str, int]) -> None:
    """Copy ``src`` into a temporary directory beside ``entry``; rename it into place once every hash matched."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = entry.parent / f".{entry.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    t = time.perf_counter()
    try:
        copied = dv.store.download(src, tmp)
        bad = verify_checksums(open_partition(tmp, verify=False))
        if bad:
            raise StageError(f"{src}: the downloaded copy does not match its published hashes: {', '.join(bad)}")
        try:
            os.rename(tmp, entry)
        except OSError:
            if not entry.is_dir():  # not another server of this partition having renamed its copy first
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _say(
        f"downloaded {src} ({len(listing)} files, {copied} bytes) into {entry} in {time.perf_counter() - t:.1f} s, "
        "content hashes verified"
    )


def _discard(entry: Path) -> None:
    """Move the entry aside first (one rename), so no one sees it half removed; a server that still maps
    its files keeps reading them until it unmaps them."""
    aside = entry.parent / f".{entry.name}.{uuid.uuid4().hex[:8]}.discarded"
    os.rename(entry, aside)
    shutil.rmtree(aside, ignore_errors=True)
