"""The zip of GLISP's packages that executors on other hosts import: one builder for ``submit/glisp-submit``
(``--py-files``) and for ``glisp_spark.session`` (``addPyFile`` when GLISP starts Spark itself).

Only the standard library and ``glisp_core``'s version are imported here, so ``glisp-submit`` can build the
zip with a Python that has none of GLISP's dependencies.
"""

from __future__ import annotations

import filecmp
import os
import zipfile
from pathlib import Path

PACKAGES = (
    "glisp_app",
    "glisp_core",
    "glisp_spark",
    "glisp_sampling",
    "spark_jobs",
    "glisp_serving",
    "glisp_train",
    "glisp_infer",
)
SUFFIXES = (".py", ".proto", ".typed")
FIXED_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest a zip entry can say


def source_root() -> Path:
    """The directory holding the GLISP packages this process imports (a checkout, or site-packages)."""
    return Path(__file__).resolve().parent.parent


def zip_dir(root: Path | None = None) -> Path:
    """Where the session keeps the zip: a checkout's ``build/`` (as glisp-submit), else ``~/.cache/glisp``."""
    root = root or source_root()
    if (root / "pyproject.toml").is_file() and os.access(root, os.W_OK):
        return root / "build"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "glisp"


def build_zip(out_dir: Path, root: Path | None = None) -> Path:
    """Zip the GLISP packages under ``root`` (sources, protos, type markers) into ``out_dir/glisp-<version>.zip``.

    An unchanged zip is kept as it is, and its bytes depend on the files' contents alone (every entry dated
    1980-01-01, mode 0644): the same code in another checkout, whose files have other modification times,
    gives the same zip, so the executors' kernel caches, keyed by the zip's content
    (:class:`glisp_core.numba_cache.ContentZipLocator`), serve it without compiling again.
    """
    from glisp_core import __version__

    root = root or source_root()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"glisp-{__version__}.zip"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # concurrent builds never share it
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for pkg in PACKAGES:
            for f in sorted((root / pkg).rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts and f.suffix in SUFFIXES:
                    z.writestr(_entry(f.relative_to(root).as_posix()), f.read_bytes())
    if path.exists() and filecmp.cmp(tmp, path, shallow=False):
        tmp.unlink()
    else:
        os.replace(tmp, path)
    return path


def _entry(name: str) -> zipfile.ZipInfo:
    """A zip entry with a fixed date and mode, so the archive's bytes depend on the files' contents alone."""
    info = zipfile.ZipInfo(name, date_time=FIXED_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info
