"""The storage layer: every dataset read and write goes through a :class:`~glisp_core.storage.store.Store`.

A dataset root, an ingest input, an inference store and a cluster file's dataset are URIs: a local path,
``file://``, ``s3://``, ``gs://``, ``abfs://``, ``hdfs://`` (pyarrow.fs opens them, through one backend per store:
:mod:`glisp_core.storage.backend`; docs/storage.md says why pyarrow.fs).
"""
