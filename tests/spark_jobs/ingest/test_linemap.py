"""The line offset of each parsed row of a chunk, against a line-by-line reading of the same bytes."""

from __future__ import annotations

import gzip
import random

import numpy as np
import pytest

from spark_jobs.ingest.arrowread import Chunk, CsvSpec, chunk_table


def _by_hand(raw: bytes, comment: str, header: bool, fields: int) -> tuple[list[int], list[int]]:
    """(line offsets of the well-formed rows, of the malformed ones), reading line by line."""
    good, bad, seen_header = [], [], not header
    for i, line in enumerate(raw.split(b"\n")[: raw.count(b"\n")]):
        if line in (b"", b"\r") or (comment and line.startswith(comment.encode())):
            continue
        if not seen_header:
            seen_header = True
            continue
        (good if line.count(b",") == fields - 1 else bad).append(i)
    return good, bad


@pytest.mark.parametrize("seed", range(6))
def test_row_lines_match_a_line_by_line_reading(tmp_path, seed):
    rng = random.Random(seed)
    lines = []
    for i in range(400):
        lines.append(
            rng.choice([f"{i},{i + 1}", f"{i},{i + 1}", f"{i},{i + 1}\r", "", "\r", "#c", f"{i}", "1,2,3", " "])
        )
    raw = ("\n".join(lines) + "\n").encode()
    header = seed % 2 == 1  # only a compressed file is one chunk that holds its header
    f = tmp_path / ("e.csv.gz" if header else "e.csv")
    f.write_bytes(gzip.compress(raw) if header else raw)
    spec = CsvSpec(columns=("a", "b"), delimiter=",", comment="#" if seed % 3 else "", header=False)
    table, bad, offsets = chunk_table(Chunk(0, str(f), 0, -1 if header else len(raw), header), spec)
    good_at, bad_at = _by_hand(raw, spec.comment, header, 2)
    assert len(bad) == len(bad_at) and table.num_rows == len(good_at)
    assert offsets.tolist() == good_at + bad_at


def test_every_line_is_a_row_without_skipped_lines(tmp_path):
    raw = b"".join(b"%d,%d\n" % (i, i) for i in range(50))
    f = tmp_path / "e.csv"
    f.write_bytes(raw)
    table, bad, offsets = chunk_table(Chunk(0, str(f), 0, len(raw), False), CsvSpec(("a", "b"), ",", "", False))
    assert table.num_rows == 50 and not bad
    assert np.array_equal(offsets, np.arange(50))
