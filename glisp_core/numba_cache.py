"""numba's on-disk kernel cache for GLISP imported from the shipped code zip, kept across applications.

On a cluster the executors import GLISP from the zip the driver ships, and Spark puts that zip in a new
directory for every application. numba's own zip locator keys its cache by that directory, so every
application compiled every kernel again on every executor. :class:`ContentZipLocator` keys it by the zip's
content instead: ``<cache root>/glisp-zip-<digest of the zip>/<package dir>``, where the root is
``NUMBA_CACHE_DIR`` when set, else numba's user cache directory. The same code reuses the same kernels;
other code gets another directory (numba still checks each module's source stamp within it).

The session selects it for the executors through ``NUMBA_CACHE_LOCATOR_CLASSES`` (:data:`LOCATORS`), numba's
own setting for this; files outside a zip keep numba's default locators, in numba's order.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from numba.core import config
from numba.core.caching import ZipCacheLocator

# the value of NUMBA_CACHE_LOCATOR_CLASSES: this locator first (it declines files outside a zip), then numba's
LOCATORS = ",".join(
    [
        f"{__name__}.ContentZipLocator",
        "UserProvidedCacheLocator",
        "InTreeCacheLocator",
        "UserWideCacheLocator",
        "IPythonCacheLocator",
        "ZipCacheLocator",
    ]
)


@functools.lru_cache(maxsize=8)
def zip_digest(path: str, mtime_ns: int, size: int) -> str:
    """The zip's content digest (memoised per path, modification time and size)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:20]


def cache_root() -> str:
    configured = getattr(config, "CACHE_DIR", "")  # NUMBA_CACHE_DIR, read by numba at import
    if configured:
        return str(configured)
    from numba.misc.appdirs import AppDirs

    return str(AppDirs(appname="numba", appauthor=False).user_cache_dir)  # type: ignore[no-untyped-call]


class ContentZipLocator(ZipCacheLocator):
    """numba's zip locator, with the cache directory named by the zip's content instead of its location."""

    def __init__(self, py_func: object, py_file: str) -> None:
        super().__init__(py_func, py_file)  # type: ignore[no-untyped-call]
        st = os.stat(self._zip_path)
        digest = zip_digest(self._zip_path, st.st_mtime_ns, st.st_size)
        package_dir = str(Path(self._internal_path).parent).replace("/", "_")
        self._cache_path = os.path.join(cache_root(), f"glisp-zip-{digest}", package_dir)
