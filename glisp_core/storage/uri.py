"""Store URIs, parsed once: a local path or ``scheme://authority/path``.

Spark must see every path fully qualified: on a cluster whose ``fs.defaultFS`` is ``hdfs://``, a bare
``/data/x`` is an HDFS path for Spark and a local one for Python. :func:`qualify` gives the one spelling
both agree on (``file:///data/x`` for a local path).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from glisp_core.errors import ConfigError, GlispError
from glisp_core.storage.schemes import OBJECT_STORES, SCHEMES, TABLE, scheme


class StoreError(GlispError):
    """A store cannot be opened, reached or used this way; the message names the URI and what to do."""


@dataclass(frozen=True)
class StoreURI:
    """``scheme`` (``file`` for a local path), ``authority`` (bucket, namenode) and ``path`` (absolute, ``/``-led).

    ``str()`` is the plain path of a local URI (what messages and local tools want) and the full URI otherwise;
    :attr:`qualified` is always the full URI (what Spark must see). ``uri / "name"`` joins. A local URI is also
    an ``os.PathLike``, so ``open``, numpy and pyarrow take it; a remote one refuses to pose as a local path.
    """

    scheme: str
    authority: str
    path: str

    @property
    def is_local(self) -> bool:
        return TABLE[self.scheme].local

    @property
    def is_object_store(self) -> bool:
        return TABLE[self.scheme].object_store

    @property
    def qualified(self) -> str:
        return f"{self.scheme}://{self.authority}{self.path}"

    def __str__(self) -> str:
        return self.path if self.is_local else self.qualified

    def __fspath__(self) -> str:
        if not self.is_local:
            raise StoreError(
                f"{self.qualified}: this step still needs a local path; object-store roots are not supported "
                "by it yet (docs/storage.md, 'What runs on an object store')"
            )
        return self.path

    @property
    def local(self) -> Path:
        """The local path (StoreError for a remote URI)."""
        return Path(self.__fspath__())

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> StoreURI:
        head = self.path.rstrip("/").rsplit("/", 1)[0]
        return StoreURI(self.scheme, self.authority, head or "/")

    def join(self, *parts: str) -> StoreURI:
        tail = "/".join(p.strip("/") for p in parts if p and p.strip("/"))
        base = self.path.rstrip("/")
        return StoreURI(self.scheme, self.authority, f"{base}/{tail}" if tail else (base or "/"))

    def __truediv__(self, part: str) -> StoreURI:
        return self.join(part)

    def relative_to(self, other: StoreURI) -> str:
        """The ``/``-separated path of ``self`` below ``other``."""
        base = other.path.rstrip("/") + "/"
        if (self.scheme, self.authority) != (other.scheme, other.authority) or not self.path.startswith(base):
            raise ValueError(f"{self} is not below {other}")
        return self.path[len(base) :]


def parse_uri(text: str | os.PathLike[str], what: str = "dataset.root") -> StoreURI:
    """``text`` as a StoreURI; a ConfigError naming ``what`` and the URI for a scheme no store opens."""
    if isinstance(text, StoreURI):
        return text
    s = os.fspath(text)
    if "://" not in s:
        head = s.partition(":")[0].lower()
        if ":" in s and head in OBJECT_STORES:  # "s3:/bucket" would silently become a local "./s3:" dir
            raise ConfigError("storage", what, f"{s!r} is neither a local path nor a URI: write {head}://bucket/path")
        return StoreURI("file", "", os.path.abspath(os.path.expanduser(s)))
    u = urlsplit(s)
    name = u.scheme.lower()
    kind = scheme(name)
    if kind is None:
        raise ConfigError(
            "storage",
            what,
            f"{s!r}: unknown scheme {name!r}; use a local path or one of {', '.join(x + '://' for x in SCHEMES)}",
        )
    if kind.local:
        return StoreURI(name, "", os.path.abspath(u.path or "/"))
    if kind.object_store and not u.netloc:
        raise ConfigError("storage", what, f"{s!r} names no bucket: write {name}://BUCKET/path")
    return StoreURI(name, u.netloc, "/" + u.path.strip("/") if u.path.strip("/") else "/")


def qualify(text: str | os.PathLike[str]) -> str:
    """The fully qualified spelling of a path or URI (``file:///abs`` for a local path), for Spark."""
    return text.qualified if isinstance(text, StoreURI) else parse_uri(text).qualified


def is_local(text: str | os.PathLike[str]) -> bool:
    return parse_uri(text).is_local
