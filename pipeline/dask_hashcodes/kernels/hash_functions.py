"""Hash functions fitted to given codes, one binary classifier per bit (the h-step of MAC and
of the two-step methods). Plain numpy and scikit-learn.

* linear: h_i(x) = sgn(w_i^T phi(x) + c_i) with phi(x) = (x - mean) / scale (scale: the RMS
  norm of the centred training rows; one number, so the bits are those of a linear function
  of x, while the SVM sees well-scaled data whatever the features' units), w_i and c_i from
  a linear SVM (LIBLINEAR's default problem, squared hinge loss, solved for all bits at once
  by kernels/svm.py) trained on the bit's targets;
* kernel: the same linear SVM on RBF features k(x) = exp(-||x - u_j||^2 / (2 sigma^2)) of
  ``n_centres`` (500 in the MAC paper) centres drawn from the training points, sigma = the
  average Euclidean distance between the first 300 training points (the MAC paper's rule),
  then standardised feature by feature: phi_j(x) = (k_j(x) - mean_j) / std_j. With this
  sigma every k_j(x) sits near exp(-1/2) and varies little, in few directions (smooth, wide
  kernels), so at C = 1 the regularised weights cannot follow the codes. Fitted
  to cut's free codes on Fashion-MNIST, standardised features miss the fewest bits and give
  the best validation precision, ahead of raw and of globally scaled features. k is the
  float32 ``kernels.rbf.rbf_features``, row by row, so training and encoding compute the
  same features for the same row whatever the chunking. The features of the training set are
  computed once and shared by all bits (the paper's "constant Gram matrix").

"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.l2 import squared_distances
from dask_hashcodes.kernels.svm import LocalBlocks, newton_svm

BANDWIDTH_POINTS = 300  # sigma: mean distance between the first 300 training points (MAC paper)


def rbf_centres(X: np.ndarray, n_centres: int, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """(centres (n_centres, d) drawn from X's rows, sigma)."""
    centres = np.asarray(X[np.sort(rng.choice(len(X), n_centres, replace=False))], dtype=np.float64)
    first = np.asarray(X[:BANDWIDTH_POINTS], dtype=np.float64)
    distances = np.sqrt(squared_distances(first, first))
    sigma = float(distances[np.triu_indices(len(first), k=1)].mean())
    return centres, sigma


def linear_scaling(X: np.ndarray) -> tuple[np.ndarray, float]:
    """(mean, scale) of ``linear_features``: the training rows' mean and RMS centred norm."""
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0)
    scale = float(np.sqrt(((X - mean) ** 2).sum(axis=1).mean()))
    return mean, scale if scale > 0 else 1.0


def standard_scaling(K: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, std) of each column of the training kernel features (a constant column: std 1)."""
    K = np.asarray(K, dtype=np.float64)
    std = K.std(axis=0)
    return K.mean(axis=0), np.where(std > 0, std, 1.0)


def linear_features(X: np.ndarray, mean: np.ndarray, scale) -> np.ndarray:
    """(X - mean) / scale; ``scale`` one number (linear h) or one per column (kernel h)."""
    return (np.asarray(X, dtype=np.float64) - mean) / scale


def fit_bits(features: np.ndarray, targets: np.ndarray, C: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(W (p, b), c (b,)) of every bit's linear SVM on targets in {-1, +1} (n, b), solved in
    memory by ``kernels.svm.newton_svm`` (LIBLINEAR's squared-hinge problem at cost ``C``)."""
    targets = np.asarray(targets, dtype=np.float64).reshape(len(features), -1)
    W, _ = newton_svm(LocalBlocks(features, C).with_targets(targets), features.shape[1], targets.shape[1])
    return W[:-1], W[-1]


def apply_bits(features: np.ndarray, W: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Codes in {-1, +1} (n, b) of linear functions W (d, b), c (b,); >= 0 gives +1."""
    return np.where(features @ W + c >= 0, 1.0, -1.0)


def keep_better_bits(Z, fitted, previous) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The h-step as a descent step on MAC's h objective ||Z - h(X)||^2, bit by bit: each bit
    keeps its previous function where the newly fitted one disagrees with more of Z's column.
    ``fitted`` and ``previous`` are (W, c, H) with H = apply_bits(features, W, c).

    Why: an SVM is a surrogate for the bit's misclassification count, and a regularised one
    refitted to targets its predecessor already matched need not return that predecessor
    (at C = 1, fitted to Z = h(X) itself, it misses thousands of bits), so without this choice
    the h-step can raise the objective it minimises and "Z = h(X) after a Z-step" is no fixed
    point. (W, c, H, kept) with ``kept`` the bits that kept their previous function."""
    W, c, H = (np.array(a, copy=True) for a in fitted)
    W_old, c_old, H_old = previous
    kept = (H != Z).sum(axis=0) > (H_old != Z).sum(axis=0)
    W[:, kept], c[kept], H[:, kept] = W_old[:, kept], c_old[kept], H_old[:, kept]
    return W, c, H, kept


def lower_loss_h(Z, fitted, previous, loss_of) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, int, float]:
    """MAC's h-step result from the refit ``fitted`` = (W, c, H): of the refit and
    ``keep_better_bits(Z, fitted, previous)``, the one with the lower ``loss_of(H)`` (the
    affinity loss L(h(X)) the whole optimisation lowers), the refit on a tie.

    Why both: the per-bit choice is a descent step on ||Z - h(X)||^2, which stops refits that
    fit Z worse from raising L(h(X)) late in a path; taken always, it also keeps previous
    SVMs where the refit would have lowered L(h(X)), and the path settles at Z = h(X) near its
    start. (W, c, H, loss_of(H), bits with their previous function, loss_of of the refit)."""
    loss_refit = float(loss_of(fitted[2]))
    W, c, H, kept = keep_better_bits(Z, fitted, previous)
    if kept.any():
        loss_kept = float(loss_of(H))
        if loss_kept < loss_refit:
            return W, c, H, loss_kept, int(kept.sum()), loss_refit
    return (*fitted, loss_refit, 0, loss_refit)
