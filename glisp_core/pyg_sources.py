"""PyG's generated layer code, kept in memory rather than left in the temporary folder.

PyG renders each message-passing class's ``propagate`` (and ``edge_updater``) from a template into a file in
the temporary folder, imports it once per process, and never removes the file. Every process that builds a
model (a trainer, each inference worker on every executor, at every refresh) left one file per layer class
and its bytecode: 2,068 files and 2,119 compiled ones (24 MB) on the development machine in a day. Once a model is
built, :func:`forget_generated_sources` puts each such file's lines into :mod:`linecache`, where tracebacks and
:func:`inspect.getsource` (which TorchScript uses) read them, and removes the file and its bytecode.
"""

from __future__ import annotations

import importlib.util
import linecache
import os
import sys
import tempfile

# the generated modules' names end so: f"{cls.__module__}_{cls.__name__}_propagate" (a user's layers' too)
SUFFIXES = ("_propagate", "_edge_updater")


def generated_files() -> list[str]:
    """The files of the generated modules this process imported that are still on disk."""
    tmp = os.path.realpath(tempfile.gettempdir())
    out = []
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None) if name.endswith(SUFFIXES) else None
        if not isinstance(path, str):
            continue
        base = os.path.basename(path)
        if not (base.startswith(f"{name}_") and base.endswith(".py")):
            continue  # PyG names the file <module name>_<random>.py
        if os.path.dirname(os.path.realpath(path)) == tmp and os.path.isfile(path):
            out.append(path)
    return out


def forget_generated_sources() -> int:
    """Move the generated modules' sources from the temporary folder into ``linecache``; how many files went."""
    removed = 0
    for path in generated_files():
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
            linecache.cache[path] = (sum(map(len, lines)), None, lines, path)  # no mtime: never checked stale
            os.unlink(path)
        except OSError:  # another thread of this process removed it first
            continue
        try:  # its bytecode, where the import wrote it (__pycache__ in the temporary folder)
            os.unlink(importlib.util.cache_from_source(path))
        except OSError:
            pass
        removed += 1
    return removed
