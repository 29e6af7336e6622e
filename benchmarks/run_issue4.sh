#!/usr/bin/env bash
# The commands that produced benchmarks/results/{search,groundtruth,train,encode}_*.json
# (issue 4). Run from the repository root after `bash deploy/setup.sh`. DATA is a 100M-row
# sift-synth dataset: `.venv/bin/dhash synth sift --n 100000000 --out $DATA` (217 s, 8.5 GB).
set -euo pipefail
DATA=${DATA:-/work/bigdata/sift100m.zarr}
R=benchmarks/results
B=".venv/bin/dhash bench"
only=${1:-all}
run() { if [[ $only == all || $only == "$1" ]]; then shift; echo "+ $*" >&2; "$@" --quiet; fi; }
for bits in 32 64; do
  run search $B search --n 10000000 --bits $bits --out $R/search_10M_${bits}b.json
done
run groundtruth $B groundtruth --n 10000000 --data "$DATA" --out $R/groundtruth_10M.json
for m in dish dish-allreduce itq; do
  run train10 $B train --n 10000000 --bits 32 --method $m --data "$DATA" --out $R/train_10M_${m}.json
done
run encode $B encode --n 100000000 --bits 32 --data "$DATA" --out $R/encode_100M_32b.json
for bits in 32 64; do
  run search100 $B search --n 100000000 --bits $bits --out $R/search_100M_${bits}b.json
done
for m in dish dish-allreduce itq; do
  run train100 $B train --n 100000000 --bits 32 --method $m --data "$DATA" --out $R/train_100M_${m}.json
done
