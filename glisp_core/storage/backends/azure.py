"""Azure Blob Storage and ADLS Gen2 (``abfs://``, ``abfss://``, ``az://``): pyarrow's Azure filesystem, and
azure-storage-blob for what it lacks (a create with ``If-None-Match: *``, a GET of a small object pinned to
one version of it).

A URI names its container, and may name its account: ``abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/path``
or ``az://CONTAINER/path``. Credentials: ``AZURE_STORAGE_CONNECTION_STRING`` (account, key and, for an
emulator such as Azurite, ``BlobEndpoint``), or the account (from the URI, ``AZURE_STORAGE_ACCOUNT_NAME`` or
``AZURE_STORAGE_ACCOUNT``) with ``AZURE_STORAGE_ACCOUNT_KEY`` (or ``AZURE_STORAGE_KEY``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from glisp_core.storage.backend import Backend, Capabilities
from glisp_core.storage.limits import limits
from glisp_core.storage.uri import StoreError, StoreURI


@dataclass(frozen=True)
class Account:
    """Where an account's blob service answers, and its key ("" for the default Azure credential chain)."""

    name: str
    key: str
    scheme: str = "https"
    authority: str = ""  # "" = <name>.blob.core.windows.net

    @property
    def url(self) -> str:
        if self.authority:
            return f"{self.scheme}://{self.authority}/{self.name}"  # an emulator: the account in the path
        return f"{self.scheme}://{self.name}.blob.core.windows.net"


def account(root: StoreURI) -> Account:
    """The account of ``root``, from its URI and the environment (the chain in the module docstring)."""
    env = os.environ
    named = root.authority.partition("@")[2].split(".", 1)[0]
    conn = env.get("AZURE_STORAGE_CONNECTION_STRING", "").strip()
    if conn:
        parts = dict(p.split("=", 1) for p in conn.split(";") if "=" in p)
        endpoint = urlsplit(parts.get("BlobEndpoint", ""))
        return Account(
            name=named or parts.get("AccountName", ""),
            key=parts.get("AccountKey", ""),
            scheme=endpoint.scheme or parts.get("DefaultEndpointsProtocol", "https"),
            authority=endpoint.netloc,
        )
    name = named or env.get("AZURE_STORAGE_ACCOUNT_NAME") or env.get("AZURE_STORAGE_ACCOUNT", "")
    return Account(name=name, key=env.get("AZURE_STORAGE_ACCOUNT_KEY") or env.get("AZURE_STORAGE_KEY", ""))


class AzureBackend(Backend):
    name = "azure"
    needs_deadlines = True  # pyarrow's client here has no read timeout to set
    capabilities = Capabilities(conditional_create=True, consistent_listing=True, server_side_copy=True)
    endpoint = "the BlobEndpoint in AZURE_STORAGE_CONNECTION_STRING (or the account's address)"
    credentials = (
        "set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY "
        "(or name the account in the URI: abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/path)"
    )

    def __init__(self, root: StoreURI) -> None:
        self.account = account(root)
        if not self.account.name:
            raise StoreError(f"store {root}: no Azure storage account: {self.credentials}")
        self._service: Any = None
        super().__init__(root)

    def filesystem(self) -> pafs.FileSystem:
        a = self.account
        kw: dict[str, Any] = {"account_name": a.name}
        if a.key:
            kw["account_key"] = a.key
        if a.authority:
            kw.update(blob_storage_authority=a.authority, dfs_storage_authority=a.authority)
            kw.update(blob_storage_scheme=a.scheme, dfs_storage_scheme=a.scheme)
        return pafs.AzureFileSystem(**kw)

    def container(self, u: StoreURI) -> str:
        return u.authority.partition("@")[0]

    def path(self, u: StoreURI) -> str:
        return f"{self.container(u)}{u.path}".rstrip("/")

    def bucket_path(self) -> str | None:
        return self.container(self.root)

    def _blob(self, u: StoreURI) -> Any:
        return self._blob_at(self.container(u), u.path.lstrip("/"), u.qualified)

    def _blob_at(self, container: str, name: str, what: str) -> Any:
        if self._service is None:
            if not self.account.key:
                raise StoreError(f"{what}: a conditional create needs the account key here: {self.credentials}")
            from azure.storage.blob import BlobServiceClient

            cred = {"account_name": self.account.name, "account_key": self.account.key}
            lim = limits()
            self._service = BlobServiceClient(
                self.account.url,
                credential=cred,
                retry_total=lim.retries - 1,  # retries after the first attempt
                retry_backoff_factor=0.4,
                retry_backoff_max=2,
                connection_timeout=lim.connect_s,
                read_timeout=lim.read_s,
            )
        return self._service.get_blob_client(container, name)

    def delete_file(self, path: str) -> None:
        """One Delete Blob. pyarrow's delete takes a lease on the blob first (more round trips; against Azurite
        the lease's answer can stall until the emulator drops the connection, 6-7 s per delete)."""
        from azure.core.exceptions import AzureError, ResourceNotFoundError

        if not self.account.key:  # the default credential chain: pyarrow's filesystem has it
            return super().delete_file(path)
        container, _, name = path.partition("/")
        try:
            self._blob_at(container, name, path).delete_blob()
        except ResourceNotFoundError:
            raise FileNotFoundError(f"{path}: no such object") from None
        except AzureError as e:
            raise OSError(f"{path}: delete failed ({e})") from None

    def create_exclusive(self, u: StoreURI, data: bytes) -> bool:
        """``overwrite=False`` is ``If-None-Match: *``: the service refuses a second create of the name."""
        from azure.core.exceptions import AzureError, ResourceExistsError

        try:
            self._blob(u).upload_blob(data, overwrite=False)
            return True
        except ResourceExistsError:
            return False
        except AzureError as e:
            raise OSError(f"{u.qualified}: conditional create failed ({e})") from None

    def put(self, u: StoreURI, data: bytes) -> None:
        """One Put Blob: pyarrow's Azure output stream creates an empty blob first and commits the data at
        close, so a reader in between would see an empty object (a lease or ``LATEST`` read as nothing)."""
        from azure.core.exceptions import AzureError

        if not self.account.key:
            return super().put(u, data)
        try:
            self._blob(u).upload_blob(data, overwrite=True)
        except AzureError as e:
            raise OSError(f"{u.qualified}: write failed ({e})") from None

    def get(self, u: StoreURI) -> bytes:
        """One download, pinned to one version of the object (the SDK sends ``If-Match`` for later ranges)."""
        from azure.core.exceptions import AzureError, ResourceNotFoundError

        if not self.account.key:  # the default credential chain: pyarrow's filesystem has it
            return super().get(u)
        try:
            data: bytes = self._blob(u).download_blob().readall()
            return data
        except ResourceNotFoundError:
            raise FileNotFoundError(f"{u.qualified}: no such object") from None
        except AzureError as e:
            raise OSError(f"{u.qualified}: read failed ({e})") from None
