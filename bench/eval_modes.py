"""Full-neighbourhood against sampled evaluation of the same checkpoints (docs/training.md, issue 27).

For each seed: ``glisp train``'s trainer over the in-process one-partition run (created when missing), with
validation and test at full neighbourhoods (the default); then the same best weights evaluated on the test
vertices with sampled trees at the training fanouts, as ``train.evaluation = "sampled"`` does.

    .venv/bin/python bench/eval_modes.py data/cora --run whole --epochs 20 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from glisp_core.config import load_config, with_values
    from glisp_train.dist import Dist
    from glisp_train.loader import LoaderTimes
    from glisp_train.run import ensure_one_partition_run
    from glisp_train.source import open_in_process
    from glisp_train.trainer import setup, train

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--run", default="whole")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--fanouts", default="10,10")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    a = ap.parse_args()
    fan = [int(x) for x in a.fanouts.split(",")]
    base = with_values(load_config(), "train", epochs=a.epochs, hidden=a.hidden, fanouts=fan, layers=len(fan))
    ensure_one_partition_run(base, a.dataset, a.run)
    rows = []
    for seed in a.seeds:
        cfg = with_values(base, "train", seed=seed)
        src = open_in_process(a.dataset, a.run, cfg)
        try:
            res = train(cfg, src, Dist())
            s = setup(with_values(cfg, "train", evaluation="sampled"), src, Dist())
            s.model.load_state_dict(res.model.state_dict())
            sampled = s.task.evaluate(s.ctx, s.evaluator, "test", LoaderTimes())
        finally:
            src.close()
        rows.append((seed, res.test["acc"], sampled["acc"]))
        print(f"seed {seed}: test acc full {res.test['acc']:.4f}, sampled {fan} {sampled['acc']:.4f}", flush=True)
    full, smp = np.mean([r[1] for r in rows]), np.mean([r[2] for r in rows])
    print(f"mean over seeds {a.seeds}: full {full:.4f}, sampled {smp:.4f}, difference {full - smp:+.4f}")


if __name__ == "__main__":
    main()
