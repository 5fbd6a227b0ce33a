"""PyTorch Geometric's remote backend over a GLISP sampling service (docs/training.md, "PyG remote backend").

``glisp_remote(cluster_file)`` gives the (FeatureStore, GraphStore) pair; :class:`GlispSampler` is the
``BaseSampler`` for ``NodeLoader``/``LinkLoader`` (or ``neighbor_sampler=`` of PyG's loaders);
:class:`NeighborLoader` and :class:`LinkNeighborLoader` are PyG's loaders that pick it for a GLISP pair;
:class:`NodeEmbedding` is a table of learnable rows per vertex held by the servers (``--node-embeddings``).
"""

from glisp_train.pyg.embedding import NodeEmbedding
from glisp_train.pyg.loaders import LinkNeighborLoader, NeighborLoader, is_glisp
from glisp_train.pyg.remote import GlispRemote, glisp_remote
from glisp_train.pyg.sampler import GlispSampler
from glisp_train.pyg.stores import GlispFeatureStore, GlispGraphStore
from glisp_train.pyg.view import GraphView, ReadOnlyError

__all__ = [
    "GlispFeatureStore",
    "GlispGraphStore",
    "GlispRemote",
    "GlispSampler",
    "GraphView",
    "LinkNeighborLoader",
    "NeighborLoader",
    "NodeEmbedding",
    "ReadOnlyError",
    "glisp_remote",
    "is_glisp",
]
