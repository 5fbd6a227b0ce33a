"""The GLISP partition format: one directory of raw arrays + meta.json per partition (see docs/format.md).

Written by ``glisp serialize`` (one Spark task per partition), read by the sampling servers and the
inference workers with ``open_partition`` (np.memmap, no parsing).
"""

from glisp_core.partition_format.reader import PartitionReader, open_partition
from glisp_core.partition_format.spec import (
    EDGE_ID_SHIFT,
    FIELD_BY_NAME,
    FIELDS,
    FORMAT_VERSION,
    META_FILE,
    SUPPORTED_VERSIONS,
    FieldSpec,
)
from glisp_core.partition_format.writer import WrittenPartition, write_partition

__all__ = [
    "EDGE_ID_SHIFT",
    "FIELDS",
    "FIELD_BY_NAME",
    "FORMAT_VERSION",
    "META_FILE",
    "SUPPORTED_VERSIONS",
    "FieldSpec",
    "PartitionReader",
    "WrittenPartition",
    "open_partition",
    "write_partition",
]
