"""One store: a pyarrow filesystem opened at a URI, with the few operations the dataset protocol needs.

Why pyarrow.fs: Spark's Python workers already carry pyarrow (Arrow is how they exchange batches with the
JVM), its S3, GCS and HDFS filesystems read credentials the way each store's own tools do (for S3 the
standard AWS environment variables, ``AWS_ENDPOINT_URL`` included, the shared config files and instance
roles), and Parquet reads and writes go through it with no copy. The one thing it lacks is a conditional
create, which the publish protocol needs on object stores: S3's ``If-None-Match: *`` goes through boto3,
which reads the same credentials.

Paths inside a store are ``/``-separated and relative to nothing: ``Store.at(uri)`` turns a URI into the
filesystem path (``/abs/path`` locally, ``bucket/key`` on S3).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from glisp_core.storage.uri import StoreError, StoreURI, parse_uri

CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 30.0
LIST_TRIES = 3


class Store:
    """A filesystem and the URI it was opened at; ``uri`` arguments are StoreURIs or strings of that store."""

    def __init__(self, uri: str | os.PathLike[str] | StoreURI, what: str = "dataset.root") -> None:
        self.root = uri if isinstance(uri, StoreURI) else parse_uri(uri, what)
        self.what = what
        self.fs = _filesystem(self.root)

    # ---- addressing ----
    def uri(self, *parts: str) -> StoreURI:
        return self.root.join(*parts)

    def at(self, uri: StoreURI | str) -> str:
        """The filesystem path of ``uri`` (a StoreURI, a full URI string or a path relative to the root)."""
        u = self._as_uri(uri)
        return u.path if u.is_local else f"{u.authority}{u.path}".rstrip("/")

    def _as_uri(self, uri: StoreURI | str) -> StoreURI:
        if isinstance(uri, StoreURI):
            return uri
        if "://" in uri or uri.startswith("/"):
            return parse_uri(uri, self.what)
        return self.root.join(uri)

    # ---- reachability ----
    def check(self) -> None:
        """Fail at once, naming the URI and what to do, when the store cannot be reached or read."""
        try:
            self.fs.get_file_info(self.at(self.root))
            missing = self.root.is_object_store and self.fs.get_file_info(self.root.authority).type == (
                pafs.FileType.NotFound
            )
        except OSError as e:
            raise StoreError(_explain(self.root, self.what, e)) from None
        if missing:
            raise StoreError(f"{self.what} {self.root}: bucket {self.root.authority!r} does not exist: create it first")

    # ---- small objects ----
    def read_bytes(self, uri: StoreURI | str) -> bytes:
        """The whole object as one version of it (FileNotFoundError when it does not exist)."""
        u = self._as_uri(uri)
        if u.scheme == "s3":  # one GET: pyarrow's stream reads an object in ranges, which a concurrent
            return _s3_get(u)  # replacement (LATEST, a lease) can interleave; its size comes from a HEAD before
        with self.fs.open_input_stream(self.at(uri)) as f:
            data: bytes = f.read()
            return data

    def read_text(self, uri: StoreURI | str) -> str | None:
        """The object's text, or None when it does not exist."""
        try:
            return self.read_bytes(uri).decode()
        except FileNotFoundError:
            return None

    def write_bytes(self, uri: StoreURI | str, data: bytes) -> None:
        """Replace the object whole: a reader sees the old bytes or the new ones, never part of them."""
        path = self.at(uri)
        if self.root.is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            return
        with self.fs.open_output_stream(path) as f:  # one PUT: atomic on object stores
            f.write(data)

    def create_exclusive(self, uri: StoreURI | str, data: bytes) -> bool:
        """Write the object only if it does not exist yet; False when it does (another writer came first)."""
        path = self.at(uri)
        u = self._as_uri(uri)
        if u.is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # atomic, and fails when the name exists: whole content or nothing
                return True
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
        if u.scheme == "s3":
            return _s3_create_exclusive(u, data)
        if self.exists(u):  # no conditional create here: check, then write (docs/storage.md says what it costs)
            return False
        self.write_bytes(u, data)
        return True

    # ---- tables ----
    def read_table(self, uri: StoreURI | str, **kw: Any) -> Any:
        """A Parquet file or directory as a pyarrow Table (``columns=``, ``filters=`` as pyarrow takes them)."""
        import pyarrow.parquet as pq

        return pq.read_table(self.at(uri), filesystem=self.fs, **kw)

    def write_table(self, table: Any, uri: StoreURI | str, **kw: Any) -> None:
        """Write one Parquet file (its directory made first on a local disk)."""
        import pyarrow.parquet as pq

        path = self.at(uri)
        if self.root.is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(table, path, filesystem=self.fs, **kw)

    # ---- streams ----
    def open_input(self, uri: StoreURI | str) -> Any:
        """A random-access pyarrow file (Parquet footers, Arrow IPC, ``.npy`` headers read in ranges)."""
        return self.fs.open_input_file(self.at(uri))

    def digest(self, uri: StoreURI | str, algo: str = "sha256") -> str:
        """The hex digest of the file's bytes, streamed in 4 MiB blocks (never held whole)."""
        h = hashlib.new(algo)
        with self.fs.open_input_stream(self.at(uri)) as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        return h.hexdigest()

    def open_output(self, uri: StoreURI | str) -> Any:
        """A pyarrow output stream; on an object store the object appears whole when the stream closes."""
        path = self.at(uri)
        if self._as_uri(uri).is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        return self.fs.open_output_stream(path)

    @contextmanager
    def open_atomic(self, uri: StoreURI | str) -> Iterator[Any]:
        """An output stream whose file appears under its name whole, when the block ends, or not at all.

        On a disk a temporary name is renamed over the target. On an object store the object appears when
        the stream closes; pyarrow's stream cannot abort, so after a failure the object its close uploaded
        is deleted again.
        """
        u = self._as_uri(uri)
        if not u.is_local:
            f = self.fs.open_output_stream(self.at(u))
            try:
                yield f
            except BaseException:
                f.close()
                self.delete(u)
                raise
            f.close()
            return
        os.makedirs(os.path.dirname(u.path), exist_ok=True)
        tmp = f"{u.path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        try:
            with pa.OSFile(tmp, "wb") as f:
                yield f
            os.replace(tmp, u.path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    # ---- listing and removal ----
    def exists(self, uri: StoreURI | str) -> bool:
        return bool(self.fs.get_file_info(self.at(uri)).type != pafs.FileType.NotFound)

    def is_dir(self, uri: StoreURI | str) -> bool:
        return bool(self.fs.get_file_info(self.at(uri)).type == pafs.FileType.Directory)

    def entries(self, uri: StoreURI | str, recursive: bool = False) -> list[pafs.FileInfo]:
        """Entries under ``uri`` (none when it does not exist), sorted by path."""
        sel = pafs.FileSelector(self.at(uri), recursive=recursive, allow_not_found=True)
        for _ in range(LIST_TRIES):
            try:
                return sorted(self.fs.get_file_info(sel), key=lambda i: str(i.path))
            except FileNotFoundError:
                # on a local disk, a directory made (or removed) by another writer while pyarrow listed it
                # fails the listing even with allow_not_found; listing again sees it whole, or not at all
                continue
        return sorted(self.fs.get_file_info(sel), key=lambda i: str(i.path))

    def names(self, uri: StoreURI | str) -> list[str]:
        """The names of the entries directly under ``uri``."""
        return [str(i.base_name) for i in self.entries(uri)]

    def files(self, uri: StoreURI | str) -> Iterator[tuple[str, int]]:
        """(path relative to ``uri``, size) of every file below it."""
        base = self.at(uri).rstrip("/") + "/"
        for i in self.entries(uri, recursive=True):
            if i.type == pafs.FileType.File:
                yield str(i.path)[len(base) :], int(i.size)

    def delete(self, uri: StoreURI | str) -> None:
        """Remove a file or everything below a prefix; nothing when it does not exist. Another process removing
        part of it at the same time (two writers clearing one abandoned attempt) is not an error: look again."""
        path = self.at(uri)
        for tries_left in (2, 1, 0):
            info = self.fs.get_file_info(path)
            try:
                if info.type == pafs.FileType.Directory:
                    self.fs.delete_dir(path)
                elif info.type == pafs.FileType.File:
                    self.fs.delete_file(path)
                return
            except FileNotFoundError:
                if not tries_left:
                    raise

    # ---- bulk copies ----
    def download(self, uri: StoreURI | str, local_dir: Path) -> int:
        """Copy every file below ``uri`` into ``local_dir``; the bytes copied."""
        total = 0
        for rel, size in self.files(uri):
            dst = local_dir / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            pafs.copy_files(f"{self.at(uri)}/{rel}", str(dst), self.fs, pafs.LocalFileSystem())
            total += size
        return total

    def upload(self, local_dir: Path, uri: StoreURI | str) -> int:
        """Copy every file below ``local_dir`` to ``uri``; the bytes copied."""
        total = 0
        for p in sorted(local_dir.rglob("*")):
            if p.is_file():
                rel = p.relative_to(local_dir).as_posix()
                dst = f"{self.at(uri)}/{rel}"
                if self.root.is_local:
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                pafs.copy_files(str(p), dst, pafs.LocalFileSystem(), self.fs)
                total += p.stat().st_size
        return total


def _filesystem(u: StoreURI) -> pafs.FileSystem:
    if u.is_local:
        return pafs.LocalFileSystem()
    if u.scheme == "s3":
        # credentials and region come from the environment and the shared config files, as for the AWS CLI
        return pafs.S3FileSystem(
            **_endpoint(),
            connect_timeout=CONNECT_TIMEOUT_S,
            request_timeout=REQUEST_TIMEOUT_S,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=3),
        )
    try:
        fs, _ = pafs.FileSystem.from_uri(str(u))
    except (OSError, ValueError) as e:
        raise StoreError(_explain(u, "store", e)) from None
    return fs


def _endpoint() -> dict[str, str]:
    """``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (an S3-compatible store), as the AWS CLI reads them."""
    url = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not url:
        return {}
    scheme, _, host = url.partition("://")
    return {"endpoint_override": host.rstrip("/"), "scheme": scheme} if host else {"endpoint_override": url}


def _s3_create_exclusive(u: StoreURI, data: bytes) -> bool:
    from botocore.exceptions import ClientError

    key = u.path.lstrip("/")
    try:
        _s3_client().put_object(Bucket=u.authority, Key=key, Body=data, IfNoneMatch="*")
        return True
    except ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
            return False
        raise StoreError(f"{u.qualified}: conditional create failed ({code}: {e})") from None


def _s3_get(u: StoreURI) -> bytes:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        body: bytes = _s3_client().get_object(Bucket=u.authority, Key=u.path.lstrip("/"))["Body"].read()
        return body
    except ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404", "NotFound"):
            raise FileNotFoundError(f"{u.qualified}: no such object") from None
        raise OSError(f"{u.qualified}: read failed ({code}: {e})") from None
    except BotoCoreError as e:
        raise OSError(f"{u.qualified}: read failed ({e})") from None


_CLIENT: Any = None


def _s3_client() -> Any:
    """One boto3 client per process (it reads AWS_* variables, AWS_ENDPOINT_URL and ~/.aws like pyarrow)."""
    global _CLIENT
    if _CLIENT is None:
        import boto3

        _CLIENT = boto3.client("s3")
    return _CLIENT


def _explain(u: StoreURI, what: str, e: BaseException) -> str:
    text = str(e)
    low = text.lower()
    if "credential" in low or "access denied" in low or "accessdenied" in low or "forbidden" in low:
        hint = (
            "no usable credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or an instance "
            "role) in the environment of every process"
        )
    elif "nosuchbucket" in low or "no such bucket" in low or "bucket does not exist" in low:
        hint = f"bucket {u.authority!r} does not exist: create it first"
    elif "connect" in low or "timeout" in low or "resolve" in low or "unreachable" in low:
        hint = "the store is unreachable: check AWS_ENDPOINT_URL (or the store's address) and the network"
    else:
        hint = "check the URI and the credentials in the environment"
    return f"{what} {u}: {hint} ({text.strip().splitlines()[0] if text.strip() else type(e).__name__})"


_STORES: dict[tuple[str, str], Store] = {}


def store_for(uri: StoreURI | str) -> Store:
    """The process's one Store for ``uri``'s filesystem (a bucket, a namenode, the local disk)."""
    u = parse_uri(uri) if not isinstance(uri, StoreURI) else uri
    key = (u.scheme, u.authority)
    if key not in _STORES:
        _STORES[key] = Store(StoreURI(u.scheme, u.authority, "/"))
    return _STORES[key]
