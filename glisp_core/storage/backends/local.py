"""The local disk (and ``file://``): a conditional create by ``link``, replacement by ``rename``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from glisp_core.storage.backend import Backend, Capabilities
from glisp_core.storage.uri import StoreURI


def _write_tmp(path: str, data: bytes) -> str:
    """``data`` in a fresh temporary file beside ``path``, flushed to the disk."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return tmp


class LocalBackend(Backend):
    name = "local"
    capabilities = Capabilities(conditional_create=True, consistent_listing=True, server_side_copy=True)
    credentials = "the file permissions of the user running GLISP"

    def filesystem(self) -> pafs.FileSystem:
        return pafs.LocalFileSystem()

    def path(self, u: StoreURI) -> str:
        return u.path

    def create_exclusive(self, u: StoreURI, data: bytes) -> bool:
        tmp = _write_tmp(u.path, data)
        try:
            os.link(tmp, u.path)  # atomic, and fails when the name exists: whole content or nothing
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def put(self, u: StoreURI, data: bytes) -> None:
        os.replace(_write_tmp(u.path, data), u.path)

    def make_parent(self, path: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)

    @contextmanager
    def open_atomic(self, u: StoreURI) -> Iterator[Any]:
        """A temporary name renamed over the target when the block ends."""
        os.makedirs(os.path.dirname(u.path), exist_ok=True)
        tmp = f"{u.path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        try:
            with pa.OSFile(tmp, "wb") as f:
                yield f
            os.replace(tmp, u.path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
