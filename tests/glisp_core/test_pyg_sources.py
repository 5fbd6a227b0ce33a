"""Building a model leaves none of PyG's generated layer code in the temporary folder (glisp_core.pyg_sources)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
import torch
from torch_geometric.nn import MessagePassing

from glisp_core.models import ModelSpec, build_model
from glisp_core.pyg_sources import generated_files

LAYER = """
import torch
from torch_geometric.nn import MessagePassing


class Doubling(MessagePassing):
    def __init__(self):
        super().__init__(aggr="add")

    def forward(self, x, edge_index):
        return self.propagate(edge_index, x=x)

    def message(self, x_j):
        return 2 * x_j
"""


def _new_layer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MessagePassing:
    """A user's layer of a class PyG has not generated code for in this process (in a module of its own)."""
    module = f"user_layer_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(LAYER)
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(module).Doubling()


def test_built_models_leave_no_generated_layer_code_in_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layer = _new_layer(tmp_path, monkeypatch)  # built in this process before the model
    name = next(n for n in sys.modules if n.endswith(f"{type(layer).__name__}_propagate"))
    path = sys.modules[name].__file__
    assert path and os.path.dirname(path) == tempfile.gettempdir() and os.path.isfile(path)  # PyG's file

    model = build_model(ModelSpec(arch="gat", in_dim=4, hidden=8, out_dim=2, layers=2, heads=2))

    assert not os.path.exists(path) and not os.path.exists(importlib.util.cache_from_source(path))
    assert not generated_files()  # the model's own layers' files (GATConv: propagate and edge_updater) too
    gat = [n for n in sys.modules if n.endswith("GATConv_edge_updater")]
    assert gat and not os.path.exists(sys.modules[gat[0]].__file__ or "")
    assert inspect.getsource(sys.modules[name].propagate).lstrip().startswith("def propagate(")  # still readable
    x, ei = torch.ones(3, 4), torch.tensor([[0, 1, 2], [1, 2, 0]])
    assert layer(x, ei).tolist() == [[2.0] * 4] * 3  # both run with their files gone
    assert model.layer(0, x, ei, 3).shape == (3, 8)
