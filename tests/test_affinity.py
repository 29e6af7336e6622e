"""Affinities and affinity losses (pipeline/dask_hashcodes/kernels/affinity.py) against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dask_hashcodes.kernels.affinity import (
    _draw_outside,
    affinity_loss,
    affinity_shortfall,
    bit_coefficients,
    knn_affinities,
    label_affinities,
)


def _codes(rng, n, bits):
    return rng.choice([-1.0, 1.0], size=(n, bits))


def test_label_affinities_draw_kappa_pairs_of_each_kind_per_point():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 200)
    Y = label_affinities(labels, 7, 11, np.random.default_rng(5))
    assert Y.shape == (200, 200) and Y.dtype == np.int8 and Y.nnz == 200 * 18
    for i in range(200):
        row = Y.getrow(i)
        cols, vals = row.indices, row.data
        assert i not in cols
        assert (labels[cols[vals == 1]] == labels[i]).all() and (vals == 1).sum() == 7
        assert (labels[cols[vals == -1]] != labels[i]).all() and (vals == -1).sum() == 11
    again = label_affinities(labels, 7, 11, np.random.default_rng(5))
    assert (Y != again).nnz == 0  # the seed fixes the pairs


def test_affinity_shortfall_names_the_class_that_is_too_small():
    labels = np.array([0] * 50 + [1] * 5 + [2] * 50)
    assert affinity_shortfall(labels, 4, 10) is None
    assert "class 1 has 5 training points" in affinity_shortfall(labels, 5, 10)
    assert "outside class" in affinity_shortfall(labels, 4, 60)


def test_knn_affinities_take_the_exact_nearest_neighbours():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((150, 6))
    Y = knn_affinities(X, 5, 20, np.random.default_rng(2))
    d2 = ((X[:, None, :] - X[None]) ** 2).sum(-1)
    np.fill_diagonal(d2, np.inf)
    for i in range(150):
        row = Y.getrow(i)
        similar = np.sort(row.indices[row.data == 1])
        np.testing.assert_array_equal(similar, np.sort(np.argsort(d2[i], kind="stable")[:5]))
        far = row.indices[row.data == -1]
        assert len(far) == 20 and i not in far and not set(far) & set(similar)


@pytest.mark.parametrize("n", [14, 400])  # 14: every row draws with Generator.choice; 400: by ranks
def test_dissimilar_draws_are_uniform_among_the_points_outside_each_row(n):
    rng = np.random.default_rng(3)
    k, count, trials = 3, 4, 4000
    excluded = np.sort([rng.choice(np.delete(np.arange(n), i), k, replace=False) for i in range(n)], axis=1)
    hits = np.zeros((n, n))
    for _ in range(trials):
        drawn = _draw_outside(excluded, count, rng)
        assert (np.diff(drawn, axis=1) > 0).all()  # sorted, distinct
        np.add.at(hits, (np.repeat(np.arange(n), count), drawn.ravel()), 1)
    allowed = np.ones((n, n), bool)
    allowed[np.arange(n), np.arange(n)] = False
    np.put_along_axis(allowed, excluded, False, axis=1)
    assert not hits[~allowed].any(), "a point or one of its excluded points was drawn"
    expected = trials * count / (n - 1 - k)
    # Pearson's chi-square per degree of freedom is 1 +- sqrt(2 / dof) when the draws are uniform
    per_dof = ((hits[allowed] - expected) ** 2 / expected).mean()
    assert abs(per_dof - 1) < 6 * np.sqrt(2 / allowed.sum()), per_dof


def _dense_loss(loss, Z, Y):
    b, total = Z.shape[1], 0.0
    D = Y.toarray()
    for n, m in zip(*np.nonzero(D)):
        inner = Z[n] @ Z[m]
        total += (inner - b * D[n, m]) ** 2 if loss == "ksh" else np.exp(-D[n, m] * inner / b)
    return total


@pytest.mark.parametrize("loss", ["ksh", "esplh"])
def test_losses_equal_a_pair_by_pair_sum(loss):
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 3, 40)
    Y = label_affinities(labels, 4, 6, rng)
    Z = _codes(rng, 40, 8)
    assert affinity_loss(loss, Z, Y) == pytest.approx(_dense_loss(loss, Z, Y), rel=1e-12)


@pytest.mark.parametrize("loss", ["ksh", "esplh"])
def test_bit_coefficients_give_the_loss_over_every_assignment_of_one_bit(loss):
    """Over all 2^n values of one bit (n = 10 points, every other bit fixed), the loss equals
    sum A_nm z_n z_m plus one constant: the Z-step's quadratic is exact."""
    rng = np.random.default_rng(4)
    n, bits, bit = 10, 5, 2
    Y = label_affinities(np.repeat([0, 1], n // 2), 2, 3, rng)
    Z = _codes(rng, n, bits)
    A = bit_coefficients(loss, Z, Y, bit).toarray()
    offsets = []
    for assignment in itertools.product([-1.0, 1.0], repeat=n):
        z = np.array(assignment)
        trial = Z.copy()
        trial[:, bit] = z
        offsets.append(affinity_loss(loss, trial, Y) - z @ A @ z)
    assert np.ptp(offsets) < 1e-9 * max(1.0, abs(offsets[0]))


def test_updating_the_inner_products_after_a_bit_changed_equals_recomputing_them():
    """``Pairs.update`` visits only the changed points' pairs when few change and every pair
    otherwise: both must give the inner products of the new codes."""
    from dask_hashcodes.kernels.affinity import Pairs

    rng = np.random.default_rng(5)
    n = 2000
    pairs = Pairs(label_affinities(rng.integers(0, 4, n), 10, 20, rng))
    Z = _codes(rng, n, 12)
    inner = pairs.inner(Z)
    for changed in (3, 1000):
        new = Z.copy()
        new[rng.choice(n, changed, replace=False), 4] *= -1
        pairs.update(inner, Z[:, 4], new[:, 4])
        Z = new
        np.testing.assert_array_equal(inner, pairs.inner(Z))
