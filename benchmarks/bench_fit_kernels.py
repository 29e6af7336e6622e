"""Three fit kernels against the computation each replaced, on Fashion-MNIST, in one process
on one BLAS thread (a worker's setting), alternating, with the outputs compared:

- ``splh-direction``: a bit's direction of SPLH/USPLH, the top eigenvector of a 784 x 784
  symmetric matrix (the data covariance plus its label term), by LAPACK's one-eigenpair
  solver (``kernels.stats.top_eigenvector``) against the full ``eigh`` it replaced;
- ``kmh-assignment``: KMH's assignment statistics of 20000 rows (``kernels.kmh.assignment_sums``,
  each row added to its M codewords' sums) against the one-hot GEMM over all M k codewords
  it replaced, at 16 and 32 bits;
- ``mac-quad``: a quad fit (MAC's quadratic surrogate, 16 bits, 1500 labeled rows, 20000
  rows) whose mostly non-zero S is multiplied dense against the same fit with the CSR
  products it replaced (``zstep.DENSE_PRODUCT_BYTES = 0``).

Each row gives the median seconds of both over ``--repeat`` runs (the kernels after one
untimed call each, the quad fits alternating), their ratio, and whether
the outputs are bitwise equal (for the direction: equal up to 1e-12).

    .venv/bin/python benchmarks/bench_fit_kernels.py --repeat 3 --out benchmarks/results/fit_kernels.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import dask  # noqa: E402 - after the sys.path entry above
import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from benchmarks.harness.measure import machine_info  # noqa: E402
from benchmarks.harness.runs import check_result_out, write_pair  # noqa: E402
from dask_hashcodes.data.sources import write_fashion_mnist  # noqa: E402
from dask_hashcodes.hashing.registry import make_hasher  # noqa: E402
from dask_hashcodes.kernels import kmh, zstep  # noqa: E402
from dask_hashcodes.kernels.label_similarity import pair_labels  # noqa: E402
from dask_hashcodes.kernels.stats import top_eigenvector, top_eigenvectors  # noqa: E402

ROWS, LABELED = 20000, 1500


def one_hot_assignment_sums(X, mean, components, centroids):
    """KMH's assignment statistics as computed before: the sums as a one-hot GEMM."""
    M, k, _ = centroids.shape
    counts, sums = np.zeros(M * k, np.int64), np.zeros((M * k, X.shape[1]))
    flat = np.arange(M) * k
    for _, part, nearest in kmh._nearest_slabs(X, mean, components, centroids):
        cells = (nearest + flat[None, :]).ravel()
        counts += np.bincount(cells, minlength=M * k)
        onehot = np.zeros((len(part), M * k))
        onehot[np.repeat(np.arange(len(part)), M), cells] = 1.0
        sums += (part.T @ onehot).T
    return counts.reshape(M, k), sums.reshape(M, k, X.shape[1])


def timed(fn, repeat: int) -> tuple[float, object]:
    """(median seconds, output) of ``repeat`` calls after one untimed call (numba's compile
    or cache load, and the first touch of the arrays, are not the kernel's cost)."""
    seconds, out = [], fn()
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), out


def row(name: str, params: str, ours: float, previous: float, equal: bool) -> dict:
    """One result row: median seconds of ours and of the computation it replaced."""
    return {
        "kernel": name,
        "params": params,
        "ours_seconds": round(ours, 4),
        "previous_seconds": round(previous, 4),
        "ratio": round(ours / previous, 3),
        "outputs_equal": bool(equal),
    }


def splh_direction(X: np.ndarray, y: np.ndarray, repeat: int) -> dict:
    centred = X - X.mean(axis=0)
    C = centred.T @ centred / len(X)
    labeled = centred[:1000]
    L = labeled.T @ pair_labels(y[:1000]) @ labeled
    M = C + L * (np.linalg.eigvalsh(C)[-1] / np.abs(np.linalg.eigvalsh(L)).max())  # S3PLH's eta = 1
    M = (M + M.T) / 2.0
    previous = timed(lambda: top_eigenvectors(M, 1)[1][:, 0], repeat)
    ours = timed(lambda: top_eigenvector(M), repeat)
    equal = np.allclose(ours[1], previous[1], rtol=0, atol=1e-12)
    return row("splh-direction", "784 x 784", ours[0], previous[0], equal)


def kmh_assignment(X: np.ndarray, bits: int, repeat: int) -> dict:
    rng = np.random.default_rng(0)
    mean = X.mean(axis=0)
    components = np.linalg.qr(rng.standard_normal((X.shape[1], bits)))[0]
    centroids = rng.standard_normal((bits // 4, 16, 4)) * 300.0
    previous = timed(lambda: one_hot_assignment_sums(X, mean, components, centroids), repeat)
    ours = timed(lambda: kmh.assignment_sums(X, mean, components, centroids), repeat)
    equal = all(np.array_equal(a, b) for a, b in zip(ours[1], previous[1]))
    return row("kmh-assignment", f"{len(X)} rows, {bits} bits", ours[0], previous[0], equal)


def mac_quad(X, y, repeat: int) -> dict:
    def fit():
        model = make_hasher("quad", 16, random_state=0, n_labeled=LABELED, svm_c=1.0).fit(X, y)
        return model.weights_

    dense_bytes = zstep.DENSE_PRODUCT_BYTES
    times = {"ours": [], "previous": []}
    weights = {}
    for _ in range(repeat):  # alternating: a slower stretch of the machine hits both
        for mode, limit in (("previous", 0), ("ours", dense_bytes)):
            zstep.DENSE_PRODUCT_BYTES = limit
            started = time.perf_counter()
            weights[mode] = fit()
            times[mode].append(time.perf_counter() - started)
    zstep.DENSE_PRODUCT_BYTES = dense_bytes
    equal = np.array_equal(weights["ours"], weights["previous"])
    params = f"quad fit, 16 bits, {LABELED} labeled of {ROWS} rows"
    return row("mac-quad", params, statistics.median(times["ours"]), statistics.median(times["previous"]), equal)


def markdown(result: dict) -> str:
    lines = [
        "# Fit kernels against the computations they replaced (Fashion-MNIST, one BLAS thread)",
        "",
        f"Machine: {result['machine']['cpu_model']}, {result['machine']['cores']} cores. "
        f"Command: `{result['command']}`",
        "",
        "| kernel | on | ours s | previous s | ours / previous | outputs equal |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['kernel']} | {r['params']} | {r['ours_seconds']:.4f} | {r['previous_seconds']:.4f} | "
            f"{r['ratio']:.2f}x | {r['outputs_equal']} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, median kept")
    parser.add_argument("--out", default="benchmarks/results/fit_kernels.json")
    parser.add_argument("--overwrite", action="store_true", help="replace a result written before")
    args = parser.parse_args(argv)
    check_result_out(args.out, overwrite=args.overwrite)
    dask.config.set(scheduler="synchronous")  # the fits' chunk tasks in this process, as on one worker
    with tempfile.TemporaryDirectory(prefix="dhash-fit-kernels-") as work, threadpool_limits(limits=1):
        ds = write_fashion_mnist(Path(work) / "fm.zarr", chunk_rows=ROWS)
        raw = np.asarray(ds.features_dask()[:ROWS].compute())
        y = np.asarray(ds.labels)[:ROWS]
        X = raw.astype(np.float64)
        rows = [splh_direction(X, y, args.repeat)]
        rows += [kmh_assignment(raw, bits, args.repeat) for bits in (16, 32)]
        rows.append(mac_quad(ds.features_dask()[:ROWS], y, args.repeat))
    result = {
        "schema": "dhash.bench/1",  # what lets a later run with --overwrite replace it
        "command": " ".join(["benchmarks/bench_fit_kernels.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "blas_threads": 1,
        "data": f"Fashion-MNIST, first {ROWS} rows",
        "rows": rows,
    }
    write_pair(result, markdown(result), args.out, overwrite=args.overwrite)
    print(markdown(result))


if __name__ == "__main__":
    main()
