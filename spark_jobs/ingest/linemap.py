"""Which line of a CSV chunk each parsed row came from, so that a bad row can be named by its file line.

Why: pyarrow numbers records, not lines, and the reader drops comment lines, empty lines and a
compressed file's header before parsing. A row's position (``_rowpos``) holds its line offset inside
its chunk instead of its record index: ordered the same way (so "the first row" is unchanged), and
``rowlocate`` turns it into a line number of the file when a message or a rejects table needs one.
Records never span lines (pyarrow's ``newlines_in_values`` is off), so record i is the i-th kept line.
"""

from __future__ import annotations

import numpy as np


def kept_lines(raw: bytes, comment: str, header: bool) -> np.ndarray | None:
    """Line offsets (in ``raw``) of the lines pyarrow parses as records, or None when every line is one.

    A line is dropped when it is empty (``\\n`` or ``\\r\\n``), starts with ``comment``, or is the header
    of a chunk that holds it (the first line that is not empty after the comment lines are gone)."""
    mark = comment.encode()
    if not raw:
        return np.zeros(0, np.int64)
    simple = not header and not (mark and mark in raw)
    if simple and b"\n\n" not in raw and b"\n\r\n" not in raw and not raw.startswith((b"\n", b"\r\n")):
        return None
    a = np.frombuffer(raw, dtype=np.uint8)
    nl = np.flatnonzero(a == 10)
    starts = np.concatenate(([0], nl + 1))
    ends = np.concatenate((nl, [len(a)]))
    if starts[-1] == len(a):  # the data ends with a newline: no line after it
        starts, ends = starts[:-1], ends[:-1]
    length = ends - starts
    last = a[np.minimum(starts, len(a) - 1)]
    keep = ~((length == 0) | ((length == 1) & (last == 13)))
    if mark:
        match = np.ones(len(starts), dtype=bool)
        for k, byte in enumerate(mark):
            pos = starts + k
            match &= (pos < ends) & (a[np.minimum(pos, len(a) - 1)] == byte)
        keep &= ~match
    idx = np.flatnonzero(keep).astype(np.int64)
    return idx[1:] if header and len(idx) else idx


def row_lines(kept: np.ndarray | None, n: int, bad_records: list[int]) -> np.ndarray:
    """Line offsets of a chunk's ``n`` parsed rows, then of its malformed rows (``bad_records``:
    pyarrow's 1-based record numbers of the rows it skipped), as ``read_chunk`` returns them."""
    total = n + len(bad_records)
    if not bad_records:
        records = np.arange(total, dtype=np.int64)
    else:
        bad = np.asarray(bad_records, dtype=np.int64) - 1
        good = np.ones(total, dtype=bool)
        good[bad] = False
        records = np.concatenate((np.flatnonzero(good), bad)).astype(np.int64)
    return records if kept is None else kept[records]
