"""A Zarr v3 store over the dataset's own :class:`glisp_core.storage.store.Store` (pyarrow.fs, boto3 for S3).

Why not zarr's ``FsspecStore``: on S3 it needs ``s3fs``, whose pinned ``aiobotocore`` pins ``botocore`` ranges
that fight the ``boto3`` the publish protocol uses, and it would read credentials and the endpoint through a
second client with its own rules. This store reaches the bucket exactly as every other read and write of a
dataset does (the AWS environment, ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, the same timeouts and
retries), in the driver and in every executor alike (:func:`glisp_core.storage.store.store_for`).

Keys are ``/``-separated below the store's root URI. A chunk is one object written whole by one PUT
(:meth:`Store.write_bytes`), so a reader sees a chunk's old bytes or its new ones; a get is one GET. The
blocking pyarrow and boto3 calls run on threads (``asyncio.to_thread``), so zarr's concurrent chunk reads and
writes overlap as they do with its own stores.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pyarrow.fs as pafs
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype

from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri


class ArrowStore(Store):
    """The Zarr group at ``root`` (any URI :func:`glisp_core.storage.uri.parse_uri` takes) through the glisp Store."""

    supports_writes: bool = True
    supports_deletes: bool = True
    supports_listing: bool = True

    def __init__(self, root: StoreURI | str, *, read_only: bool = False) -> None:
        super().__init__(read_only=read_only)
        self.root = parse_uri(root, "infer.store")
        self.store = store_for(self.root)

    def with_read_only(self, read_only: bool = False) -> ArrowStore:
        return ArrowStore(self.root, read_only=read_only)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArrowStore) and self.root == other.root

    def __str__(self) -> str:
        return self.root.qualified

    def __repr__(self) -> str:
        return f"ArrowStore({self.root.qualified!r})"

    def _uri(self, key: str) -> StoreURI:
        return self.root.join(key)

    # ---- reads ----
    def _get(self, key: str, byte_range: ByteRequest | None) -> bytes | None:
        uri = self._uri(key)
        try:
            if byte_range is None:
                return self.store.read_bytes(uri)
            with self.store.open_input(uri) as f:
                size = f.size()
                if isinstance(byte_range, RangeByteRequest):
                    start, end = byte_range.start, min(byte_range.end, size)
                elif isinstance(byte_range, OffsetByteRequest):
                    start, end = byte_range.offset, size
                elif isinstance(byte_range, SuffixByteRequest):
                    start, end = max(0, size - byte_range.suffix), size
                else:
                    raise TypeError(f"unexpected byte range {byte_range!r}")
                data: bytes = f.read_at(max(0, end - start), start)
                return data
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        data = await asyncio.to_thread(self._get, key, byte_range)
        return None if data is None else prototype.buffer.from_bytes(data)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        info = await asyncio.to_thread(self.store.fs.get_file_info, self.store.at(self._uri(key)))
        return bool(info.type == pafs.FileType.File)

    async def getsize(self, key: str) -> int:
        """One HEAD (the default would GET the whole object)."""
        info = await asyncio.to_thread(self.store.fs.get_file_info, self.store.at(self._uri(key)))
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(self._uri(key).qualified)
        return int(info.size)

    # ---- writes ----
    async def set(self, key: str, value: Buffer) -> None:
        self._check_writable()
        await asyncio.to_thread(self.store.write_bytes, self._uri(key), value.to_bytes())

    async def delete(self, key: str) -> None:
        self._check_writable()
        await asyncio.to_thread(self.store.delete, self._uri(key))

    async def delete_dir(self, prefix: str) -> None:
        self._check_writable()
        await asyncio.to_thread(self.store.delete, self._uri(prefix))

    # ---- listing ----
    def _files(self, below: str) -> list[str]:
        """Keys of every object below the key prefix directory ``below`` ("" = the whole group)."""
        base = self._uri(below)
        head = below.strip("/")
        return [f"{head}/{rel}" if head else rel for rel, _ in self.store.files(base)]

    async def list(self) -> AsyncIterator[str]:
        for key in await asyncio.to_thread(self._files, ""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        below = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        for key in await asyncio.to_thread(self._files, below):
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        names: Any = await asyncio.to_thread(self.store.names, self._uri(prefix))
        for name in names:
            yield name
