"""Progress of a training run: a bar per epoch on a terminal, one log line per epoch otherwise.

Only the main process (rank 0) reports. The line carries what a user watches: loss, the validation score,
the share of the epoch spent waiting for data, and the feature cache's hit ratio.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

BAR = 30


class Progress:
    def __init__(self, enabled: bool = True, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.total = 0
        self.done = 0
        self.epoch = 0
        self.t0 = 0.0
        self._last = 0.0

    def epoch_start(self, epoch: int, batches: int) -> None:
        self.epoch, self.total, self.done, self.t0 = epoch, batches, 0, time.perf_counter()

    def step(self, loss: float) -> None:
        self.done += 1
        if not (self.enabled and self.tty):
            return
        now = time.perf_counter()
        if now - self._last < 0.1 and self.done < self.total:
            return
        self._last = now
        filled = BAR * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (BAR - filled)
        self.stream.write(f"\repoch {self.epoch} [{bar}] {self.done}/{self.total} loss {loss:.4f} {now - self.t0:.1f}s")
        self.stream.flush()

    def epoch_done(self, rec: dict[str, Any], metric: str) -> None:
        if not self.enabled:
            return
        vals = " ".join(f"{k} {rec[k]:.4f}" for k in rec if k.startswith("val_"))
        if "evaluation" in rec:
            vals += f" ({rec['evaluation']} neighbourhoods)"
        line = (
            f"epoch {rec['epoch']}: loss {rec['loss']:.4f}"
            + (f" train_acc {rec['train_acc']:.4f}" if "train_acc" in rec else "")
            + f" {vals} | {rec['epoch_s']:.1f}s, waiting {100 * rec['wait_share']:.0f}%,"
            f" cache hits {100 * rec['cache_hit_ratio']:.0f}%, {rec['feature_bytes_fetched'] / 2**20:.1f} MiB fetched"
        )
        self.stream.write(("\r\033[K" if self.tty else "") + line + "\n")
        self.stream.flush()

    def log(self, msg: str) -> None:
        if self.enabled:
            self.stream.write(msg + "\n")
            self.stream.flush()
