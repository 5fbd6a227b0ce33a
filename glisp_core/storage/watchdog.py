"""A pyarrow filesystem whose every call, and every read or write of its streams, has a deadline.

Why: pyarrow's GCS and Azure filesystems take no per-request timeout (GCS only bounds the time spent retrying
failed calls; Azure nothing), so a store endpoint that accepts connections and stops answering hangs a stage
for as long as the process lives. Here each call runs on a helper thread and the caller waits at most
:attr:`StoreLimits.total_s` for it (every attempt's connect and read timeouts); past that it raises
``TimeoutError`` (the Store names the store, the URI and the limits). The stalled call is left behind on its
thread, which is a daemon: the process fails the stage and ends. A deadline on one call of a stream (one block
read or written), not on a whole transfer, is a timeout on a stall, never on a large file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

T = TypeVar("T")


def _daemon_call(fn: Callable[[], T], deadline_s: float, what: str) -> T:
    """``fn()`` on a daemon thread, its result within ``deadline_s`` or TimeoutError naming ``what``."""
    fut: Future[T] = Future()

    def run() -> None:
        try:
            fut.set_result(fn())
        except BaseException as e:  # handed to the caller, whatever it is
            fut.set_exception(e)

    threading.Thread(target=run, daemon=True, name="glisp-store-call").start()
    try:
        return fut.result(timeout=deadline_s)
    except TimeoutError:
        raise TimeoutError(f"{what}: no answer within the deadline of {deadline_s:g} s (timed out)") from None


class _Stream:
    """A native pyarrow stream whose reads, writes and close each have the deadline (for ``pa.PythonFile``).

    A random-access file keeps its own position and reads with ``read_at``: a native GCS file asked to seek to
    its end asks the store for a range past it (HTTP 416)."""

    def __init__(self, raw: Any, deadline_s: float, path: str) -> None:
        self.raw, self.deadline_s, self.path = raw, deadline_s, path
        self.closed = False
        self.pos = 0
        self._size: int | None = None

    def _do(self, fn: Callable[[], T], op: str) -> T:
        return _daemon_call(fn, self.deadline_s, f"{op} {self.path}")

    def read(self, nbytes: int | None = -1) -> bytes:
        if not self.raw.seekable():
            data: bytes = self._do(lambda: self.raw.read(None if nbytes is None or nbytes < 0 else nbytes), "read")
            return data
        left = self.size() - self.pos
        n = left if nbytes is None or nbytes < 0 else min(nbytes, left)
        if n <= 0:
            return b""
        chunk: bytes = self._do(lambda: self.raw.read_at(n, self.pos), "read")
        self.pos += len(chunk)
        return chunk

    def write(self, data: Any) -> int:
        n: int = self._do(lambda: self.raw.write(data), "write")
        return n

    def seek(self, pos: int, whence: int = 0) -> int:
        if not self.raw.seekable():
            raise OSError(f"{self.path}: the stream cannot seek")
        base = {0: 0, 1: self.pos, 2: self.size()}[whence]
        self.pos = max(0, base + pos)
        return self.pos

    def tell(self) -> int:
        if self.raw.seekable():
            return self.pos
        t: int = self.raw.tell()
        return t

    def size(self) -> int:
        if self._size is None:
            self._size = int(self._do(self.raw.size, "size"))
        return self._size

    def seekable(self) -> bool:
        return bool(self.raw.seekable())

    def readable(self) -> bool:
        return bool(self.raw.readable())

    def writable(self) -> bool:
        return bool(self.raw.writable())

    def flush(self) -> None:
        if self.raw.writable():
            self._do(self.raw.flush, "flush")

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._do(self.raw.close, "close")


class DeadlineHandler(pafs.FileSystemHandler):  # type: ignore[misc]  # pyarrow ships no stubs
    """Every call of ``inner`` with the deadline ``deadline_s`` (seconds); its streams too."""

    def __init__(self, inner: pafs.FileSystem, deadline_s: float) -> None:
        self.inner, self.deadline_s = inner, deadline_s

    def _do(self, fn: Callable[[], T], op: str, path: Any) -> T:
        return _daemon_call(fn, self.deadline_s, f"{op} {path}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeadlineHandler) and other.inner.equals(self.inner)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def get_type_name(self) -> str:
        return f"deadline+{self.inner.type_name}"

    def normalize_path(self, path: str) -> str:
        out: str = self.inner.normalize_path(path)
        return out

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self._do(lambda: self.inner.get_file_info(paths), "stat", paths[0] if len(paths) == 1 else paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self._do(lambda: self.inner.get_file_info(selector), "list", selector.base_dir)

    def create_dir(self, path: str, recursive: bool) -> None:
        self._do(lambda: self.inner.create_dir(path, recursive=recursive), "mkdir", path)

    def delete_dir(self, path: str) -> None:
        self._do(lambda: self.inner.delete_dir(path), "delete", path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self._do(lambda: self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok), "delete", path)

    def delete_root_dir_contents(self) -> None:
        self._do(lambda: self.inner.delete_dir_contents("/", accept_root_dir=True), "delete", "/")

    def delete_file(self, path: str) -> None:
        self._do(lambda: self.inner.delete_file(path), "delete", path)

    def move(self, src: str, dest: str) -> None:
        self._do(lambda: self.inner.move(src, dest), "move", src)

    def copy_file(self, src: str, dest: str) -> None:
        self._do(lambda: self.inner.copy_file(src, dest), "copy", src)

    def _wrap(self, raw: Any, path: str, mode: str) -> pa.NativeFile:
        return pa.PythonFile(_Stream(raw, self.deadline_s, path), mode=mode)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self._wrap(self._do(lambda: self.inner.open_input_stream(path), "open", path), path, "r")

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self._wrap(self._do(lambda: self.inner.open_input_file(path), "open", path), path, "r")

    def open_output_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        raw = self._do(lambda: self.inner.open_output_stream(path, metadata=metadata), "open", path)
        return self._wrap(raw, path, "w")

    def open_append_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        raw = self._do(lambda: self.inner.open_append_stream(path, metadata=metadata), "open", path)
        return self._wrap(raw, path, "w")


def with_deadlines(fs: pafs.FileSystem, deadline_s: float) -> pafs.FileSystem:
    """``fs`` with a deadline on every call and on every block of its streams."""
    return pafs.PyFileSystem(DeadlineHandler(fs, deadline_s))
