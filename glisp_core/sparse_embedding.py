"""Learnable node embeddings held beside the partitions: their initial rows, their sparse Adagrad step, one shard.

A table is split by master partition: each sampling server holds the rows of the vertices it masters (the
in-process source holds them all). Rows start as a function of (seed, global id, column) alone, so a table
starts the same however it is split. The update is ``torch.optim.Adagrad``'s for a sparse gradient (no
learning-rate decay, no weight decay, a zero initial accumulator): a batch's gradient rows are summed per
vertex, the per-element sum of squares grows by their square, and each touched row moves by
``-lr * g / (sqrt(sum) + eps)``. Untouched rows and their state do not change, as with ``sparse=True``.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

INIT_STD = 0.1  # LightGCN's initial scale; rows are uniform with this standard deviation
INIT_CHUNK = 1 << 16  # rows initialised per step (bounds the hash's temporaries)
_M1, _M2, _GOLD = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


class EmbeddingError(ValueError):
    """A request the table cannot answer: unknown table, another spec, wrong shapes, vertices held elsewhere."""


@dataclass(frozen=True)
class TableSpec:
    """What makes a table: its name (a training run's), width, initial seed and optimiser settings."""

    name: str
    dim: int
    seed: int = 0
    lr: float = 0.01
    eps: float = 1e-10

    def check(self) -> TableSpec:
        if not self.name or self.dim <= 0 or self.lr <= 0 or self.eps <= 0:
            raise EmbeddingError(
                f"embedding table: a name, dim > 0, lr > 0 and eps > 0 are needed (got {asdict(self)})"
            )
        return self


def _mix(x: Any) -> Any:
    """splitmix64's finaliser, element-wise on uint64 (wrapping arithmetic is the point)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def initial_rows(gids: np.ndarray, dim: int, seed: int) -> np.ndarray:
    """The initial rows of ``gids``: uniform, mean 0, standard deviation ``INIT_STD``, from (seed, id, column)."""
    gids = np.asarray(gids, np.int64)
    out = np.empty((len(gids), dim), np.float32)
    col = np.arange(dim, dtype=np.uint64)
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) + _GOLD)
        for a in range(0, len(gids), INIT_CHUNK):
            g = gids[a : a + INIT_CHUNK].astype(np.uint64)[:, None]
            h = _mix(key ^ _mix(g * np.uint64(dim) + col + _GOLD))
            u = (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))  # [0, 1)
            out[a : a + INIT_CHUNK] = ((u - 0.5) * (INIT_STD * np.sqrt(12.0))).astype(np.float32)
    return out


def summed_rows(idx: np.ndarray, grads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows, the gradient summed over each one's occurrences): a sparse gradient, coalesced."""
    order = np.argsort(idx, kind="stable")
    s = idx[order]
    starts = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]])) if len(s) else np.empty(0, np.int64)
    return s[starts], np.add.reduceat(grads[order], starts, axis=0) if len(s) else grads[:0]


def adagrad_step(rows: np.ndarray, state: np.ndarray, idx: np.ndarray, grads: np.ndarray, lr: float, eps: float) -> int:
    """One sparse Adagrad step on ``rows[idx]`` in place (see the module docstring); returns the rows moved."""
    uniq, g = summed_rows(np.asarray(idx, np.int64), np.asarray(grads, np.float32))
    acc = state[uniq] + g * g
    state[uniq] = acc
    rows[uniq] += np.float32(-lr) * (g / (np.sqrt(acc) + np.float32(eps)))  # torch: param.add_(g / std, alpha=-lr)
    return len(uniq)


class EmbeddingShard:
    """The rows of one table for the vertices ``gids`` (sorted): values, Adagrad state, and the snapshot of
    the best epoch so far. Fetches and updates take one lock: an update is applied whole or not seen."""

    def __init__(self, spec: TableSpec, gids: np.ndarray) -> None:
        self.spec, self.gids = spec.check(), np.asarray(gids, np.int64)
        self.rows = initial_rows(self.gids, spec.dim, spec.seed)
        self.state = np.zeros_like(self.rows)
        self.best: np.ndarray | None = None
        self.updates = 0
        self._lock = threading.Lock()

    @staticmethod
    def bytes_for(n: int, dim: int) -> int:
        """What a shard of ``n`` rows may hold at most: rows, state and a snapshot."""
        return 3 * 4 * n * dim

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + self.state.nbytes + (self.best.nbytes if self.best is not None else 0)

    def positions(self, gids: np.ndarray) -> np.ndarray:
        gids = np.asarray(gids, np.int64)
        pos = np.minimum(np.searchsorted(self.gids, gids), max(len(self.gids) - 1, 0))
        bad = (self.gids[pos] != gids) if len(self.gids) else np.ones(len(gids), bool)
        if bad.any():
            raise EmbeddingError(
                f"table {self.spec.name!r}: {int(bad.sum())} of {len(gids)} vertices are not held here "
                f"(e.g. {int(gids[bad][0])})"
            )
        return pos

    def fetch(self, gids: np.ndarray, best: bool = False) -> np.ndarray:
        pos = self.positions(gids)
        with self._lock:
            if best:
                if self.best is None:
                    raise EmbeddingError(f"table {self.spec.name!r}: no snapshot was taken")
                return np.asarray(self.best[pos])
            return np.asarray(self.rows[pos])

    def update(self, gids: np.ndarray, grads: np.ndarray) -> int:
        grads = np.asarray(grads)
        if grads.dtype != np.float32 or grads.shape != (len(gids), self.spec.dim):
            raise EmbeddingError(
                f"table {self.spec.name!r}: gradients must be float32 of shape ({len(gids)}, {self.spec.dim}) "
                f"(got {grads.dtype} {grads.shape})"
            )
        pos = self.positions(gids)
        with self._lock:
            self.updates += 1
            return adagrad_step(self.rows, self.state, pos, grads, self.spec.lr, self.spec.eps)

    def snapshot(self) -> None:
        with self._lock:
            self.best = self.rows.copy()


class EmbeddingTables:
    """The tables one holder keeps (a server, or the in-process source), within ``limit_bytes`` together."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = int(limit_bytes)
        self._tables: dict[str, EmbeddingShard] = {}
        self._lock = threading.Lock()

    def create(self, spec: TableSpec, gids: np.ndarray, limit_key: str = "the embedding limit") -> EmbeddingShard:
        """The table ``spec.name``, created on first call; a second call with the same spec gets the same
        table (every trainer of a group creates it), one with another spec is refused."""
        spec.check()
        with self._lock:
            have = self._tables.get(spec.name)
            if have is not None:
                if have.spec != spec:
                    raise EmbeddingError(f"table {spec.name!r} exists with {asdict(have.spec)}; asked {asdict(spec)}")
                return have
            need = EmbeddingShard.bytes_for(len(gids), spec.dim)
            used = sum(EmbeddingShard.bytes_for(len(t.gids), t.spec.dim) for t in self._tables.values())
            if used + need > self.limit_bytes:
                raise MemoryError(
                    f"table {spec.name!r}: {len(gids):,} rows x {spec.dim} need {need >> 20} MiB (rows, Adagrad "
                    f"state, snapshot) beside {used >> 20} MiB held, over {limit_key}={self.limit_bytes >> 20}"
                )
            shard = self._tables[spec.name] = EmbeddingShard(spec, gids)
            return shard

    def get(self, name: str) -> EmbeddingShard:
        shard = self._tables.get(name)
        if shard is None:
            raise EmbeddingError(
                f"table {name!r} is not held here (never created, released, or lost when this server restarted)"
            )
        return shard

    def release(self, name: str) -> bool:
        with self._lock:
            return self._tables.pop(name, None) is not None

    def control(self, name: str, action: str) -> bool:
        """``"snapshot"``: keep the table's rows as the best so far; ``"release"``: drop it (False: not held)."""
        if action == "release":
            return self.release(name)
        if action == "snapshot":
            self.get(name).snapshot()
            return True
        raise EmbeddingError(f"action: expected 'snapshot' or 'release' (got {action!r})")

    def names(self) -> list[str]:
        return sorted(self._tables)
