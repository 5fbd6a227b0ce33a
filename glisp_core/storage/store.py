"""One store: a pyarrow filesystem opened at a URI, with the few operations the dataset protocol needs.

Why pyarrow.fs: Spark's Python workers already carry pyarrow (Arrow is how they exchange batches with the
JVM), its S3, GCS, Azure and HDFS filesystems read credentials the way each store's own tools do, and Parquet
reads and writes go through it with no copy. What differs between stores (the conditional create the publish
protocol needs, a consistent read of a small object, the credentials chain) is each backend's
(:mod:`glisp_core.storage.backend`, one module per store in ``glisp_core.storage.backends``); the registry
(:mod:`glisp_core.storage.registry`) picks it by the URI's scheme.

Paths inside a store are ``/``-separated and relative to nothing: ``Store.at(uri)`` turns a URI into the
filesystem path (``/abs/path`` locally, ``bucket/key`` on S3).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pyarrow.fs as pafs

from glisp_core.storage.backend import Backend, refusal, unsafe_publish
from glisp_core.storage.registry import open_backend
from glisp_core.storage.uri import StoreError, StoreURI, parse_uri

LIST_TRIES = 3
F = TypeVar("F", bound=Callable[..., Any])


def _named(arg: int = 0) -> Callable[[F], F]:
    """A store call whose failure of the store itself (credentials, bucket, endpoint, timeout) is raised as a
    StoreUnavailable naming the URI (argument ``arg``) and what to do, at once and in every process, instead
    of the client library's own words (which the CLI would take for a Spark failure). A missing object and
    any other error pass through unchanged."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def call(self: Store, *args: Any, **kw: Any) -> Any:
            u = args[arg] if len(args) > arg and isinstance(args[arg], (str, StoreURI)) else self.root
            with self.failures(u):
                return fn(self, *args, **kw)

        return call  # type: ignore[return-value]

    return wrap


class Store:
    """A filesystem and the URI it was opened at; ``uri`` arguments are StoreURIs or strings of that store."""

    def __init__(self, uri: str | os.PathLike[str] | StoreURI, what: str = "dataset.root") -> None:
        self.root = uri if isinstance(uri, StoreURI) else parse_uri(uri, what)
        self.what = what
        self.backend: Backend = open_backend(self.root)
        self.fs = self.backend.fs
        self._checked = False

    # ---- addressing ----
    def uri(self, *parts: str) -> StoreURI:
        return self.root.join(*parts)

    def at(self, uri: StoreURI | str) -> str:
        """The filesystem path of ``uri`` (a StoreURI, a full URI string or a path relative to the root)."""
        return self.backend.path(self._as_uri(uri))

    def _as_uri(self, uri: StoreURI | str) -> StoreURI:
        if isinstance(uri, StoreURI):
            return uri
        if "://" in uri or uri.startswith("/"):
            return parse_uri(uri, self.what)
        return self.root.join(uri)

    # ---- reachability ----
    @_named()
    def check(self) -> None:
        """Fail at once, naming the URI and what to do, when the store cannot be reached or read (once per
        Store: the pipeline's built-in copy and its ingest both ask)."""
        if self._checked:
            return
        bucket = self.backend.bucket_path()
        try:
            self.fs.get_file_info(self.at(self.root))
            missing = bucket is not None and self.fs.get_file_info(bucket).type == pafs.FileType.NotFound
        except OSError as e:
            raise self.backend.failure(self.root, self.what, e) or StoreError(
                self.backend.explain(self.root, self.what, e)
            ) from None
        if missing:
            raise StoreError(f"{self.what} {self.root}: bucket {bucket!r} does not exist: create it first")
        self._checked = True

    def check_publishable(self, uri: StoreURI | str) -> None:
        """Refuse, before any work, to publish where the backend cannot create an object exclusively, unless
        the user opted in to check-then-write (docs/storage.md)."""
        if not self.backend.capabilities.conditional_create and not unsafe_publish():
            raise StoreError(refusal(self.backend, self._as_uri(uri)))

    # ---- small objects ----
    @_named()
    def read_bytes(self, uri: StoreURI | str) -> bytes:
        """The whole object as one version of it (FileNotFoundError when it does not exist)."""
        return self.backend.get(self._as_uri(uri))

    def read_text(self, uri: StoreURI | str) -> str | None:
        """The object's text, or None when it does not exist."""
        try:
            return self.read_bytes(uri).decode()
        except FileNotFoundError:
            return None

    @_named()
    def write_bytes(self, uri: StoreURI | str, data: bytes) -> None:
        """Replace the object whole: a reader sees the old bytes or the new ones, never part of them."""
        self.backend.put(self._as_uri(uri), data)

    @_named()
    def create_exclusive(self, uri: StoreURI | str, data: bytes) -> bool:
        """Write the object only if it does not exist yet; False when it does (another writer came first).

        Where the backend has no conditional create this refuses (StoreError naming the URI), unless the user
        opted in to check-then-write: then two writers racing on one name can both believe they won.
        """
        u = self._as_uri(uri)
        if self.backend.capabilities.conditional_create:
            return self.backend.create_exclusive(u, data)
        self.check_publishable(u)
        if self.exists(u):
            return False
        self.write_bytes(u, data)
        return True

    # ---- tables ----
    @_named()
    def read_table(self, uri: StoreURI | str, **kw: Any) -> Any:
        """A Parquet file or directory as a pyarrow Table (``columns=``, ``filters=`` as pyarrow takes them)."""
        import pyarrow.parquet as pq

        return pq.read_table(self.at(uri), filesystem=self.fs, **kw)

    @_named(1)
    def write_table(self, table: Any, uri: StoreURI | str, **kw: Any) -> None:
        """Write one Parquet file (its directory made first on a local disk)."""
        import pyarrow.parquet as pq

        path = self.at(uri)
        self.backend.make_parent(path)
        pq.write_table(table, path, filesystem=self.fs, **kw)

    # ---- streams ----
    @_named()
    def open_input(self, uri: StoreURI | str) -> Any:
        """A random-access pyarrow file (Parquet footers, Arrow IPC, ``.npy`` headers read in ranges)."""
        return self.fs.open_input_file(self.at(uri))

    @_named()
    def digest(self, uri: StoreURI | str, algo: str = "sha256") -> str:
        """The hex digest of the file's bytes, streamed in 4 MiB blocks (never held whole)."""
        h = hashlib.new(algo)
        with self.fs.open_input_stream(self.at(uri)) as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        return h.hexdigest()

    @_named()
    def open_output(self, uri: StoreURI | str) -> Any:
        """A pyarrow output stream; on an object store the object appears whole when the stream closes."""
        path = self.at(uri)
        self.backend.make_parent(path)
        return self.fs.open_output_stream(path)

    @contextmanager
    def open_atomic(self, uri: StoreURI | str) -> Iterator[Any]:
        """An output stream whose file appears under its name whole, when the block ends, or not at all. A
        failure of the store itself while the stream writes or closes is raised as a StoreUnavailable naming
        the URI, as every other call's (a part upload that timed out is not "an endpoint that cannot be
        reached")."""
        u = self._as_uri(uri)
        with self.failures(u), self.backend.open_atomic(u) as f:
            yield f

    @contextmanager
    def failures(self, uri: StoreURI | str) -> Iterator[None]:
        """A failure of the store itself inside the block raised as a StoreUnavailable naming ``uri`` (see
        :func:`_named`); a missing object and any other error pass through unchanged."""
        try:
            yield
        except (FileNotFoundError, StoreError):
            raise
        except OSError as e:
            err = self.backend.failure(self._as_uri(uri), self.what, e)
            if err is None:
                raise
            raise err from e

    # ---- listing and removal ----
    @_named()
    def exists(self, uri: StoreURI | str) -> bool:
        return bool(self.fs.get_file_info(self.at(uri)).type != pafs.FileType.NotFound)

    @_named()
    def is_dir(self, uri: StoreURI | str) -> bool:
        return bool(self.fs.get_file_info(self.at(uri)).type == pafs.FileType.Directory)

    @_named()
    def entries(self, uri: StoreURI | str, recursive: bool = False) -> list[pafs.FileInfo]:
        """Entries under ``uri`` (none when it does not exist), sorted by path."""
        path = self.at(uri)
        for _ in range(LIST_TRIES):
            try:
                return sorted(self.backend.list(path, recursive), key=lambda i: str(i.path))
            except FileNotFoundError:
                # on a local disk, a directory made (or removed) by another writer while pyarrow listed it
                # fails the listing even with allow_not_found; listing again sees it whole, or not at all
                continue
        return sorted(self.backend.list(path, recursive), key=lambda i: str(i.path))

    def names(self, uri: StoreURI | str) -> list[str]:
        """The names of the entries directly under ``uri``."""
        return [str(i.base_name) for i in self.entries(uri)]

    def files(self, uri: StoreURI | str) -> Iterator[tuple[str, int]]:
        """(path relative to ``uri``, size) of every file below it."""
        base = self.at(uri).rstrip("/") + "/"
        for i in self.entries(uri, recursive=True):
            if i.type == pafs.FileType.File:
                yield str(i.path)[len(base) :], int(i.size)

    @_named()
    def delete(self, uri: StoreURI | str) -> None:
        """Remove a file or everything below a prefix; nothing when it does not exist. Another process removing
        part of it at the same time (two writers clearing one abandoned attempt) is not an error: look again."""
        path = self.at(uri)
        for tries_left in (2, 1, 0):
            info = self.fs.get_file_info(path)
            try:
                if info.type == pafs.FileType.Directory:
                    self.backend.delete_prefix(path)
                elif info.type == pafs.FileType.File:
                    self.backend.delete_file(path)
                return
            except FileNotFoundError:
                if not tries_left:
                    raise

    # ---- bulk copies ----
    @_named()
    def download(self, uri: StoreURI | str, local_dir: Path) -> int:
        """Copy every file below ``uri`` into ``local_dir``; the bytes copied."""
        total = 0
        for rel, size in self.files(uri):
            dst = local_dir / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            pafs.copy_files(f"{self.at(uri)}/{rel}", str(dst), self.fs, pafs.LocalFileSystem())
            total += size
        return total

    @_named(1)
    def upload(self, local_dir: Path, uri: StoreURI | str) -> int:
        """Copy every file below ``local_dir`` to ``uri``; the bytes copied."""
        total = 0
        for p in sorted(local_dir.rglob("*")):
            if p.is_file():
                rel = p.relative_to(local_dir).as_posix()
                dst = f"{self.at(uri)}/{rel}"
                self.backend.make_parent(dst)
                pafs.copy_files(str(p), dst, pafs.LocalFileSystem(), self.fs)
                total += p.stat().st_size
        return total


_STORES: dict[tuple[str, str], Store] = {}


def store_for(uri: StoreURI | str) -> Store:
    """The process's one Store for ``uri``'s filesystem (a bucket, a namenode, the local disk)."""
    u = parse_uri(uri) if not isinstance(uri, StoreURI) else uri
    key = (u.scheme, u.authority)
    if key not in _STORES:
        _STORES[key] = Store(StoreURI(u.scheme, u.authority, "/"))
    return _STORES[key]
