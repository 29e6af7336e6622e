"""Per-bit hash functions of the h-step (pipeline/kernels/hash_functions.py)."""

from __future__ import annotations

import numpy as np

from pipeline.kernels.hash_functions import apply_bits, fit_bit, rbf_centres, rbf_features


def test_linear_svm_bit_reproduces_separable_targets():
    """Targets given by a hyperplane with a margin: the fitted bit equals them on every point."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 5))
    w_true = np.array([1.0, -2.0, 0.5, 0.0, 1.0])
    score = X @ w_true + 0.3
    keep = np.abs(score) > 0.5
    X, target = X[keep], np.where(score[keep] > 0, 1.0, -1.0)
    w, c = fit_bit(X, target, seed=0)
    np.testing.assert_array_equal(apply_bits(X, w[:, None], np.array([c]))[:, 0], target)


def test_constant_targets_give_the_constant_function():
    X = np.random.default_rng(1).standard_normal((50, 3))
    w, c = fit_bit(X, -np.ones(50), seed=0)
    assert not w.any() and c == -1.0
    assert (apply_bits(X, w[:, None], np.array([c])) == -1).all()


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
    w, c = fit_bit(phi, target, seed=0)
    kernel_accuracy = (apply_bits(phi, w[:, None], np.array([c]))[:, 0] == target).mean()
    w, c = fit_bit(X, target, seed=0)
    linear_accuracy = (apply_bits(X, w[:, None], np.array([c]))[:, 0] == target).mean()
    assert kernel_accuracy > 0.97 and linear_accuracy < 0.75
