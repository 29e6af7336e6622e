#!/usr/bin/env bash
# The commands that produced the quality results in benchmarks/results/ (SGH, S3PLH, USPLH, DisH and their baselines).
# Run from the repository root after `bash deploy/setup.sh test` (the benchmarks need its faiss). `bash benchmarks/run_quality.sh STEP`
# runs one step; no argument runs them all (~1 h on 2 cores).
#   sweeps   parameter sweeps on a validation split (test queries removed first)
#   quality  the papers' protocols on the test split (1000 queries, seed 0): report.md per run,
#            collected into quality.md
#   scaling  SGH training time at 250k / 500k / 1M sift-synth, against plain numpy
set -euo pipefail
R=benchmarks/results
# shellcheck source=benchmarks/committed_report.sh
source "$(dirname "$0")/committed_report.sh"
# the committed report (the last argument, --out's value) is removed first; git keeps it
fresh_report() { remove_committed_report "${!#}"; "$@"; }
E="fresh_report .venv/bin/dhash evaluate --quiet"
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
S=".venv/bin/python benchmarks/sweep_params.py"
run sweeps $S --dataset fashion-mnist --method pcah --bits 32,48 --grid '{}' --ground-truth euclidean \
  --top-percent 2 --metric map --out $R/sweep_pcah_fashion-mnist.json
U='{"eta": [0.5, 1, 2, 4], "decay": [0.5]}'  # eta at two sizes of sift-synth and on fashion-mnist
run sweeps $S --dataset sift-synth --n 100000 --method usplh --bits 32,48 --grid "$U" --ground-truth euclidean \
  --top-percent 2 --metric map --out $R/sweep_usplh_sift-synth-100k.json
run sweeps $S --dataset sift-synth --n 400000 --method usplh --bits 32,48 --grid "$U" --ground-truth euclidean \
  --top-percent 2 --metric map --out $R/sweep_usplh_sift-synth-400k.json
run sweeps $S --dataset fashion-mnist --method usplh --bits 32,48 --grid "$U" \
  --ground-truth euclidean --top-percent 2 --metric map --out $R/sweep_usplh_fashion-mnist.json
run sweeps $S --dataset fashion-mnist --method sgh --bits 32,64,128 \
  --grid '[{"n_bases": [300, 1000], "bandwidth_scale": [0.5, 1, 2]}, {"rho_scale": [0.5, 2]}]' \
  --ground-truth euclidean --top-percent 2 --out $R/sweep_sgh_fashion-mnist.json
run sweeps $S --dataset fashion-mnist --method sgh --bits 32,64,128 \
  --grid '[{"rho_scale": [0.25]}, {"rho_scale": [0.5], "bandwidth_scale": [0.5]}]' \
  --ground-truth euclidean --top-percent 2 --out $R/sweep_sgh_fashion-mnist_round2.json
run sweeps $S --dataset sift-synth --n 100000 --method sgh --bits 32,64 \
  --grid '{"rho_scale": [0.25, 0.5, 1, 2], "bandwidth_scale": [0.5, 1, 2]}' \
  --ground-truth euclidean --top-percent 2 --out $R/sweep_sgh_sift-synth-100k.json
run sweeps $S --dataset fashion-mnist --method dgh --bits 32,64 --grid '{"n_nearest": [2, 3, 4], "rho": [0.01, 0.1, 1]}' \
  --ground-truth euclidean --top-percent 2 --out $R/sweep_dgh_fashion-mnist.json
run sweeps $S --dataset fashion-mnist --method dgh --bits 32,64 --grid '{"n_nearest": [2, 3], "rho": [3, 10]}' \
  --ground-truth euclidean --top-percent 2 --out $R/sweep_dgh_fashion-mnist_round2.json
run sweeps $S --dataset fashion-mnist --method splh --bits 24,48 --grid '{"eta": [0.01, 0.03, 0.1, 0.3, 1, 3]}' \
  --metric map --out $R/sweep_splh_fashion-mnist.json
run sweeps $S --dataset debian-minilm --method splh --bits 24,48 --grid '{"eta": [0.03, 0.1, 0.3, 1, 3, 10]}' \
  --metric map --out $R/sweep_splh_debian-minilm.json
run sweeps $S --dataset fashion-mnist --method sikh --bits 24,48 --grid '{"bandwidth_scale": [0.25, 0.5, 1, 2, 4]}' \
  --metric map --out $R/sweep_sikh_fashion-mnist.json
run sweeps $S --dataset debian-minilm --method dish --bits 16,32,64 --grid '{"max_iter": [20, 50, 100]}' \
  --metric map --out $R/sweep_dish_debian-minilm.json
run sweeps $S --dataset debian-minilm --method itq --bits 16,32,64 --grid '{}' --metric map \
  --out $R/sweep_itq_debian-minilm.json
# DisH's penalty against ITQ by the DisH paper's measure on four sets (results/dish_rho_validation.md)
L2="--bits 32,64 --ground-truth euclidean --top-k 100 --metric recall@1000"
RHO='{"rho_scale": [0.03, 0.1, 0.3, 1.0]}'
run sweeps $S --dataset debian-sift --method itq $L2 --grid '{}' --out $R/sweep_itq_debian-sift.json
run sweeps $S --dataset debian-sift --method dish $L2 --grid "$RHO" --out $R/sweep_dish_debian-sift.json
run sweeps $S --dataset fashion-mnist --method itq $L2 --grid '{}' --out $R/sweep_itq_fashion-mnist-l2.json
run sweeps $S --dataset fashion-mnist --method dish $L2 --grid "$RHO" --out $R/sweep_dish_fashion-mnist-l2.json
run sweeps $S --dataset debian-minilm --method itq $L2 --grid '{}' --out $R/sweep_itq_debian-minilm-l2.json
run sweeps $S --dataset debian-minilm --method dish $L2 --grid "$RHO" --out $R/sweep_dish_debian-minilm-l2.json
run sweeps $S --dataset sift-synth --n 500000 --method itq $L2 --grid '{}' --out $R/sweep_itq_sift-synth-500k.json
run sweeps $S --dataset sift-synth --n 500000 --method dish $L2 --grid "$RHO" --out $R/sweep_dish_sift-synth-500k.json
run sweeps $S --dataset fashion-mnist --method dish $L2 --grid '{"partition": ["by-label"], "rho_scale": [0.03, 0.1, 0.3, 1.0]}' \
  --out $R/sweep_dish_fashion-mnist-l2-by-label.json
run sweeps $S --dataset debian-sift --method dish $L2 \
  --grid '[{"rho_scale": [0.01]}, {"partition": ["by-label"], "rho_scale": [0.01]}]' --out $R/sweep_dish_debian-sift-rho0.01.json
run sweeps $S --dataset fashion-mnist --method dish $L2 \
  --grid '[{"rho_scale": [0.01]}, {"partition": ["by-label"], "rho_scale": [0.01]}]' --out $R/sweep_dish_fashion-mnist-l2-rho0.01.json
run sweeps $S --dataset debian-minilm --method dish $L2 --grid '{"rho_scale": [0.01]}' --out $R/sweep_dish_debian-minilm-l2-rho0.01.json
run sweeps $S --dataset sift-synth --n 500000 --method dish $L2 --grid '{"rho_scale": [0.01]}' \
  --out $R/sweep_dish_sift-synth-500k-rho0.01.json
Q=$R/quality
run quality $E --dataset fashion-mnist --methods lsh,sh,sikh,klsh,agh,pcah,isohash,itq,sgh,usplh --bits 32,48,64,128 \
  --ground-truth euclidean --top-percent 2 --ks 100,1000 --out $Q/fashion-mnist-euclidean
run quality $E --dataset fashion-mnist --methods lsh,sh,sikh,klsh,agh,pcah,pcah-adjusted,isohash,itq,splh --bits 24,48 --labeled 1000 \
  --ks 100,1000 --out $Q/fashion-mnist-labels
run quality $E --dataset sift-synth --n 100000 --methods lsh,sh,sikh,klsh,agh,pcah,isohash,itq,sgh,usplh --bits 32,48,64,128 \
  --ground-truth euclidean --top-percent 2 --ks 100,1000 --out $Q/sift-synth-100k-euclidean
run quality $E --dataset fashion-mnist --methods itq,dish --bits 32 --nodes 10 --partition random \
  --ks 100,1000 --out $Q/fashion-mnist-dish-random-partition
run quality $E --dataset debian-minilm --methods lsh,pcah,agh,itq,dish --bits 16,32,64 --ks 100,1000 \
  --out $Q/debian-minilm-labels
run quality $E --dataset debian-minilm --methods lsh,sh,sikh,pcah,pcah-adjusted,itq,splh --bits 24,48 --labeled 1000 \
  --ks 100,1000 --out $Q/debian-minilm-splh
run quality .venv/bin/python benchmarks/summarize_quality.py $Q --out $R/quality.md
run scaling .venv/bin/python benchmarks/bench_sgh_scaling.py --out $R/sgh_scaling.json
