"""The vertex match between two versions (``vid_map``): by type name and original id, whatever the type codes."""

from __future__ import annotations

import numpy as np

from glisp_testing.graphs import write_dataset
from spark_jobs.partition.incremental_ids import vid_map


def test_vertices_match_by_type_name_and_id_across_reordered_types_and_an_id_type_change(tmp_path):
    # base: 0 = (user, "7"), 1 = (item, "7"), 2 = (user, "9"), 3 = (item, "5")
    base = write_dataset(
        tmp_path, "g", np.array([0]), np.array([1]), num_vertices=4, vtype=np.array([0, 1, 0, 1]),
        vertex_types=["user", "item"], orig_ids=["7", "7", "9", "5"], version="a",
    )  # fmt: skip
    # new: the types listed in another order and a third one; (item, "5") gone, (page, "7") and (user, "1") new
    new = write_dataset(
        tmp_path, "g", np.array([0]), np.array([1]), num_vertices=5, vtype=np.array([1, 0, 1, 2, 1]),
        vertex_types=["item", "user", "page"], orig_ids=["9", "7", "7", "7", "1"], version="b",
    )  # fmt: skip
    assert vid_map(base, new).tolist() == [2, 1, 0, -1]
    # the same vertices with integer ids in the new version (an id type change): matched by their text
    ints = write_dataset(
        tmp_path, "g", np.array([0]), np.array([1]), num_vertices=3, vtype=np.array([1, 0, 1]),
        vertex_types=["item", "user"], version="c",
    )  # fmt: skip  # (user, 0), (item, 1), (user, 2): integer ids
    again = write_dataset(
        tmp_path, "g", np.array([0]), np.array([1]), num_vertices=3, vtype=np.array([0, 1, 1]),
        vertex_types=["user", "item"], orig_ids=["2", "1", "0"], version="d",
    )  # fmt: skip
    assert vid_map(again, ints).tolist() == [2, 1, -1]  # (item, "0") is gone: the new 0 is a user
