"""Text formatting of manifest values and tables, shared by ``glisp report`` and its version comparison."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

MAX_INLINE = 110  # characters of one value before it is abbreviated


def fmt(v: Any) -> str:
    """One value, compactly: thousands separators, 4 significant digits, long lists summarised."""
    if isinstance(v, bool) or v is None:
        return {True: "yes", False: "no", None: "-"}[v]
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
            return f"{v:.4g}" if abs(v) < 1e15 else f"{v:.3e}"
        return f"{v:,.4g}" if abs(v) >= 1000 else f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        if len(v) <= 8 and all(not isinstance(x, (list, dict)) for x in v):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        nums = [x for x in v if isinstance(x, (int, float)) and not isinstance(x, bool)]
        if len(nums) == len(v) and v:
            return f"[{len(v)} values: min {fmt(min(nums))}, max {fmt(max(nums))}, sum {fmt(sum(nums))}]"
        paths = [x.get("path") for x in v if isinstance(x, Mapping)]
        if v and all(isinstance(x, str) for x in paths) and len(paths) == len(v):
            return fmt(paths)
        return f"[{len(v)} item{'' if len(v) == 1 else 's'}]"
    if isinstance(v, Mapping):
        if not v:
            return "none"
        s = ", ".join(f"{k}={fmt(x)}" for k, x in v.items())
        return s if len(s) <= MAX_INLINE else s[: MAX_INLINE - 3] + "..."
    s = str(v)
    return s if len(s) <= MAX_INLINE else s[: MAX_INLINE - 3] + "..."


def _is_hist_key(key: str) -> bool:
    return "hist" in key.lower()


def dict_lines(d: Mapping[str, Any], indent: str) -> list[str]:
    """``key: value`` lines; a dict of scalars goes on one line, deeper dicts are indented below their key."""
    lines = []
    width = max((len(str(k)) for k in d), default=0)
    for k, v in d.items():
        key = str(k).ljust(width)
        if _is_hist_key(str(k)) and isinstance(v, Mapping):
            kinds = [kk for kk in v if isinstance(v[kk], Mapping)]
            what = ", ".join(kinds) if kinds else f"{len(v.get('counts', v.get('count', [])))} bins"
            lines.append(f"{indent}{key}  histogram ({what}); see the degree plot")
        elif isinstance(v, Mapping) and any(isinstance(x, Mapping) for x in v.values()):
            lines.append(f"{indent}{key}")
            lines += dict_lines(v, indent + "  ")
        else:
            lines.append(f"{indent}{key}  {fmt(v)}")
    return lines


def table(headers: list[str], rows: Iterable[list[Any]], indent: str = "  ") -> list[str]:
    """Left-aligned text columns, right-aligned numbers."""
    raw = list(rows)
    cells = [[c if isinstance(c, str) else fmt(c) for c in r] for r in raw]
    numeric = [all(c is None or as_number(c) is not None for c in (r[i] for r in raw)) for i in range(len(headers))]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(vals: list[str]) -> str:
        return (
            indent
            + "  ".join(
                v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric, strict=True)
            ).rstrip()
        )

    return [line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells]


def as_number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
