#!/usr/bin/env python
"""How large MAC's GraphCut blocks of one label's points should be: one bit's Z-step over
blocks of whole classes against classes split into blocks of at most 500-4000 points.

    .venv/bin/python benchmarks/mac_label_blocks.py --out benchmarks/results/mac/scale/label-blocks.md

On ``--labeled`` points of the Fashion-MNIST training file (60,000; drawn with the seed, label affinities with
100 similar and 500 dissimilar pairs per point, KSH loss, 32 bits) the first bit of the free
codes is solved as ``free_codes`` does (spectral start, then GraphCut over the blocks, the
other bits not set yet), and a bit of random codes is solved against random h(X) at the
paper's first penalty. Each block is solved exactly; a split moves a class's pairs between
blocks out of the max-flow and into linear terms, so the energy reached can only be compared,
not predicted. Reports the energy reached (lower is better) and the seconds, one run at a
time on the machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.measure import machine_info  # noqa: E402
from dask_hashcodes.data.sources import fashion_mnist_dir  # noqa: E402
from dask_hashcodes.kernels.affinity import Pairs, label_affinities, label_blocks, penalty_scale  # noqa: E402
from dask_hashcodes.kernels.zstep import CutBlocks, _BitSweep, _cut_blocks, _starting, bit_energy  # noqa: E402

CAPS = (None, 4000, 2000, 1000, 500)


def _labels(n: int, rng: np.random.Generator) -> np.ndarray:
    import gzip

    with gzip.open(fashion_mnist_dir() / "train-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return labels[np.sort(rng.choice(len(labels), n, replace=False))]


def _solve(S, z, pairs, labels, cap, mu, h):
    plan = CutBlocks(pairs.indptr, pairs.indices, label_blocks(labels, cap))
    started = time.perf_counter()
    new = _cut_blocks(S, z, plan, mu, h)
    return new, time.perf_counter() - started, len(plan)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--labeled", type=int, default=60000)
    parser.add_argument("--bits", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    labels = _labels(args.labeled, rng)
    pairs = Pairs(label_affinities(labels, 100, 500, rng))
    b, n = args.bits, args.labeled

    free = _BitSweep("ksh", np.zeros((n, b)), pairs).coupling(0)
    S_free = free.matrix()
    start = _starting(S_free)
    none = np.zeros(n)
    Z = rng.choice([-1.0, 1.0], size=(n, b))
    H = rng.choice([-1.0, 1.0], size=(n, b))
    mu = 0.3 * penalty_scale("ksh", b)
    penalised = _BitSweep("ksh", Z.copy(), pairs).coupling(0)
    S_penalised = penalised.matrix()
    states = {
        "first bit of the free codes (mu = 0, spectral start)": (free, S_free, start, 0.0, none),
        f"random codes against random h(X), mu = {mu:g}": (penalised, S_penalised, Z[:, 0], mu, H[:, 0]),
    }
    lines = [
        "# MAC's GraphCut blocks: whole classes or split",
        "",
        f"- command: `.venv/bin/python benchmarks/mac_label_blocks.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
        f"- machine: {machine_info()['cpu_model']}; one process, nothing else running",
        f"- {n} Fashion-MNIST training points drawn with seed {args.seed}, label affinities (100 similar + 500 "
        f"dissimilar pairs per point), KSH loss, {b} bits; one bit's GraphCut over the blocks, each solved exactly",
        "- energy: z^T S z + mu ||z - h||^2 after the bit's cut, relative to whole classes' (lower is better)",
        "",
        "| state | largest block | blocks | energy | energy / whole classes' | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for name, (coupling, S, z, mu_, h) in states.items():
        reference = None
        for cap in CAPS:
            new, seconds, count = _solve(coupling, z, pairs, labels, cap, mu_, h)
            energy = bit_energy(S, new, mu_, h)
            reference = energy if reference is None else reference
            lines.append(
                f"| {name} | {'whole class' if cap is None else cap} | {count} | {energy:.6g} | "
                f"{energy / reference:.6f} | {seconds:.2f} |"
            )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
