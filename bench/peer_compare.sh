#!/bin/bash
# DistDGL and the GLISP service back to back on the same edge list, under the shared benchmark lock.
#
#   bash bench/peer_compare.sh [extra bench/sampling.py arguments]        (from the project root)
#
# 1. DistDGL 2.1 (2 servers + 2 clients on loopback, seed-first windows): the peer bench's run_all.sh
#    with SKIP_INPROC=1 (it builds its own METIS partitions; its venv must exist, see its header);
# 2. bench/sampling.py --edges on the same file, its DistDGL ratios read from run_all.sh's JSON.
# Both wait (bounded, QUIET_WAIT seconds) for other processes to go quiet before each window.
# Env: PEER [/work/shared/tools/peer_dgl]  GRAPH [/tmp/peer/graphs/rmat18.tsv]  ROOT [/tmp/glisp-bench-edges]
#      WINDOWS [3]  QUIET_WAIT [10]  OUT [/tmp/glisp-peer-compare.json]
set -euo pipefail
cd "$(dirname "$0")/.."
PEER=${PEER:-/work/shared/tools/peer_dgl}
GRAPH=${GRAPH:-/tmp/peer/graphs/rmat18.tsv}
ROOT=${ROOT:-/tmp/glisp-bench-edges}
WINDOWS=${WINDOWS:-3}
QUIET_WAIT=${QUIET_WAIT:-10}
OUT=${OUT:-/tmp/glisp-peer-compare.json}
NAME=$(basename "$GRAPH" .tsv)
# build outside the lock (Spark; nothing is timed)
.venv/bin/python bench/sampling.py --edges "$GRAPH" --root "$ROOT" --build-only
PHASES=$(printf 'balanced:seedfirst%.0s,' $(seq "$WINDOWS")); PHASES=${PHASES%,}
exec flock /tmp/glisp-bench.lock bash -c "
  set -euo pipefail
  GRAPHS=$NAME HOLDOUT=$(dirname "$GRAPH") SKIP_INPROC=1 DIST_PHASES=$PHASES PEER_MAX_QUIET_WAIT=$QUIET_WAIT \
    bash $PEER/run_all.sh
  .venv/bin/python bench/sampling.py --edges $GRAPH --root $ROOT --windows $WINDOWS --max-quiet-wait $QUIET_WAIT \
    --peer-json /tmp/peer/results/dist_$NAME.json --json $OUT $*
"
