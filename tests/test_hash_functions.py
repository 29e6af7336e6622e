"""Per-bit hash functions of the h-step (pipeline/dask_hashcodes/kernels/hash_functions.py)."""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.hash_functions import (
    apply_bits,
    fit_bits,
    keep_better_bits,
    lower_loss_h,
    rbf_centres,
)
from dask_hashcodes.kernels.rbf import rbf_features


def test_linear_svm_bit_reproduces_separable_targets():
    """Targets given by a hyperplane with a margin: the fitted bit equals them on every point."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 5))
    w_true = np.array([1.0, -2.0, 0.5, 0.0, 1.0])
    score = X @ w_true + 0.3
    keep = np.abs(score) > 0.5
    X, target = X[keep], np.where(score[keep] > 0, 1.0, -1.0)
    W, c = fit_bits(X, target[:, None], C=100.0)
    np.testing.assert_array_equal(apply_bits(X, W, c)[:, 0], target)


def test_constant_targets_give_the_constant_bit():
    X = np.random.default_rng(1).standard_normal((50, 3))
    W, c = fit_bits(X, -np.ones((50, 1)))
    assert (apply_bits(X, W, c) == -1).all()


def test_kernel_bit_fits_targets_no_hyperplane_can():
    """A ring (inside +1, outside -1) is not linearly separable; on 200 RBF features of the
    data the linear SVM fits it almost everywhere, the linear one on raw features cannot."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((600, 2))
    radius = np.linalg.norm(X, axis=1)
    keep = np.abs(radius - 1.0) > 0.15
    X, target = X[keep], np.where(radius[keep] < 1.0, 1.0, -1.0)
    centres, sigma = rbf_centres(X, 200, np.random.default_rng(3))
    phi = rbf_features(X, centres, sigma)
    W, c = fit_bits(phi, target[:, None])
    kernel_accuracy = (apply_bits(phi, W, c)[:, 0] == target).mean()
    W, c = fit_bits(X, target[:, None])
    linear_accuracy = (apply_bits(X, W, c)[:, 0] == target).mean()
    assert kernel_accuracy > 0.97 and linear_accuracy < 0.75


def _fit_columns(X, Z, C):
    W, c = fit_bits(X, Z, C=C)
    return W, c, apply_bits(X, W, c)


def test_h_step_never_misclassifies_more_of_z_than_the_previous_function():
    """A firmly regularised SVM refitted to the codes of the function it replaces misses some
    of them; the h-step then keeps the previous function, so Z = h(X) stays a fixed point, and
    in general each bit's misclassification count is the smaller of the two."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 10))
    W_old, c_old = rng.standard_normal((10, 6)), 0.3 * rng.standard_normal(6)
    previous = (W_old, c_old, apply_bits(X, W_old, c_old))
    Z = previous[2]
    fitted = _fit_columns(X, Z, C=0.001)
    assert (fitted[2] != Z).sum(axis=0).min() > 0  # the refit alone leaves the fixed point
    W, c, H, kept = keep_better_bits(Z, fitted, previous)
    assert kept.all()
    np.testing.assert_array_equal(H, Z)
    np.testing.assert_array_equal(apply_bits(X, W, c), H)

    # targets of other hyperplanes for three bits (the new fit wins), noisy copies of the
    # previous function's for the others (where a refit may lose)
    Z = np.where(rng.random(Z.shape) < 0.2, -Z, Z)
    Z[:, :3] = apply_bits(X, rng.standard_normal((10, 3)), np.zeros(3))
    fitted = _fit_columns(X, Z, C=1.0)
    W, c, H, kept = keep_better_bits(Z, fitted, previous)
    errors = {name: (h != Z).sum(axis=0) for name, h in (("new", fitted[2]), ("old", previous[2]), ("kept", H))}
    np.testing.assert_array_equal(errors["kept"], np.minimum(errors["new"], errors["old"]))
    np.testing.assert_array_equal(kept, errors["new"] > errors["old"])
    np.testing.assert_array_equal(apply_bits(X, W, c), H)
    assert not kept[:3].any()


def test_h_step_takes_the_candidate_of_lower_loss():
    """Of the refit and the refit with previous functions kept bit by bit, the h-step returns
    the one with the lower loss, whichever that is, and says how many bits kept theirs."""
    rng = np.random.default_rng(7)
    X = rng.standard_normal((300, 10))
    Z = apply_bits(X, rng.standard_normal((10, 6)), np.zeros(6))
    good = _fit_columns(X, Z, C=1.0)
    W_bad = rng.standard_normal((10, 6))
    bad = (W_bad, np.zeros(6), apply_bits(X, W_bad, np.zeros(6)))

    def loss_of(H):  # a loss that falls as h(X) nears Z
        return float((H != Z).sum())

    # a poor refit beside a good previous function: the per-bit choice wins
    W, c, H, loss, kept_bits, loss_refit = lower_loss_h(Z, bad, good, loss_of)
    assert loss_refit == loss_of(bad[2]) and loss == loss_of(H) < loss_refit and kept_bits > 0
    np.testing.assert_array_equal(apply_bits(X, W, c), H)

    # a loss that the per-bit choice raises: the refit is returned as it is
    W, c, H, loss, kept_bits, loss_refit = lower_loss_h(Z, bad, good, lambda H: -loss_of(H))
    assert kept_bits == 0 and loss == loss_refit
    for got, refit in zip((W, c, H), bad):
        np.testing.assert_array_equal(got, refit)
