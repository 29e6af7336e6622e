"""Choosing how an inverted file learns its lists from the codes alone, on validation queries.

A code-space quantiser (``index(kind="ivf", quantiser="codes")``) reads no feature: its
centroids are binary codes, every row goes to the list of its nearest centroid code by
popcount, and a query probes the lists nearest its own code. Two ways to learn the centroid
codes from a sample of the codes are compared:

* k-majority: Lloyd's steps in Hamming space (each code to its nearest centroid code, each
  centroid the bitwise majority of its codes);
* k-means on the codes as +-1 vectors, the centroids made binary by their signs once the
  steps are done (FAISS's ``IndexBinaryIVF`` training): the steps assign by squared L2 to
  real-valued centroids, which weigh each bit by how firmly the centroid's codes agree on it.

each with 10 steps from the same drawn start, on 64, 128 and 256 sampled codes per list.
Measured on queries that no benchmark reports (rows held out of the database): the recall of
the exact Hamming top-10 through the lists at each nprobe, and the training seconds on one
thread. Data: sift-synth (database rows 0..n, validation queries rows n..n+1000) and
Fashion-MNIST (the 60,000 training images, 1,000 of them drawn as validation queries and left
out; the test images are never read); 64-bit ITQ codes learned on the database.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ivf_code_quantiser_validation.py \
        --out benchmarks/results/ivf_code_quantiser_validation
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.ivf_quantiser_validation import (  # noqa: E402
    KMEANS_STEPS,
    NPROBES,
    K,
    exact_hamming_topk,
    fashion_mnist,
    itq_codes,
    sift_synth,
    write_result,
)
from dask_hashcodes.kernels.code_kmeans import CodeCentres  # noqa: E402

TRAININGS = ("k-majority", "k-means on +-1")
ROWS_PER_LIST = (256, 128, 64)


# k-majority's step, which the library does not use (it lost here): plain numpy and numba
def majority_counts(codes: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """One k-majority step's statistics of a chunk of packed codes: (codes per centre int64
    (m,), per centre the count of its codes with each bit set int64 (m, bits), the total
    Hamming distance to the nearest centres)."""
    scorer = CodeCentres(centres)
    nearest, distance = scorer.nearest(codes)
    m, bits = len(scorer.centres), 8 * scorer.centres.shape[1]
    members = np.bincount(nearest, minlength=m).astype(np.int64)
    ones = np.zeros((m, bits), np.int64)
    _add_bits(np.ascontiguousarray(codes, dtype=np.uint8), nearest, ones)
    return members, ones, int(distance.sum())


@njit(nogil=True, cache=True)
def _add_bits(codes, nearest, ones):
    for r in range(codes.shape[0]):
        row = ones[nearest[r]]
        for byte in range(codes.shape[1]):
            value = codes[r, byte]
            for bit in range(8):  # numpy's packbits order: the first bit is the byte's highest
                row[8 * byte + bit] += (value >> (7 - bit)) & 1


def majority_centres(centres: np.ndarray, members: np.ndarray, ones: np.ndarray) -> np.ndarray:
    """The next centre codes: each bit the majority of the centre's codes; a tied bit, or
    every bit of a centre without codes, keeps its value."""
    old = np.unpackbits(np.asarray(centres, dtype=np.uint8), axis=1)
    twice = 2 * np.asarray(ones, dtype=np.int64)
    size = np.asarray(members, dtype=np.int64)[:, None]
    new = np.where(twice > size, 1, np.where(twice < size, 0, old)).astype(np.uint8)
    return np.packbits(new, axis=1)


def centroid_codes(sample: np.ndarray, n_lists: int, training: str, seed: int = 0) -> np.ndarray:
    """(n_lists, code bytes) centroid codes learned by ``training`` in KMEANS_STEPS steps from
    n_lists distinct rows of ``sample`` drawn with ``seed``."""
    from dask_hashcodes.kernels.code_kmeans import binary_centres, code_signs
    from dask_hashcodes.kernels.kmeans import lloyd_sums, updated_centres

    rng = np.random.default_rng(seed)
    start = sample[np.sort(rng.choice(len(sample), n_lists, replace=False))]
    if training == "k-majority":
        centres = start
        for _ in range(KMEANS_STEPS):
            members, ones, _ = majority_counts(sample, centres)
            centres = majority_centres(centres, members, ones)
        return centres
    centres = code_signs(start)
    for _ in range(KMEANS_STEPS):
        counts, sums, _ = lloyd_sums(sample, centres, transform=code_signs)
        centres = updated_centres(centres, counts, sums)
    return binary_centres(centres)


def recalls(centres, db_codes, query_codes, true_d) -> dict:
    from dask_hashcodes.indexes.ivf import InvertedLists
    from dask_hashcodes.kernels.code_kmeans import nearest_code_centres
    from dask_hashcodes.kernels.ivf import probed_code_lists, search_lists

    assignment = nearest_code_centres(db_codes, centres)
    lists = InvertedLists.assigned(centres, db_codes, np.arange(len(db_codes)), assignment)
    kth = true_d[:, -1:]
    out = {}
    for nprobe in NPROBES:
        probes = probed_code_lists(query_codes, centres, nprobe)
        found_d, _ = search_lists(query_codes, probes, lists.list_codes, lists.list_ids, lists.offsets, K)
        out[nprobe] = float(((found_d >= 0) & (found_d <= kth)).sum() / true_d.size)
    return out


def run(name, database, queries) -> list[dict]:
    n_lists = int(round(4 * np.sqrt(len(database))))
    db_codes, query_codes = itq_codes(database, queries, 64)
    true_d, _ = exact_hamming_topk(db_codes, query_codes)
    rows = []
    for rows_per_list in ROWS_PER_LIST:
        rng = np.random.default_rng(0)
        size = min(len(db_codes), rows_per_list * n_lists)
        sample = db_codes[np.sort(rng.choice(len(db_codes), size, replace=False))] if size < len(db_codes) else db_codes
        for training in TRAININGS:
            started = time.perf_counter()
            centres = centroid_codes(sample, n_lists, training)
            seconds = time.perf_counter() - started
            row = {
                "dataset": name, "n": len(database), "lists": n_lists, "rows_per_list": rows_per_list,
                "training_rows": len(sample), "training": training, "training_seconds": seconds,
                "recall_by_nprobe": recalls(centres, db_codes, query_codes, true_d),
            }  # fmt: skip
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def render(result) -> str:
    lines = [
        "# An inverted file's lists learned from the codes alone, chosen on validation queries",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']['cpu_model']}, {result['machine']['cores']} cores",
        "- queries: 1,000 validation rows held out of each database (sift-synth: generator rows n..n+1000; "
        "Fashion-MNIST: drawn from the training images with seed 0; its test images are never read)",
        "- recall: of the exact Hamming top-10 of 64-bit ITQ codes (ties count as found), through 4 sqrt(n) lists "
        f"learned in {KMEANS_STEPS} steps, every row assigned and every query probed by Hamming distance to the "
        "centroid codes; training seconds on one thread",
        "",
        "| data | rows/list | training | training s | " + " | ".join(f"nprobe {p}" for p in NPROBES) + " |",
        "|---" * (4 + len(NPROBES)) + "|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['dataset']} | {r['rows_per_list']} | {r['training']} | {r['training_seconds']:.1f} | "
            + " | ".join(f"{r['recall_by_nprobe'][p]:.4f}" for p in NPROBES)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sift-n", type=int, default=1_000_000)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    rows = run("fashion-mnist", *fashion_mnist())
    rows += run("sift-synth", *sift_synth(args.sift_n))
    write_result("benchmarks/ivf_code_quantiser_validation.py", argv, rows, args.out, render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
