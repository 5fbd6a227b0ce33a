"""Shared contract of GLISP: config, errors, dataset layout and manifest, partition format.

Every component (Spark jobs, sampling servers, inference) imports this package; it imports none of
them and needs only numpy and the standard library at import time.
"""

__version__ = "0.1.0"
