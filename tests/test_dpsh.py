"""DPSH (pipeline/dask_hashcodes/hashing/dpsh.py): its loss against a direct numpy computation, a seed fixing
the codes, a save/load round trip, and its quality on Fashion-MNIST against ITQ."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the test extra installs the deep extra's torch: CI never skips

from dask_hashcodes.deep.training import dpsh_loss  # noqa: E402
from dask_hashcodes.hashing import DPSH  # noqa: E402

SMALL_NET = {"name": "mlp", "hidden": [32]}


def test_the_loss_is_the_pairwise_likelihood_plus_the_quantisation_error():
    rng = np.random.default_rng(0)
    u, U_all = rng.standard_normal((5, 6)) * 3, rng.standard_normal((40, 6)) * 3
    similar = (rng.random((5, 40)) < 0.3).astype(np.float64)
    theta = 0.5 * u @ U_all.T
    expected = (np.log(1 + np.exp(theta)) - similar * theta).mean() + 0.1 * ((u - np.sign(u)) ** 2).mean()
    got = dpsh_loss(torch.from_numpy(u), torch.from_numpy(U_all), torch.from_numpy(similar), 0.1, balance=False)
    assert abs(float(got) - expected) < 1e-9
    ratio = similar.sum() / (1 - similar).sum()
    weights = similar + ratio * (1 - similar)
    pairs = (np.log(1 + np.exp(theta)) - similar * theta) * weights / weights.mean()
    got = dpsh_loss(torch.from_numpy(u), torch.from_numpy(U_all), torch.from_numpy(similar), 0.1, balance=True)
    assert abs(float(got) - (pairs.mean() + 0.1 * ((u - np.sign(u)) ** 2).mean())) < 1e-9


def test_the_default_cnn_has_no_dropout_unless_the_spec_names_it():
    from dask_hashcodes.hashing import ADSH

    def spec(estimator):
        estimator.n_features_in_ = 28 * 28
        return estimator._network_spec()[0]

    assert spec(DPSH())["dropout"] == 0.0 and spec(DPSH(network="cnn"))["dropout"] == 0.0
    assert spec(DPSH(network={"name": "cnn", "dropout": 0.3}))["dropout"] == 0.3
    assert "dropout" not in spec(ADSH())  # the cnn's own default, 0.5


@pytest.fixture(scope="module")
def fmnist(fmnist_paths):
    from dask_hashcodes.storage.datasets import open_dataset

    ds = open_dataset(fmnist_paths[5000])
    return np.asarray(ds.features[:3000], dtype=np.float32), np.asarray(ds.labels[:3000])


def test_a_seed_fixes_the_codes_and_a_saved_model_encodes_the_same(fmnist, tmp_path, client):
    from dask_hashcodes import InputError
    from dask_hashcodes.hashing import load_model

    X, y = fmnist
    params = {"epochs": 2, "n_labeled": 800, "network": SMALL_NET}
    model = DPSH(16, **params).fit(X, y)
    np.testing.assert_array_equal(DPSH(16, **params).fit(X, y).encode(X), model.encode(X))
    assert not np.array_equal(DPSH(16, **params, random_state=1).fit(X, y).encode(X), model.encode(X))
    model.save(tmp_path / "m")
    np.testing.assert_array_equal(load_model(tmp_path / "m").encode(X[:300]), model.encode(X[:300]))
    with pytest.raises(InputError, match="requires y to be passed"):
        DPSH(16, **params).fit(X)


def test_dpsh_beats_itq_on_fashion_mnist(fmnist_small, fmnist_small_itq_map, cluster):
    """Reduced run (24 bits, 2000 training rows, 12 epochs, the first 20000 Fashion-MNIST rows
    as the database): the same floor over ITQ that the full run clears by far, with the
    margin these fixed seeds leave it (the full comparison: benchmarks/results/adsh/)."""
    from distributed import Client

    from dask_hashcodes import workflows
    from dask_hashcodes.storage.datasets import open_dataset

    itq = fmnist_small_itq_map(24)
    with Client(cluster):
        report = workflows.evaluate(
            open_dataset(fmnist_small),
            methods=["dpsh"],
            bits=[24],
            queries=1000,
            seed=0,
            ks=[1000],
            params={"dpsh": {"epochs": 12, "n_labeled": 2000}},
        )
    dpsh = report["results"][0]["metrics"]["map"]
    assert dpsh >= itq + 0.06, (dpsh, itq)
