"""The one place a URI is resolved to its store backend: by its scheme, through the table in
:mod:`glisp_core.storage.schemes`. A new backend is a module in ``glisp_core.storage.backends`` and a line here
and there; nothing else in GLISP names a scheme."""

from __future__ import annotations

from glisp_core.storage.backend import Backend
from glisp_core.storage.backends.azure import AzureBackend
from glisp_core.storage.backends.gcs import GcsBackend
from glisp_core.storage.backends.hdfs import HdfsBackend
from glisp_core.storage.backends.local import LocalBackend
from glisp_core.storage.backends.s3 import S3Backend
from glisp_core.storage.schemes import TABLE
from glisp_core.storage.uri import StoreURI

BACKENDS: dict[str, type[Backend]] = {
    b.name: b for b in (LocalBackend, S3Backend, GcsBackend, AzureBackend, HdfsBackend)
}


def backend_class(u: StoreURI) -> type[Backend]:
    return BACKENDS[TABLE[u.scheme].backend]


def open_backend(root: StoreURI) -> Backend:
    """The backend for ``root``'s filesystem (its scheme and bucket), opened with that store's credentials."""
    return backend_class(root)(StoreURI(root.scheme, root.authority, "/"))
