#!/bin/sh
# Write the cluster file clients read (same format as 'glisp serve-cluster' writes).
#   write-cluster-file.sh DATASET RUN OUT host:port [host:port ...]   (one address per partition, in order)
set -eu
[ $# -ge 4 ] || { echo "usage: $0 DATASET RUN OUT host:port [host:port ...]" >&2; exit 2; }
dataset=$1; run=$2; out=$3; shift 3
python3 - "$dataset" "$run" "$out" "$@" <<'PY'
import json, os, sys
dataset, run, out, *addrs = sys.argv[1:]
spec = {"format": "glisp-cluster", "format_version": 1, "dataset": dataset, "run": run,
        "num_parts": len(addrs), "addresses": [[a] for a in addrs]}
tmp = out + ".tmp"
with open(tmp, "w") as f:
    json.dump(spec, f, indent=2)
os.replace(tmp, out)
print(f"wrote {out}: {len(addrs)} partitions")
PY
