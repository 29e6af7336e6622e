"""ADSH (pipeline/dask_hashcodes/hashing/adsh.py): the V-step on the cluster against a dense single-process
V-step, codes independent of workers and chunking, a save/load round trip, the command-line
flow, and its quality on Fashion-MNIST against ITQ."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client

from dask_hashcodes import InputError
from dask_hashcodes.distributed.graph import as_dask

torch = pytest.importorskip("torch")  # the test extra installs the deep extra's torch: CI never skips

from dask_hashcodes.hashing.adsh import ADSH  # noqa: E402

SMALL_NET = {"name": "mlp", "hidden": [32]}


def dense_v_step(V, U, S, omega, gamma):
    """Eq. 8-10 over the whole database at once, in float64, as the paper writes it."""
    n, c = V.shape
    U_bar = np.zeros((n, c))
    U_bar[omega] = U
    Q = -2 * c * S.T @ U - 2 * gamma * U_bar
    V = V.astype(np.float64).copy()
    for k in range(c):
        rest = np.setdiff1d(np.arange(c), k)
        V[:, k] = -np.sign(2 * V[:, rest] @ (U[:, rest].T @ U[:, k]) + Q[:, k])
    return V


def test_the_v_step_on_the_cluster_equals_a_dense_numpy_v_step(client):
    rng = np.random.default_rng(0)
    n, m, c = 900, 60, 16
    labels = rng.integers(0, 7, n)
    X = as_dask(rng.standard_normal((n, 5)).astype(np.float32), chunk_rows=250)
    model = ADSH(c, gamma=200.0)
    parts, labels_at = model._label_chunks(labels, X)
    bounds = np.array([0, 250, 500, 750, 900])
    V0 = rng.choice(np.array([-1, 1], dtype=np.int8), size=(n, c))
    V_parts = [V0[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    omega = np.sort(rng.choice(n, m, replace=False))
    U = np.tanh(rng.standard_normal((m, c)))
    same = labels[omega][:, None] == labels[None, :]
    r = same.sum() / (~same).sum()
    S = np.where(same, 1.0, -r)

    new_parts, sums = model._database_pass(V_parts, parts, bounds, omega, labels_at(omega), U, r)
    V = np.concatenate([p.compute() for p in new_parts])
    expected = dense_v_step(V0, U, S, omega, 200.0)
    np.testing.assert_allclose(V, expected, atol=1e-6)
    VtV, SV, V_omega = model._network_inputs(sums, omega, r)
    np.testing.assert_allclose(VtV.numpy(), expected.T @ expected, atol=1e-6)
    np.testing.assert_allclose(SV.numpy(), S @ expected, rtol=1e-6, atol=1e-4)  # float32 tensors
    np.testing.assert_array_equal(V_omega.numpy(), expected[omega])


@pytest.fixture(scope="module")
def fmnist(fmnist_paths):
    from dask_hashcodes.storage.datasets import open_dataset

    ds = open_dataset(fmnist_paths[5000])
    return np.asarray(ds.features[:2400], dtype=np.float32), np.asarray(ds.labels[:2400])


def test_codes_are_identical_for_one_and_two_workers_and_two_chunk_sizes(fmnist, clusters):
    """1 worker and 800-row chunks against 2 workers and 600-row chunks: both changed in one
    run, which would show a dependence on either."""
    X, y = fmnist
    params = {"outer_iter": 2, "inner_iter": 2, "n_samples": 300, "network": SMALL_NET, "threads": 1}
    results = []
    for workers, chunk_rows in ((1, 800), (2, 600)):
        with Client(clusters[workers]):
            model = ADSH(16, **params).fit(as_dask(X, chunk_rows=chunk_rows), y)
            results.append((model.database_codes_.compute(), model.encode(X[:200])))
    for codes, queries in results[1:]:
        np.testing.assert_array_equal(codes, results[0][0])
        np.testing.assert_array_equal(queries, results[0][1])


def test_a_saved_model_encodes_the_same_and_bad_input_gives_one_line_errors(fmnist, tmp_path, client):
    from dask_hashcodes.hashing import load_model

    X, y = fmnist
    model = ADSH(12, outer_iter=1, inner_iter=1, n_samples=200, network=SMALL_NET, threads=1).fit(X, y)
    model.save(tmp_path / "m")
    np.testing.assert_array_equal(load_model(tmp_path / "m").encode(X[:300]), model.encode(X[:300]))
    with pytest.raises(InputError, match="requires y to be passed"):
        ADSH(12, outer_iter=1, n_samples=200).fit(X)
    with pytest.raises(InputError, match="input_shape 10 x 10 holds 100 values but the rows have 784"):
        ADSH(12, outer_iter=1, n_samples=200, input_shape=(10, 10)).fit(X, y)
    with pytest.raises(InputError, match="n_samples.*ADSH"):
        ADSH(12, n_samples=5000).fit(X, y)


def test_without_torch_the_error_names_the_extra(monkeypatch):
    import sys

    from dask_hashcodes.deep.networks import require_torch

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(InputError, match=r"pip install 'dask-hashcodes\[deep\]'"):
        require_torch()


def test_adsh_beats_itq_by_far_on_fashion_mnist(fmnist_small, fmnist_small_itq_map, cluster):
    """Reduced run (24 bits, 4 outer iterations instead of 50, the rest as the paper) with the
    first 20000 Fashion-MNIST rows as the database; the full comparison is in
    benchmarks/results/adsh/."""
    from dask_hashcodes import workflows
    from dask_hashcodes.storage.datasets import open_dataset

    itq = fmnist_small_itq_map(24)
    with Client(cluster):
        report = workflows.evaluate(
            open_dataset(fmnist_small),
            methods=["adsh"],
            bits=[24],
            queries=1000,
            seed=0,
            ks=[1000],
            params={"adsh": {"outer_iter": 4, "threads": 1}},
        )
    adsh = report["results"][0]["metrics"]["map"]
    assert adsh >= 0.85 and adsh >= itq + 0.3, (adsh, itq)
