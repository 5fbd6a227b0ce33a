"""What each URI scheme is, as data: the one table the URI parser, the backend registry and Spark's path choice
read, so that no code outside the backend modules has to branch on a scheme's name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scheme:
    """``backend``: the module under ``glisp_core.storage.backends`` that opens it; ``local``: a path on this
    machine's disk; ``object_store``: named by a bucket or container (no directory rename, no flock);
    ``jvm_native``: Spark's JVM opens it with no connector jar; ``hadoop``: the scheme Hadoop's connector
    takes for it (``s3a`` for ``s3``)."""

    backend: str
    local: bool = False
    object_store: bool = True
    jvm_native: bool = False
    hadoop: str = ""


TABLE: dict[str, Scheme] = {
    "file": Scheme("local", local=True, object_store=False, jvm_native=True),
    "s3": Scheme("s3", hadoop="s3a"),
    "gs": Scheme("gcs"),
    "gcs": Scheme("gcs", hadoop="gs"),
    "abfs": Scheme("azure"),
    "abfss": Scheme("azure"),
    "az": Scheme("azure"),
    "hdfs": Scheme("hdfs", object_store=False, jvm_native=True),
    "viewfs": Scheme("hdfs", object_store=False, jvm_native=True),
}
SCHEMES = tuple(TABLE)
OBJECT_STORES = tuple(k for k, s in TABLE.items() if s.object_store)


def scheme(name: str) -> Scheme | None:
    """The scheme ``name`` (any case), or None when no backend opens it."""
    return TABLE.get(name.lower())
