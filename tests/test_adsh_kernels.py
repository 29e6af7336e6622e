"""ADSH's numeric steps (kernels/adsh.py, kernels/label_similarity.py) against the paper's formulation written
out densely over the whole database, and against brute force on tiny problems."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from dask_hashcodes.kernels.adsh import chunk_pass, objective, quantisation_target, v_step, validation_histograms
from dask_hashcodes.kernels.label_similarity import (
    add_chunk_sums,
    database_sums,
    negative_weight,
    similar_pairs,
    similarity,
    similarity_product,
)


def direct_objective(U, V, S, omega, gamma):
    """J = sum_i sum_j (u_i^T v_j - c S_ij)^2 + gamma sum_i ||v_omega_i - u_i||^2, term by term."""
    c = U.shape[1]
    pairs = sum((U[i] @ V[j] - c * S[i, j]) ** 2 for i in range(len(U)) for j in range(len(V)))
    return pairs + gamma * sum(((V[omega[i]] - U[i]) ** 2).sum() for i in range(len(U)))


def dense_v_step(V, U, S, omega, gamma):
    """The V-step as the paper states it (eq. 8-10), over the whole database at once."""
    n, c = V.shape
    U_bar = np.zeros((n, c))
    U_bar[omega] = U
    Q = -2 * c * S.T @ U - 2 * gamma * U_bar
    V = V.astype(np.float64).copy()
    for k in range(c):
        rest = np.setdiff1d(np.arange(c), k)
        V[:, k] = -np.sign(2 * V[:, rest] @ (U[:, rest].T @ U[:, k]) + Q[:, k])
    return V.astype(np.int8)


def problem(rng, n=300, m=40, c=12, classes=5, multi=False):
    if multi:
        labels = (rng.random((n, classes)) < 0.3).astype(np.int8)
    else:
        labels = rng.integers(0, classes, n)
    omega = np.sort(rng.choice(n, m, replace=False))
    S = similarity(labels[omega], labels, negative_weight(similar_pairs(labels[omega], labels), m * n))
    U = np.tanh(rng.normal(size=(m, c)))
    V = rng.choice(np.array([-1, 1], dtype=np.int8), size=(n, c))
    return labels, omega, S, U, V


@pytest.mark.parametrize("multi", [False, True])
def test_v_step_by_chunks_equals_the_dense_v_step(multi):
    """chunk_pass (S^T U through per-class sums, or blocks of the multi-label matrix) on any
    chunking gives the dense V-step's codes, and sums that add up to the dense ones."""
    rng = np.random.default_rng(0)
    labels, omega, S, U, V = problem(rng, multi=multi)
    dense = dense_v_step(V, U, S, omega, gamma=200.0)
    r = negative_weight(similar_pairs(labels[omega], labels), S.size)
    for bounds in ([0, 300], [0, 17, 160, 300], [0, 100, 200, 300]):
        parts = [
            chunk_pass(V[a:b], labels[a:b], a, omega, labels[omega], U, r, 200.0) for a, b in itertools.pairwise(bounds)
        ]
        np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), dense)
        VtV, PV, ones_V, n_similar, held, held_codes, _ = functools.reduce(add_chunk_sums, [p[1] for p in parts])
        Df = dense.astype(np.float64)
        np.testing.assert_array_equal(VtV, Df.T @ Df)
        np.testing.assert_allclose(similarity_product(PV, ones_V, r), S @ Df, rtol=1e-12, atol=1e-9)
        assert n_similar == similar_pairs(labels[omega], labels)
        np.testing.assert_array_equal(held, omega)
        np.testing.assert_array_equal(held_codes, dense[omega])


def test_similarity_weighs_dissimilar_pairs_by_the_similar_ratio():
    labels = np.array([0, 0, 1, 2, 2, 2])
    S = similarity(labels[:2], labels, negative_weight(similar_pairs(labels[:2], labels), 12))
    r = 4 / 8  # 4 similar pairs (two queries x two zeros), 8 dissimilar
    np.testing.assert_allclose(S, [[1, 1, -r, -r, -r, -r]] * 2)
    multi = np.array([[1, 0, 1], [0, 1, 0], [0, 0, 1]])
    np.testing.assert_allclose(similarity(multi[:1], multi, 0.25), [[1, -0.25, 1]])


def test_each_bit_of_the_v_step_is_the_exact_minimum_over_all_codes_of_its_column():
    """n = 10 database points: for the last bit, all 2^10 columns against the one chosen
    (the earlier bits' columns were chosen the same way); J never rises."""
    rng = np.random.default_rng(1)
    for _ in range(5):
        labels, omega, S, U, V = problem(rng, n=10, m=4, c=3, classes=3)
        new = v_step(V, U, S.T @ U, quantisation_target(U, omega, np.arange(10)), 2.0)
        best = direct_objective(U, new, S, omega, 2.0)
        assert best <= direct_objective(U, V, S, omega, 2.0) + 1e-9
        for column in itertools.product([-1, 1], repeat=10):
            other = new.copy()
            other[:, -1] = column
            assert best <= direct_objective(U, other, S, omega, 2.0) + 1e-9


def test_objective_from_the_database_sums_equals_the_double_sum():
    rng = np.random.default_rng(2)
    labels, omega, S, U, V = problem(rng, n=60, m=8, c=6)
    r = negative_weight(similar_pairs(labels[omega], labels), S.size)
    VtV, PV, ones_V, n_similar = np.zeros((6, 6), np.int64), np.zeros((8, 6), np.int64), np.zeros(6, np.int64), 0
    for lo, hi in ((0, 25), (25, 60)):  # the sums add up over chunks
        a, b, c, d = database_sums(V[lo:hi], labels[omega], labels[lo:hi])
        VtV, PV, ones_V, n_similar = VtV + a, PV + b, ones_V + c, n_similar + d
    assert n_similar == similar_pairs(labels[omega], labels)
    np.testing.assert_allclose(similarity_product(PV, ones_V, r), S @ V, rtol=1e-12, atol=1e-9)
    got = objective(U, VtV, similarity_product(PV, ones_V, r), V[omega].astype(np.float64), 3.0, float((S**2).sum()))
    assert got == pytest.approx(direct_objective(U, V, S, omega, 3.0), rel=1e-12)


def test_quantisation_target_places_omega_rows_inside_a_chunk_only():
    U = np.arange(8.0).reshape(4, 2)
    omega = np.array([2, 5, 9, 14])
    target = quantisation_target(U, omega, np.arange(4, 12))
    expected = np.zeros((8, 2))
    expected[1], expected[5] = U[1], U[2]
    np.testing.assert_array_equal(target, expected)


def test_the_network_loss_from_the_sums_has_the_papers_gradient():
    """Eq. 6: dJ/du_i = 2 sum_j (u_i^T v_j - c S_ij) v_j + 2 gamma (u_i - v_i), over the whole
    database, against autograd of the loss built from V^T V and S V."""
    torch = pytest.importorskip("torch")
    from dask_hashcodes.deep.training import adsh_loss

    rng = np.random.default_rng(3)
    labels, omega, S, U, V = problem(rng, n=80, m=10, c=8)
    Vf = V.astype(np.float64)
    u = torch.tensor(U, requires_grad=True)
    adsh_loss(u, torch.tensor(Vf.T @ Vf), torch.tensor(S @ Vf), torch.tensor(Vf[omega]), 5.0).backward()
    expected = 2 * (U @ Vf.T - 8 * S) @ Vf + 2 * 5.0 * (U - Vf[omega])
    np.testing.assert_allclose(u.grad.numpy(), expected, rtol=1e-10, atol=1e-9)


def test_validation_histograms_by_chunks_count_every_other_database_point_once():
    rng = np.random.default_rng(4)
    labels, omega, S, U, V = problem(rng, n=200, m=10, c=8)
    rows = np.array([3, 50, 120, 199])
    codes = np.where(rng.random((4, 8)) < 0.5, -1, 1).astype(np.int8)
    codes[1] = V[50]  # a query equal to its own database row: that row is not counted
    parts = [
        validation_histograms(V[a:b], labels[a:b], a, (rows, codes, labels[rows]))
        for a, b in itertools.pairwise([0, 60, 130, 200])
    ]
    total, rel = sum(p[0] for p in parts), sum(p[1] for p in parts)
    for q, row in enumerate(rows):
        others = np.delete(np.arange(200), row)
        dist = (codes[q] != V[others]).sum(axis=1)
        np.testing.assert_array_equal(total[q], np.bincount(dist, minlength=9))
        np.testing.assert_array_equal(rel[q], np.bincount(dist[labels[others] == labels[row]], minlength=9))
