"""The import check CI runs: packages stay in their layers and no files import each other in a circle.

Every import counts, the ones made inside functions too (a lazy import still ties two files together), and
``from pkg import mod`` counts as an import of ``pkg.mod``. A package may import its own layer's other
packages only when they are listed together in one group below (none are: each layer's packages are
independent), and any layer beneath it. Usage: ``python tools/import_layers.py [--graph]``; it exits 1 and
names each offending import or circle.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# top to bottom; the packages of one layer are independent of each other
LAYERS: list[tuple[str, ...]] = [
    ("bench", "tests", "submit"),
    ("glisp_testing",),
    ("glisp_app",),
    ("glisp_train", "glisp_infer"),
    ("spark_jobs", "glisp_serving"),
    ("glisp_sampling", "glisp_spark"),
    ("glisp_core",),
]
LAYER_OF = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
# imports allowed between these pairs of one layer (importer, imported)
SAME_LAYER_OK: set[tuple[str, str]] = set()
SKIP_PARTS = {".venv", "__pycache__", ".git", "build", "data"}


def modules(root: Path) -> dict[str, Path]:
    """Every project module by dotted name (packages by their ``__init__``)."""
    out: dict[str, Path] = {}
    for pkg in LAYER_OF:
        base = root / pkg
        if not base.is_dir():
            continue
        for f in sorted(base.rglob("*.py")):
            if SKIP_PARTS & set(f.relative_to(root).parts):
                continue
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = f
    return out


def imported(mod: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(module imported, line) for every project import in one file, wherever in the file it stands."""
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield from _resolve(a.name, [], known, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = mod.split(".") if is_pkg else mod.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join(here + ([base] if base else []))
            yield from _resolve(base, [a.name for a in node.names], known, node.lineno)


def _resolve(base: str, names: list[str], known: dict[str, Path], line: int) -> Iterator[tuple[str, int]]:
    if base.split(".")[0] not in LAYER_OF:
        return
    subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in known]
    if subs:
        yield from ((s, line) for s in subs)
        if len(subs) == len(names):
            return
    m = base
    while m and m not in known:  # an attribute path: the longest module prefix
        m = m.rpartition(".")[0]
    if m:
        yield m, line


def graph(root: Path) -> tuple[dict[str, set[str]], list[str]]:
    """The file graph and every import that runs up a layer or across one."""
    known = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in known}
    bad: list[str] = []
    for mod, path in known.items():
        src = mod.split(".")[0]
        for dst, line in imported(mod, path, known):
            if dst == mod:
                continue
            edges[mod].add(dst)
            tgt = dst.split(".")[0]
            if tgt == src:
                continue
            if LAYER_OF[tgt] < LAYER_OF[src] or (LAYER_OF[tgt] == LAYER_OF[src] and (src, tgt) not in SAME_LAYER_OK):
                bad.append(f"{path.relative_to(root)}:{line}: {src} imports {dst} ({tgt} is not below {src})")
    return edges, bad


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets of two or more files (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graph", action="store_true", help="print the package-level arrows too")
    args = ap.parse_args(argv)
    edges, bad = graph(ROOT)
    rings = circles(edges)
    if args.graph:
        arrows = sorted({(a.split(".")[0], b.split(".")[0]) for a, bs in edges.items() for b in bs})
        for a, b in arrows:
            if a != b:
                print(f"{a} -> {b}")
    for line in bad:
        print(line)
    for ring in rings:
        print("circle: " + " <-> ".join(ring))
    n = sum(len(v) for v in edges.values())
    print(f"import layers: {len(edges)} files, {n} imports, {len(bad)} running up or across, {len(rings)} circles")
    return 1 if bad or rings else 0


if __name__ == "__main__":
    sys.exit(main())
