"""The contract every store backend meets (one module per backend in ``glisp_core.storage.backends``).

Why a contract: the publish protocol (docs/storage.md) is safe only where a backend can create an object
exclusively and read a small object as one version of it. A backend says what it can do in
:class:`Capabilities`; :class:`~glisp_core.storage.store.Store` builds everything else on pyarrow's
filesystem, and refuses to publish where the conditional create is missing unless the user opted in, by name,
to the weaker mode (:data:`UNSAFE_MODE`).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow.fs as pafs

from glisp_core.storage.limits import limits
from glisp_core.storage.uri import StoreError, StoreURI
from glisp_core.storage.watchdog import with_deadlines

UNSAFE_KEY = "dataset.unsafe_publish"
UNSAFE_ENV = "GLISP_DATASET__UNSAFE_PUBLISH"  # the same key as an environment variable (glisp_core.config)
UNSAFE_MODE = "check-then-write"
_unsafe: str | None = None  # set from the config by the CLI; else the environment variable decides


@dataclass(frozen=True)
class Capabilities:
    """``conditional_create``: an object can be created only if absent, atomically (tested here against a live
    server); ``consistent_listing``: a listing after a write sees it; ``server_side_copy``: a copy inside the
    store does not pass the bytes through this process."""

    conditional_create: bool
    consistent_listing: bool
    server_side_copy: bool


class Backend(ABC):
    """One store's filesystem and the few operations pyarrow.fs lacks, opened at ``root`` (scheme + bucket)."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    credentials: ClassVar[str]  # where this store's credentials come from, for error messages
    endpoint: ClassVar[str] = "the store's address"  # what says where the store answers, for error messages
    # the filesystem takes no per-request timeout: every call, and every block of its streams, gets a deadline
    # (glisp_core.storage.watchdog)
    needs_deadlines: ClassVar[bool] = False

    def __init__(self, root: StoreURI) -> None:
        self.root = root
        self.fs = self.filesystem()
        if self.needs_deadlines:
            self.fs = with_deadlines(self.fs, limits().total_s)

    @abstractmethod
    def filesystem(self) -> pafs.FileSystem:
        """The pyarrow filesystem, with this store's own credentials chain and bounded timeouts."""

    def path(self, u: StoreURI) -> str:
        """The filesystem path of ``u``: ``bucket/key`` on an object store."""
        return f"{u.authority}{u.path}".rstrip("/")

    def bucket_path(self) -> str | None:
        """The path of the bucket or container (None where there is none), so a missing one is named."""
        return self.root.authority if self.root.is_object_store else None

    @abstractmethod
    def create_exclusive(self, u: StoreURI, data: bytes) -> bool:
        """Create ``u`` with ``data`` only if it does not exist; False when it does. Backends whose
        capabilities say ``conditional_create=False`` are never asked (the Store refuses first)."""

    def get(self, u: StoreURI) -> bytes:
        """The whole object as one version of it (FileNotFoundError when absent)."""
        with self.fs.open_input_stream(self.path(u)) as f:
            data: bytes = f.read()
            return data

    def put(self, u: StoreURI, data: bytes) -> None:
        """Replace the object whole: one PUT, so a reader sees the old bytes or the new ones."""
        with self.fs.open_output_stream(self.path(u)) as f:
            f.write(data)

    def list(self, path: str, recursive: bool) -> list[pafs.FileInfo]:
        """The entries below ``path`` (none when it does not exist), in any order."""
        sel = pafs.FileSelector(path, recursive=recursive, allow_not_found=True)
        found: list[pafs.FileInfo] = self.fs.get_file_info(sel)
        return found

    def make_parent(self, path: str) -> None:
        """Make the directory a file at ``path`` goes into, where the store has directories (not here)."""
        return None

    @contextmanager
    def open_atomic(self, u: StoreURI) -> Iterator[Any]:
        """An output stream whose object appears whole when the block ends, or not at all: pyarrow's object
        stream cannot abort, so after a failure the object its close uploaded is deleted again."""
        f = self.fs.open_output_stream(self.path(u))
        try:
            yield f
        except BaseException:
            f.close()
            try:
                self.delete_file(self.path(u))
            except FileNotFoundError:
                pass
            raise
        f.close()

    def delete_file(self, path: str) -> None:
        """Remove the object at ``path`` (FileNotFoundError when there is none)."""
        self.fs.delete_file(path)

    def delete_prefix(self, path: str) -> None:
        """Remove everything below ``path`` and the directory itself."""
        self.fs.delete_dir(path)

    def explain(self, u: StoreURI, what: str, e: BaseException) -> str:
        """``e`` as a message naming ``u`` and what to do, with this store's credentials chain."""
        return f"{what} {u}: {self.hint(e) or 'check the URI and the credentials in the environment'} ({first_line(e)})"

    def hint(self, e: BaseException) -> str | None:
        """What to do when ``e`` says the store itself failed (credentials, a missing bucket, an endpoint that
        does not answer or cannot be reached); None for anything else (a missing object, bad data)."""
        low = str(e).lower()
        if any(w in low for w in _DENIED):
            return f"no usable credentials: {self.credentials}, in the environment of every process"
        if any(w in low for w in _NO_BUCKET):
            return f"bucket {self.root.authority.partition('@')[0]!r} does not exist: create it first"
        if any(w in low for w in ("timeout", "timed out", "deadline")):
            return (
                f"the {self.name} store {NOT_ANSWERING} {limits().describe()}: check {self.endpoint}; a re-run resumes"
            )
        if any(w in low for w in _UNREACHABLE):
            return f"the {self.name} store cannot be reached: check {self.endpoint} and the network"
        return None

    def failure(self, u: StoreURI, what: str, e: BaseException) -> StoreUnavailable | None:
        """``e`` as a :class:`StoreUnavailable` naming ``u`` when it is a failure of the store itself."""
        hint = self.hint(e)
        return None if hint is None else StoreUnavailable(f"{what} {u}: {hint} ({first_line(e)})")


class StoreUnavailable(StoreError, OSError):
    """The store itself failed a call (credentials, bucket, endpoint, timeout), named with the URI. An OSError
    too, so code that handles a failed store call as an OSError still does."""


_DENIED = (
    "credential",
    "access denied",
    "accessdenied",
    "forbidden",
    "unauthorized",
    "authoriz",
    "authenticat",
    "oauth2",
    "invalidaccesskeyid",
    "signaturedoesnotmatch",
    " 403",
)
_NO_BUCKET = (
    "nosuchbucket",
    "no such bucket",
    "bucket does not exist",
    "container does not exist",
    "containernotfound",
)
NOT_ANSWERING = "did not answer within"  # a StoreUnavailable's words for a timeout (glisp_core.dataset.publish)
_UNREACHABLE = ("connect", "resolve", "unreachable", "network_connection", "name or service not known")


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:500] if text else type(e).__name__


def set_unsafe_publish(mode: str) -> None:
    """The CLI's ``dataset.unsafe_publish`` for this process ("" or :data:`UNSAFE_MODE`)."""
    global _unsafe
    if mode not in ("", UNSAFE_MODE):
        raise StoreError(f"{UNSAFE_KEY}={mode!r}: use {UNSAFE_MODE!r} or leave it empty")
    _unsafe = mode


def unsafe_publish() -> bool:
    """The user opted in to check-then-write where a store has no conditional create."""
    mode = _unsafe if _unsafe is not None else os.environ.get(UNSAFE_ENV, "").strip().strip("\"'")
    return mode == UNSAFE_MODE


def refusal(backend: Backend, u: StoreURI) -> str:
    """Why publishing to ``u`` is refused on a backend without a (tested) conditional create."""
    return (
        f"{u.qualified}: the {backend.name} store has no conditional create tested here, so two writers could "
        f"both believe they published; GLISP refuses to publish there. To accept that (run one writer per graph), "
        f'set {UNSAFE_KEY} = "{UNSAFE_MODE}" (or {UNSAFE_ENV}={UNSAFE_MODE}); docs/storage.md says what it costs'
    )
