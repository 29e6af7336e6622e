#!/usr/bin/env bash
# The commands that produced the performance results in benchmarks/results/ (search_*, groundtruth_*,
# train_*, encode_*, pipeline_10M). Run from the repository root after `bash deploy/setup.sh test` (the benchmarks need its faiss).
# DATA is a 100M-row sift-synth dataset, made once with
#   .venv/bin/dhash synth sift --n 100000000 --out $DATA        (217 s, 8.5 GB on disk)
# (the committed speed results used a sift-synth v1 set; their cost does not depend on the
# generator version. The pipeline step makes its own v2 data.)
# `bash benchmarks/run_performance.sh STEP` runs one step (search, groundtruth, groundtruth-epyc, train10, encode,
# search100, dish100, train100, itqfaiss, pipeline, clientthreads, fitkernels, summary); no argument runs them all (~1.5 h).
# summary rebuilds results/performance.md (and the README's copy of it) from the result files.
set -euo pipefail
DATA=${DATA:-/work/bigdata/sift100m.zarr}
R=benchmarks/results
# --overwrite: a result is replaced only when it is a benchmark result ("schema": "dhash.bench/1").
# Results recorded before the stage benchmarks moved out of the dhash command say `dhash bench STAGE`:
# `python -m benchmarks STAGE` with the same options is the same run.
B=".venv/bin/python -m benchmarks"
only=${1:-all}
# DRY_RUN=1 prints the commands without running them (tests/test_results_index.py checks them
# against the commands the committed results record)
run() {
  [[ $only == all || $only == "$1" ]] || return 0
  shift
  if [ -n "${DRY_RUN:-}" ]; then echo "$*"; return; fi
  echo "+ $*" >&2
  "$@"
}
for bits in 32 64; do
  run search $B search --n 10000000 --bits $bits --out $R/search_10M_${bits}b.json --quiet --overwrite
done
run groundtruth $B groundtruth --n 10000000 --data "$DATA" --out $R/groundtruth_10M.json --quiet --overwrite
# the same on generated rows (no DATA needed), run on an AMD EPYC; 2M as a quick check
run groundtruth-epyc $B groundtruth --n 10000000 --out $R/groundtruth_10M_epyc.json --quiet --overwrite
run groundtruth-epyc $B groundtruth --n 2000000 --out $R/groundtruth_2M_epyc.json --quiet --overwrite
run pipeline .venv/bin/python benchmarks/bench_pipeline.py --n 10000000 --out $R/pipeline_10M.json
run dish100 $B train --n 100000000 --bits 32 --method dish --data "$DATA" --out $R/train_100M_dish.json --quiet --overwrite
run encode $B encode --n 10000000 --bits 32 --data "$DATA" --out $R/encode_10M_32b.json --quiet --overwrite
run encode $B encode --n 100000000 --bits 32 --data "$DATA" --out $R/encode_100M_32b.json --quiet --overwrite
for bits in 32 64; do
  run search100 $B search --n 100000000 --bits $bits --out $R/search_100M_${bits}b.json --quiet --overwrite
done
for m in dish dish-allreduce itq; do
  run train10 $B train --n 10000000 --bits 32 --method $m --data "$DATA" --out $R/train_10M_${m}.json --quiet --overwrite
done
run clientthreads .venv/bin/python benchmarks/bench_client_threads.py --repeat 2 --out $R/client_threads.json
run fitkernels .venv/bin/python benchmarks/bench_fit_kernels.py --repeat 3 --out $R/fit_kernels.json --overwrite
run itqfaiss $B train --method itq-vs-faiss --n 1000000 --bits 32 --data "$DATA" --out $R/train_itq_vs_faiss_1M.json --quiet --overwrite
for m in dish-allreduce itq; do
  run train100 $B train --n 100000000 --bits 32 --method $m --floor-repeats 1 --data "$DATA" --out $R/train_100M_${m}.json --quiet --overwrite
done
run summary .venv/bin/python benchmarks/summarize_performance.py
