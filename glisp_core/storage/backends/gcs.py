"""Google Cloud Storage: pyarrow's GCS filesystem, and google-cloud-storage for what it lacks (a create with
``ifGenerationMatch=0``, a GET of a small object in one request).

Credentials come from Google's own chain: ``GOOGLE_APPLICATION_CREDENTIALS`` (a key file), the gcloud
application-default credentials, the metadata server on GCP. ``STORAGE_EMULATOR_HOST`` (``http://host:port``)
sends every call to an emulator instead, anonymously, as Google's own clients do.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pyarrow.fs as pafs

from glisp_core.storage.backend import Backend, Capabilities, first_line
from glisp_core.storage.limits import limits
from glisp_core.storage.uri import StoreError, StoreURI

EMULATOR = "STORAGE_EMULATOR_HOST"
_CLIENTS: dict[str, Any] = {}


def _emulator() -> tuple[str, str] | None:
    """(scheme, host:port) of the emulator ``STORAGE_EMULATOR_HOST`` names, or None."""
    url = os.environ.get(EMULATOR, "").strip()
    if not url:
        return None
    scheme, _, host = url.partition("://")
    return (scheme, host.rstrip("/")) if host else ("http", url.rstrip("/"))


def _client() -> Any:
    """One google-cloud-storage client per process and emulator (the emulator's is anonymous)."""
    emu = _emulator()
    key = f"{emu[0]}://{emu[1]}" if emu else ""
    if key not in _CLIENTS:
        from google.cloud import storage

        if emu:
            from google.auth import credentials

            anonymous: Any = credentials.AnonymousCredentials  # the emulator takes no credentials
            project = os.environ.get("GOOGLE_CLOUD_PROJECT", "glisp")
            opts = {"api_endpoint": key}
            _CLIENTS[key] = storage.Client(project=project, credentials=anonymous(), client_options=opts)
        else:
            _CLIENTS[key] = storage.Client()
    return _CLIENTS[key]


def _retry_s() -> float:
    """How long one call's retries may go on: a connect timeout per attempt (pyarrow's client checks it between
    attempts, after its back-off, so a call may last somewhat longer; the watchdog's deadline is wider)."""
    lim = limits()
    return lim.retries * lim.connect_s


def _call() -> dict[str, Any]:
    """The timeout (connect, read) and the bounded retry of one google-cloud-storage call."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    lim = limits()
    return {"timeout": (lim.connect_s, lim.read_s), "retry": DEFAULT_RETRY.with_deadline(_retry_s())}


def _with_prefixes(path: str, found: list[pafs.FileInfo]) -> list[pafs.FileInfo]:
    """``found`` and a directory entry for every prefix between ``path`` and an object in it."""
    seen = {str(i.path) for i in found}
    dirs = set()
    for i in found:
        head = str(i.path).rsplit("/", 1)[0]
        while len(head) > len(path) and head not in seen and head not in dirs:
            dirs.add(head)
            head = head.rsplit("/", 1)[0]
    return found + [pafs.FileInfo(d, pafs.FileType.Directory) for d in sorted(dirs)]


class GcsBackend(Backend):
    name = "gcs"
    needs_deadlines = True  # pyarrow's client here has no read timeout to set
    capabilities = Capabilities(conditional_create=True, consistent_listing=True, server_side_copy=True)
    endpoint = "STORAGE_EMULATOR_HOST (or the network path to storage.googleapis.com)"
    credentials = (
        "set GOOGLE_APPLICATION_CREDENTIALS to a service account key file (or run "
        "'gcloud auth application-default login', or use the metadata server), or STORAGE_EMULATOR_HOST"
    )

    def filesystem(self) -> pafs.FileSystem:
        # pyarrow bounds a GCS call by the time its retries may take (it has no per-attempt timeout to set):
        # without a bound, a call to an unreachable store retries for minutes
        limit = timedelta(seconds=_retry_s())
        emu = _emulator()
        if emu:
            return pafs.GcsFileSystem(anonymous=True, scheme=emu[0], endpoint_override=emu[1], retry_time_limit=limit)
        self._credentials()
        return pafs.GcsFileSystem(retry_time_limit=limit)

    def _credentials(self) -> None:
        """Google's default chain finds credentials, or the store is refused now, naming the chain (pyarrow's
        client would retry fetching a token until its time limit and then say the store is unreachable)."""
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            google.auth.default()
        except DefaultCredentialsError as e:
            raise StoreError(
                f"store {self.root}: no usable credentials: {self.credentials} ({first_line(e)})"
            ) from None

    def _blob(self, u: StoreURI) -> Any:
        try:
            return _client().bucket(u.authority).blob(u.path.lstrip("/"))
        except Exception as e:  # google.auth's DefaultCredentialsError and kin: no credentials found
            raise StoreError(self.explain(self.root, "store", e)) from None

    def create_exclusive(self, u: StoreURI, data: bytes) -> bool:
        from google.api_core import exceptions as gexc

        try:
            self._blob(u).upload_from_string(data, if_generation_match=0, **_call())
            return True
        except gexc.PreconditionFailed:
            return False
        except gexc.GoogleAPIError as e:
            raise OSError(f"{u.qualified}: conditional create failed ({e})") from None

    def get(self, u: StoreURI) -> bytes:
        """One GET of one generation of the object."""
        from google.api_core import exceptions as gexc

        try:
            data: bytes = self._blob(u).download_as_bytes(**_call())
            return data
        except gexc.NotFound:
            raise FileNotFoundError(f"{u.qualified}: no such object") from None
        except gexc.GoogleAPIError as e:
            raise OSError(f"{u.qualified}: read failed ({e})") from None

    def list(self, path: str, recursive: bool) -> list[pafs.FileInfo]:
        """pyarrow's GCS listings leave out the prefixes that hold objects but no directory marker object (GLISP
        writes none), which its S3 and Azure listings include: a recursive listing gets them from the object
        names, one level is listed here, prefixes included, in one request per page."""
        if recursive:
            return _with_prefixes(path, super().list(path, recursive))
        bucket, _, key = path.partition("/")
        prefix = f"{key.rstrip('/')}/" if key else ""
        try:
            pages = _client().list_blobs(bucket, prefix=prefix, delimiter="/", **_call())
            out = [pafs.FileInfo(f"{bucket}/{b.name}", pafs.FileType.File, size=b.size) for b in pages]
        except Exception as e:  # the SDK's errors: NotFound for a missing bucket, auth, transport
            raise OSError(f"gs://{path}: listing failed ({e})") from None
        out += [pafs.FileInfo(f"{bucket}/{p.rstrip('/')}", pafs.FileType.Directory) for p in pages.prefixes]
        return out

    def delete_prefix(self, path: str) -> None:
        """pyarrow's GCS ``delete_dir`` also deletes a directory marker object, and fails where there is none
        (GLISP writes none): the objects below are what is removed."""
        self.fs.delete_dir_contents(path, missing_dir_ok=True)
