"""PyG scripts as a PyG user writes them for in-memory data, shared by tests/glisp_train/test_pyg_backend.py and
bench/pyg_loader.py: each takes the data object (an in-memory ``Data``/``HeteroData`` or ``glisp_remote(...)``)
and nothing else GLISP-specific, so a run on the service differs from one in memory by its data line only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch_geometric.nn import GraphSAGE, SAGEConv, to_hetero

from glisp_train.pyg import LinkNeighborLoader, NeighborLoader
from glisp_train.tasks import roc_auc


def node_script(data, num_features: int, num_classes: int, idx, seed: int, epochs: int = 10) -> dict[str, float]:
    """GraphSAGE node classification as in PyG's examples: test accuracy (and ROC-AUC of two classes), all
    neighbours at evaluation."""
    train_idx, _, test_idx = idx
    torch.manual_seed(seed)
    train_loader = NeighborLoader(data, num_neighbors=[10, 10], input_nodes=train_idx, batch_size=128, shuffle=True)
    test_loader = NeighborLoader(data, num_neighbors=[-1, -1], input_nodes=test_idx, batch_size=512)
    model = GraphSAGE(num_features, 64, num_layers=2, out_channels=num_classes, dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(epochs):
        model.train()
        for batch in train_loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            F.cross_entropy(out, batch.y[: batch.batch_size]).backward()
            opt.step()
    model.eval()
    outs, ys = [], []
    with torch.no_grad():
        for batch in test_loader:
            outs.append(model(batch.x, batch.edge_index)[: batch.batch_size])
            ys.append(batch.y[: batch.batch_size])
    out, y = torch.cat(outs), torch.cat(ys)
    res = {"acc": float((out.argmax(-1) == y).float().mean())}
    if num_classes == 2:
        margin = (out[:, 1] - out[:, 0]).numpy()
        res["auc"] = roc_auc(margin[y.numpy() == 1], margin[y.numpy() == 0])
    return res


def link_script(data, num_features: int, train_edges, test_pos, test_neg, seed: int, epochs: int = 3) -> float:
    """GraphSAGE link prediction as in PyG's examples: LinkNeighborLoader with binary negatives; test ROC-AUC."""
    torch.manual_seed(seed)
    loader = LinkNeighborLoader(
        data, num_neighbors=[10, 10], edge_label_index=train_edges, batch_size=256, neg_sampling="binary", shuffle=True
    )
    labels = torch.cat([torch.ones(test_pos.size(1)), torch.zeros(test_neg.size(1))])
    test_loader = LinkNeighborLoader(
        data,
        num_neighbors=[-1, -1],
        edge_label_index=torch.cat([test_pos, test_neg], 1),
        edge_label=labels,
        batch_size=1024,
    )
    model = GraphSAGE(num_features, 64, num_layers=2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            h = model(batch.x, batch.edge_index)
            s, d = batch.edge_label_index
            F.binary_cross_entropy_with_logits((h[s] * h[d]).sum(-1), batch.edge_label).backward()
            opt.step()
    model.eval()
    scores, ys = [], []
    with torch.no_grad():
        for batch in test_loader:
            h = model(batch.x, batch.edge_index)
            s, d = batch.edge_label_index
            scores.append((h[s] * h[d]).sum(-1))
            ys.append(batch.edge_label)
    sc, y = torch.cat(scores).numpy(), torch.cat(ys).numpy()
    return roc_auc(sc[y == 1], sc[y == 0])


def recommend_script(data, num_nodes: int, train_edges, test_pos, seed: int, epochs: int = 3) -> dict[str, float]:
    """LightGCN on learnable node embeddings, as a PyG user writes it for a graph of ids only: an
    ``nn.Embedding`` indexed by each batch's ``n_id`` (the global node ids), ``LGConv`` layers, BPR against
    ``LinkNeighborLoader``'s triplet negatives; then every node embedded at full neighbourhoods and each test
    source's top 20 (its training neighbours left out) against its test destinations: recall@20 and NDCG@20."""
    import numpy as np
    from torch_geometric.nn import LGConv

    from glisp_core.ranking import TopK, held_out_users, items_of, recall_ndcg

    torch.manual_seed(seed)
    emb, convs = torch.nn.Embedding(num_nodes, 32), torch.nn.ModuleList([LGConv(), LGConv()])
    torch.nn.init.normal_(emb.weight, std=0.1)
    opt = torch.optim.Adam(emb.parameters(), lr=0.01)

    def forward(n_id, edge_index):
        h = emb(n_id)
        out = h / 3
        for conv in convs:
            h = conv(h, edge_index)
            out = out + h / 3
        return out

    loader = LinkNeighborLoader(
        data, num_neighbors=[10, 10], edge_label_index=train_edges, batch_size=256, neg_sampling="triplet", shuffle=True
    )
    for _ in range(epochs):
        for batch in loader:
            opt.zero_grad()
            h = forward(batch.n_id, batch.edge_index)
            pos = (h[batch.src_index] * h[batch.dst_pos_index]).sum(-1)
            neg = (h[batch.src_index] * h[batch.dst_neg_index]).sum(-1)
            F.softplus(neg - pos).mean().backward()
            opt.step()
    every = NeighborLoader(data, num_neighbors=[-1, -1], input_nodes=torch.arange(num_nodes), batch_size=1024)
    final = torch.empty((num_nodes, 32))
    with torch.no_grad():
        for batch in every:
            final[batch.n_id[: batch.batch_size]] = forward(batch.n_id, batch.edge_index)[: batch.batch_size]
    users, truth = held_out_users(test_pos[0].numpy(), test_pos[1].numpy(), 10**9, 0)
    top = TopK(final[users].numpy(), 20, items_of(users, train_edges[0].numpy(), train_edges[1].numpy()))
    top.add(np.arange(num_nodes), final.numpy())
    got = recall_ndcg(top.result(), truth, (20,))
    return {"recall@20": got["recall@20"], "ndcg@20": got["ndcg@20"]}


def hetero_script(data, metadata, idx, seed: int, epochs: int = 5) -> float:
    """PyG's heterogeneous GraphSAGE (to_hetero) on IMDB movie genres; accuracy on the held-out movies (validation
    and test: 1,176 of them, so one seed's score moves less), neighbours sampled as in training."""
    train_idx, test_idx = idx[0], torch.cat(idx[1:])

    class GNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.conv2 = SAGEConv((-1, -1), 64), SAGEConv((-1, -1), 3)

        def forward(self, x, edge_index):
            return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)

    torch.manual_seed(seed)
    model = to_hetero(GNN(), metadata, aggr="sum")
    loader = NeighborLoader(
        data, num_neighbors=[10, 10], input_nodes=("Movie", train_idx), batch_size=256, shuffle=True
    )
    test_loader = NeighborLoader(data, num_neighbors=[10, 10], input_nodes=("Movie", test_idx), batch_size=512)
    with torch.no_grad():  # lazy shapes
        b = next(iter(test_loader))
        model(b.x_dict, b.edge_index_dict)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(epochs):
        model.train()
        for b in loader:
            opt.zero_grad()
            out = model(b.x_dict, b.edge_index_dict)["Movie"][: b["Movie"].batch_size]
            F.cross_entropy(out, b["Movie"].y[: b["Movie"].batch_size]).backward()
            opt.step()
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for b in test_loader:
            n = b["Movie"].batch_size
            correct += int((model(b.x_dict, b.edge_index_dict)["Movie"][:n].argmax(-1) == b["Movie"].y[:n]).sum())
            total += n
    return correct / total
