"""HDFS (and ``viewfs://``) through pyarrow's HadoopFileSystem (libhdfs: ``HADOOP_HOME``, ``CLASSPATH``, the
cluster's ``core-site.xml``/``hdfs-site.xml`` and Kerberos ticket cache). No conditional create is tested
here (no namenode on this machine), so publishing refuses unless ``dataset.unsafe_publish`` opts in."""

from __future__ import annotations

import pyarrow.fs as pafs

from glisp_core.storage.backend import Backend, Capabilities
from glisp_core.storage.uri import StoreError, StoreURI


class HdfsBackend(Backend):
    name = "hdfs"
    capabilities = Capabilities(conditional_create=False, consistent_listing=True, server_side_copy=False)
    endpoint = "the namenode's address in the URI and the Hadoop config"
    credentials = "a Kerberos ticket (kinit) or HADOOP_USER_NAME, with HADOOP_HOME and the cluster's Hadoop config"

    def filesystem(self) -> pafs.FileSystem:
        try:
            fs, _ = pafs.FileSystem.from_uri(f"{self.root.scheme}://{self.root.authority}/")
        except (OSError, ValueError) as e:
            raise StoreError(self.explain(self.root, "store", e)) from None
        return fs

    def path(self, u: StoreURI) -> str:
        return u.path

    def create_exclusive(self, u: StoreURI, data: bytes) -> bool:
        raise StoreError(f"{u.qualified}: the hdfs backend has no conditional create")
