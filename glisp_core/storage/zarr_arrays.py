"""Zarr arrays wherever a dataset lives: a local directory, an object-store or HDFS URI (through the dataset's own
store, :class:`glisp_core.storage.zarr_store.ArrowStore`) or another fsspec URL. zarr is imported on first use."""

from __future__ import annotations

from typing import Any, Literal

from glisp_core.storage.schemes import scheme

AccessMode = Literal["r", "r+", "a", "w", "w-"]  # zarr's open modes


def open_store(url: str, read_only: bool = False) -> Any:
    """A zarr store for a local directory, an object store or HDFS URI (``s3://``, ``gs://``, ``hdfs://``: through
    the dataset's own pyarrow store, :mod:`glisp_core.storage.zarr_store`) or another fsspec URL (``file://``,
    ``memory://`` ...)."""
    from zarr.storage import FsspecStore, LocalStore

    if "://" not in url:
        return LocalStore(url, read_only=read_only)
    if in_dataset_store(url):
        from glisp_core.storage.zarr_store import ArrowStore

        return ArrowStore(url, read_only=read_only)
    opts = {"auto_mkdir": True} if url.startswith("file://") else {}
    return FsspecStore.from_url(url, read_only=read_only, storage_options=opts)


def in_dataset_store(url: str) -> bool:
    """Whether ``url`` is reached through the dataset's own store (an object store or HDFS URI), not fsspec."""
    kind = scheme(url.split("://", 1)[0]) if "://" in url else None
    return kind is not None and not kind.local


def open_group(url: str, mode: AccessMode = "r") -> Any:
    import zarr

    return zarr.open_group(store=open_store(url, read_only=mode == "r"), mode=mode)


def open_array(url: str, name: str, mode: AccessMode = "r") -> Any:
    import zarr

    return zarr.open_array(store=open_store(url, read_only=mode == "r"), path=name, mode=mode)
