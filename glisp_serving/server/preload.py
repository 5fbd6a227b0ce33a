"""What serve-cluster's fork server holds before it forks a server (:mod:`glisp_serving.cluster.forked`).

Importing this module imports the server and runs every sampling kernel once on a synthetic partition with
every attribute (types, weights, timestamps, features, labels), so a forked server finds numba's dispatchers
compiled and its typing registries loaded. Nothing here starts a thread that outlives the import or opens a
gRPC channel: a fork must not copy one mid-call.
"""

from __future__ import annotations

from glisp_core.config import ServeConfig
from glisp_serving.server import servicer  # noqa: F401  (the imports every server makes)
from glisp_serving.server.warmup import EVERY_ATTRIBUTE, warm_up_shaped

warm_up_shaped(EVERY_ATTRIBUTE, ServeConfig(threads=1))
