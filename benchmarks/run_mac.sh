#!/usr/bin/env bash
# The committed MAC comparisons (benchmarks/results/mac/), one command per result, in the
# order they are worth re-running after a change to MAC: the acceptance lengths first, then
# the seeds, the kernel hash function, the eSPLH loss, the text embeddings, and the SVMs' C
# against the validation database.
#   bash benchmarks/run_mac.sh            # all (about 2.5 h on 2 cores)
#   bash benchmarks/run_mac.sh b32 seeds  # some: b16 b32 b48 seeds kernel esplh minilm svm_c rules rule_seeds scale knn
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT=benchmarks/results/mac
# shellcheck source=benchmarks/committed_report.sh
source benchmarks/committed_report.sh
# DRY_RUN=1 prints the commands without running them (tests/test_mac.py checks them
# against the commands the committed results record)
run() {
    if [ -n "${DRY_RUN:-}" ]; then echo "$*"; return; fi
    echo "== $*" >&2
    local out="" prev=""
    for arg in "$@"; do [ "$prev" = --out ] && out=$arg; prev=$arg; done
    [ -n "$out" ] && remove_committed_report "$out"
    "$PY" benchmarks/mac_comparison.py "$@"
}

b16() { run --dataset fashion-mnist --bits 16 --labeled 5000 --out $OUT/fashion-mnist-linear-b16; }
b32() { run --dataset fashion-mnist --bits 32 --labeled 5000 --out $OUT/fashion-mnist-linear-b32; }
b48() { run --dataset fashion-mnist --bits 48 --labeled 5000 --out $OUT/fashion-mnist-linear-b48; }
seeds() {
    for seed in 1 2; do
        run --bits 32 --methods cut,maccut --seed $seed --out $OUT/fashion-mnist-linear-b32-seed$seed
    done
}
# The settings of MAC's h-step and early stopping tried on the validation rows (each run's
# 'validation' columns choose; the test map only reports): cut and MACcut at 16 and 32 bits
# with the defaults over three seeds, and MACcut with one rule changed (C fixed at the value
# the defaults' run chose on the validation rows). Then the summary of all of them:
# .venv/bin/python benchmarks/mac_settings.py benchmarks/results/mac/settings
SETTINGS=$OUT/settings
rules() {
    for bits in 16 32; do
        run --bits $bits --methods cut,maccut --out $SETTINGS/b$bits-refit
        run --bits $bits --methods maccut --svm-c 1 --early-stopping precision --out $SETTINGS/b$bits-paper
        run --bits $bits --methods maccut --svm-c 1 --h-step lower-loss --out $SETTINGS/b$bits-lowerloss
    done
    run --bits 32 --methods cut,maccut --labeled 10000 --out $SETTINGS/b32-10k
    run --dataset debian-minilm --bits 32 --labeled 5000 --kappa-plus 6 --methods cut,maccut --out $SETTINGS/minilm-b32
    # the paper's eq. 3 scale of mu: its mu_1 = 0.3 divided by the b^2 = 1024 dhash weighs the penalty by
    run --bits 32 --methods maccut --svm-c 1 --mu-start 0.00029296875 --out $SETTINGS/b32-rawscale
}
rule_seeds() {
    for seed in 1 2; do
        for bits in 16 32; do
            run --bits $bits --methods cut,maccut --seed $seed --out $SETTINGS/b$bits-refit-seed$seed
        done
    done
}
# MACcut as the training set grows, up to every labelled database row of Fashion-MNIST (67,000
# training + 2000 validation rows = the 69,000 database rows): one run at a time, as the
# timings are the result. Then the summary: .venv/bin/python benchmarks/mac_scale.py benchmarks/results/mac/scale
SCALE=$OUT/scale
scale() {
    for labeled in 5000 20000 67000; do
        run --bits 32 --methods maccut --labeled $labeled --out $SCALE/b32-$labeled
    done
}
# MACcut on a million points without labels: sift-synth (128-d), knn affinities with the
# neighbours searched among nearby k-means cells, 10 similar + 40 dissimilar pairs per point;
# the cost of the start and of each iteration is the result (three iterations), and ITQ on
# the same rows is the quality reference. Summarised by mac_scale.py with the scale runs.
knn() {
    run --dataset sift-synth --rows 1010000 --ground-truth euclidean --top-k 1000 --bits 32 --methods itq,maccut \
        --affinity knn --knn-search cells --labeled 1000000 --kappa-plus 10 --kappa-minus 40 --max-iter 3 \
        --out $SCALE/knn-b32-1000000
}
kernel() {
    run --dataset fashion-mnist --bits 32 --labeled 5000 --methods cut,maccut --hash-function kernel \
        --out $OUT/fashion-mnist-kernel
}
esplh() {
    run --dataset fashion-mnist --bits 32 --labeled 5000 --methods cut,maccut --loss esplh \
        --out $OUT/fashion-mnist-esplh
}
minilm() {
    run --dataset debian-minilm --bits 32,48 --labeled 5000 --kappa-plus 6 --methods itq,ksh,cut,maccut \
        --out $OUT/debian-minilm-linear
}
# LIBLINEAR's C a decade either side of its default 1, which every other result uses, for cut
# alone (its h has no early stopping, so only the 'validation' column depends on the database):
# which validation database's precision prefers the C the test prefers?
svm_c() {
    for c in 0.1 1 10; do
        for database in held-out training; do
            run --bits 32 --methods cut --svm-c $c --validation-database $database \
                --out $OUT/fashion-mnist-cut-b32-c$c-$database
        done
    done
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(b16 b32 b48 seeds kernel esplh minilm svm_c rules rule_seeds scale knn)
for target in "${targets[@]}"; do "$target"; done
