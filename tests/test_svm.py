"""The h-step's linear SVMs (pipeline/dask_hashcodes/kernels/svm.py, pipeline/dask_hashcodes/distributed/row_blocks.py):
the block-wise Newton solver against the single-machine LIBLINEAR solution, and the same
weights and MAC codes whatever the number of workers and the storage chunking."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from distributed import Client

from dask_hashcodes.distributed import row_blocks as distributed_blocks
from dask_hashcodes.distributed.row_blocks import BlocksOnOneWorker, ScatteredBlocks, svm_blocks
from dask_hashcodes.hashing import make_hasher
from dask_hashcodes.kernels.hash_functions import linear_features, linear_scaling
from dask_hashcodes.kernels.svm import LocalBlocks, newton_svm, row_blocks, svm_objective

# Both solvers run to a relative gradient norm of about 1e-10 (the optimum is unique: the objective
# is strictly convex); their weights then agree to this relative tolerance, and every
# training point gets the same bit.
WEIGHT_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def svm_problem(fmnist_paths):
    """1200 Fashion-MNIST rows, RMS-scaled as MAC's linear h sees them, and 4 bits of targets
    that no linear function fits exactly (a random projection of the pixels plus noise)."""
    from dask_hashcodes.storage.datasets import open_dataset

    X = np.asarray(open_dataset(fmnist_paths[5000]).features[:1200], dtype=np.float64)
    F = linear_features(X, *linear_scaling(X))
    rng = np.random.default_rng(0)
    T = np.where(F @ rng.standard_normal((784, 4)) + 0.5 * rng.standard_normal((1200, 4)) > 0, 1.0, -1.0)
    return F, T


def _liblinear(F, T, C):
    """Single-machine LIBLINEAR (scikit-learn's LinearSVC, primal squared hinge, regularised
    intercept of a constant feature 1) per bit, stacked as (p + 1, b)."""
    from sklearn.svm import LinearSVC

    fits = [
        LinearSVC(C=C, loss="squared_hinge", dual=False, tol=1e-10, max_iter=100_000).fit(F, T[:, j])
        for j in range(T.shape[1])
    ]
    return np.vstack([np.stack([f.coef_[0] for f in fits], axis=1), [f.intercept_[0] for f in fits]])


def _signs(F, W):
    return F @ W[:-1] + W[-1] >= 0


@pytest.mark.parametrize("C", [1.0, 100.0])
def test_newton_equals_single_machine_liblinear(svm_problem, C):
    F, T = svm_problem
    W, stats = newton_svm(LocalBlocks(F, C, block_rows=500).with_targets(T), F.shape[1], T.shape[1], tol=1e-10)
    reference = _liblinear(F, T, C)
    relative = np.linalg.norm(W - reference, axis=0) / np.linalg.norm(reference, axis=0)
    assert relative.max() < WEIGHT_TOLERANCE, relative
    np.testing.assert_array_equal(_signs(F, W), _signs(F, reference))
    assert svm_objective(F, T, W, C) == pytest.approx(svm_objective(F, T, reference, C), rel=1e-10)
    assert stats["relative_gradient"] < 1e-8  # at the rounding floor of the objective


def test_a_warm_start_reaches_the_same_optimum_in_fewer_passes(svm_problem):
    F, T = svm_problem
    sums = LocalBlocks(F, 1.0).with_targets(T)
    cold, cold_stats = newton_svm(sums, F.shape[1], T.shape[1])
    flipped = T.copy()
    flipped[:20] *= -1  # a MAC iteration changes few of the codes
    start, _ = newton_svm(sums.with_targets(flipped), F.shape[1], T.shape[1])
    warm, warm_stats = newton_svm(sums.with_targets(T), F.shape[1], T.shape[1], start=start)
    np.testing.assert_allclose(svm_objective(F, T, warm, 1.0), svm_objective(F, T, cold, 1.0), rtol=1e-6)
    assert warm_stats["passes"] < cold_stats["passes"]


def test_row_blocks_depend_on_the_number_of_rows_only():
    assert row_blocks(5000) == [(0, 1024), (1024, 2048), (2048, 3072), (3072, 4096), (4096, 5000)]
    assert len(row_blocks(69_000)) == 8 and row_blocks(69_000)[-1][1] == 69_000
    assert all(b - a <= 65536 for a, b in row_blocks(3_000_000))


def test_scattered_blocks_give_the_same_weights_for_one_and_two_workers(svm_problem, clusters):
    """The distributed solve sums the same blocks in the same order whatever the workers: the
    weights are bit-identical for one and two workers (numpy takes the same product routines
    on every worker: blocks received unaligned are copied first), and equal to the in-memory
    solve's up to this process's BLAS rounding."""
    F, T = svm_problem
    local, _ = newton_svm(LocalBlocks(F, 10.0, block_rows=256).with_targets(T), F.shape[1], T.shape[1])
    weights = []
    for workers in (1, 2):
        with Client(clusters[workers]):
            sums = ScatteredBlocks("test-svm", F, 10.0, row_blocks(len(F), 256))
            weights.append(newton_svm(sums.with_targets(T), F.shape[1], T.shape[1])[0])
            sums.release()
    np.testing.assert_array_equal(weights[0], weights[1])
    # this process's BLAS may round differently from the workers' (OpenBLAS started with two
    # threads takes other product routines on AVX-512 cores than the workers' one-thread
    # start): the in-memory solve agrees to the last few bits, not bit for bit
    np.testing.assert_allclose(weights[0], local, rtol=1e-10, atol=1e-13)


def test_a_solve_on_one_worker_gives_the_scattered_blocks_weights(svm_problem, clusters, monkeypatch):
    """Rows small enough for one worker solve whole in one task: the same blocks, added in the
    same tree order (here a tree of several levels: fan-in 2 over 5 blocks). Cold and
    warm-started, its weights are bit-identical on one and two workers, and equal the
    scattered solve's up to the rounding of the solver's own steps, which run on a worker
    there and in this process for the scattered blocks."""
    import dask

    F, T = svm_problem
    bounds = row_blocks(len(F), 256)
    flipped = T.copy()
    flipped[::7, 0] *= -1
    solved = []
    with dask.config.set({"dhash.fan-in": 2}):
        for workers in (1, 2):
            with Client(clusters[workers]):
                for kind in (ScatteredBlocks, BlocksOnOneWorker):
                    blocks = kind("test-svm", F, 10.0, bounds)
                    cold, _ = blocks.solve(T)
                    warm, stats = blocks.solve(flipped, start=cold)
                    blocks.release()
                    solved.append((kind.__name__, workers, cold, warm))
    assert stats["passes"] > 2  # the warm start still took Newton steps
    by_kind = {(name, workers): (cold, warm) for name, workers, cold, warm in solved}
    for name in ("ScatteredBlocks", "BlocksOnOneWorker"):
        for one, two in zip(by_kind[name, 1], by_kind[name, 2]):
            np.testing.assert_array_equal(one, two, err_msg=name)
    for scattered, in_task in zip(by_kind["ScatteredBlocks", 2], by_kind["BlocksOnOneWorker", 2]):
        # atol: the weights of pixels that are 0 in every row are rounding noise around 0 (~1e-13)
        np.testing.assert_allclose(in_task, scattered, rtol=1e-10, atol=1e-12)
    with Client(clusters[1]):
        for expected in (BlocksOnOneWorker, ScatteredBlocks):
            made = svm_blocks("test-svm", F, 1.0)
            made.release()
            assert isinstance(made, expected)
            monkeypatch.setattr(distributed_blocks, "ONE_WORKER_MAX_BYTES", F.nbytes // 2)
    assert isinstance(svm_blocks("test-svm", F, 1.0), LocalBlocks)  # no client


def test_mac_codes_are_identical_for_two_storage_chunkings(fmnist_paths, cluster):
    """MAC gathers its training rows and cuts its own blocks: the stored chunking changes no
    bit (the one- and two-worker case is in test_mac.py)."""
    from dask_hashcodes.hashing.mac import TWO_STEP_STARTS
    from dask_hashcodes.storage.datasets import open_dataset

    ds = open_dataset(fmnist_paths[5000])
    X, y = np.asarray(ds.features[:1500], dtype=np.float32), np.asarray(ds.labels[:1500])
    # C fixed: the choice of C on the validation rows runs in test_mac.py's one- and two-worker case
    params = {
        "n_labeled": 600,
        "n_similar": 20,
        "n_dissimilar": 60,
        "validation_size": 100,
        "max_iter": 3,
        "svm_c": 1.0,
    }
    codes = []
    with Client(cluster):
        for chunk_rows in (1500, 400):
            TWO_STEP_STARTS.clear()  # each fit computes its own start: the start is compared too
            model = make_hasher("maccut", 8, mu_start=5.0, **params).fit(da.from_array(X, chunks=(chunk_rows, -1)), y)
            codes.append(model.encode(X))
    np.testing.assert_array_equal(codes[0], codes[1])
