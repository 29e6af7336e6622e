"""Kernel hash functions learned from a few sampled rows: KLSH, BRE and KSH.

KLSH (Kulis & Grauman 2009) needs no pass over the data: p anchor rows are drawn with the
seed and gathered to the client (p x d, e.g. 300 x 784); everything else is p x p. Encoding
maps each chunk to its Gaussian kernel features against the anchors (n x p float32, per
chunk) followed by the linear encoder, like SGH's.

BRE (Kulis & Darrell 2009) is trained the way its paper scales: on a seeded subset of
``train_size`` rows gathered to the client (n_t x d, 1000 x 784 for Fashion-MNIST), by
coordinate descent on the n_t x n_t pair objective (kernels/bre.py). Its hash functions are
linear-kernel sums over b x t training rows, which collapse to one d x b matrix, so encoding
is again the linear encoder, per chunk.
"""

from __future__ import annotations

import logging
from numbers import Integral, Real

import numpy as np

from dask_hashcodes.distributed.graph import select_rows
from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing.base import BITS, SEED, Hasher, labels_of_rows
from dask_hashcodes.hashing.constraints import Interval
from dask_hashcodes.kernels.bre import scaled_distances, train_bre, unit_rows
from dask_hashcodes.kernels.codes import encode_linear, project_linear
from dask_hashcodes.kernels.klsh import klsh_weights
from dask_hashcodes.kernels.ksh import train_ksh
from dask_hashcodes.kernels.l2 import squared_distances
from dask_hashcodes.kernels.label_similarity import pair_labels
from dask_hashcodes.kernels.rbf import rbf_features, rbf_kernel_matrix
from dask_hashcodes.storage.npz import FLOAT, INTEGER, REAL
from dask_hashcodes.validation import check_int_param

log = logging.getLogger(__name__)


def sample_rows(X, n_rows: int, rng: np.random.Generator) -> np.ndarray:
    """``n_rows`` distinct rows of X drawn with ``rng``, in row order, gathered to the client:
    the same rows whatever the chunking."""
    rows = np.sort(rng.choice(X.shape[0], n_rows, replace=False))
    return np.asarray(select_rows(X, rows, keep=True).compute())


class AnchorKernelHasher(Hasher):
    """Bits sgn((k(x) - kernel_mean_) components_) of Gaussian kernel features k(x) against
    ``anchors_`` with ``bandwidth_``: the encoder and the saved arrays of KLSH and KSH."""

    def _encode_kernel(self, block):
        return encode_linear(rbf_features(block, self.anchors_, self.bandwidth_), self.kernel_mean_, self.components_)

    def _project_kernel(self, block):
        return project_linear(rbf_features(block, self.anchors_, self.bandwidth_), self.kernel_mean_, self.components_)

    def _learned_arrays(self):
        return {
            "anchors_": self.anchors_,
            "kernel_mean_": self.kernel_mean_,
            "components_": self.components_,
            "bandwidth_": np.float64(self.bandwidth_),
        }

    # KLSH's anchors are training rows as stored (any real dtype); KSH converts them to float
    anchor_dtype = REAL

    def _fitted_array_spec(self, n_features):
        m, r = self.n_anchors, self.n_bits  # a fit refuses fewer rows than anchors: exactly m
        return {
            "anchors_": (self.anchor_dtype, (m, n_features)),
            "kernel_mean_": (FLOAT, (m,)),
            "components_": (FLOAT, (m, r)),
            "bandwidth_": (FLOAT, ()),
        }

    def _set_learned_arrays(self, arrays, where="the learned arrays"):
        super()._set_learned_arrays(arrays, where)
        self.bandwidth_ = float(arrays["bandwidth_"])


class KLSH(AnchorKernelHasher):
    """Kernelized LSH with a Gaussian kernel exp(-||x - y||^2 / (2 bandwidth^2)).

    The bandwidth is ``bandwidth_scale`` x the RMS distance between anchors (the paper tunes
    its kernels per dataset). Learned: ``anchors_`` (p, d), ``subsets_`` (n_bits, t),
    ``kernel_mean_`` (p,: column means of the anchors' kernel matrix), ``components_``
    (p, n_bits), ``bandwidth_``.

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    n_anchors : int, default=300
        Anchor rows p drawn with the seed, the points the kernel is evaluated against (the
        paper's 300). More anchors approximate the kernel better and cost p kernel values per
        encoded row.
    subset_size : int, default=30
        Anchors t averaged into each bit's random direction (the paper's 30); it must stay
        well below n_anchors so that the bits differ.
    bandwidth_scale : float, default=1.0
        Gaussian kernel width as a multiple of the RMS distance between anchors; smaller makes
        the kernel more local.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    method = "klsh"
    _parameter_constraints = {
        "n_bits": BITS,
        "n_anchors": [Interval(Integral, 2, None, closed="left")],
        "subset_size": [Interval(Integral, 1, None, closed="left")],
        "bandwidth_scale": [Interval(Real, 0, None, closed="neither")],
        "random_state": SEED,
    }

    def __init__(
        self,
        n_bits: int = 32,
        *,
        n_anchors: int = 300,
        subset_size: int = 30,
        bandwidth_scale: float = 1.0,
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.n_anchors = n_anchors
        self.subset_size = subset_size
        self.bandwidth_scale = bandwidth_scale
        self.random_state = random_state

    def _fit(self, X, y, checkpoint):
        n = X.shape[0]
        p = check_int_param(self.n_anchors, "n_anchors", "KLSH", 2, n)  # anchors are training rows
        t = check_int_param(self.subset_size, "subset_size", "KLSH", 1, p)
        rng = np.random.default_rng(self.seed_)
        self.anchors_ = sample_rows(X, p, rng)
        A = self.anchors_.astype(np.float64)
        sq = np.einsum("ij,ij->i", A, A)
        mean_sq_distance = 2.0 * sq.mean() - 2.0 * float(A.mean(axis=0) @ A.mean(axis=0))
        self.bandwidth_ = self.bandwidth_scale * float(np.sqrt(max(mean_sq_distance, 0.0)))
        if not self.bandwidth_ > 0:
            raise InputError("KLSH: every anchor row is the same point; the data has no spread to hash")
        K = rbf_kernel_matrix(self.anchors_, self.anchors_, self.bandwidth_)
        self.subsets_ = np.stack([np.sort(rng.choice(p, t, replace=False)) for _ in range(self.n_bits)])
        self.kernel_mean_ = K.mean(axis=0)
        self.components_ = klsh_weights(K, self.subsets_)
        self.training_stats_.update({"passes": 0, "n_anchors": p, "bandwidth": self.bandwidth_})

    def _learned_arrays(self):
        return {**super()._learned_arrays(), "subsets_": self.subsets_}

    def _fitted_array_spec(self, n_features):
        return {**super()._fitted_array_spec(n_features), "subsets_": (INTEGER, (self.n_bits, self.subset_size))}


class BRE(Hasher):
    """Binary reconstructive embedding with the linear kernel k(x, y) = x . y on unit rows.

    The settings follow the common re-implementation (Deng Cai's hashing toolbox wrapper of
    the authors' code); coordinate descent stops early when a sweep moves no weight.

    Rows are centred by the training subset's mean before they are scaled to unit norm (the
    paper's assumption): a linear-kernel hash is a hyperplane through the origin, and data in
    one orthant (pixels, histograms) has the origin outside it, where such hyperplanes split
    it badly. The paper does not centre; its unit rows are these centred ones.

    Learned: ``mean_`` (d,), ``points_`` (n_bits, t, d) the unit training rows x_pq,
    ``weights_`` (n_bits, t) W, ``components_`` (d, n_bits) = sum_q W_pq x_pq, the encoder.
    ``training_stats_["objective"]``: O before the first sweep and after each.

    Encoding: h_p(x) = [sum_q W_pq x_pq . u(x) >= 0] with u(x) = (x - mean) / ||x - mean||;
    dividing by the norm never changes a sign, so the encoder is sgn((x - mean) W^T), the
    linear encoder (a row equal to the mean gets all bits 1, as its unit row would be zero).

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    train_size : int, default=1000
        Training rows n_t drawn with the seed (all rows of a smaller set). The fit compares
        every pair of them, so its cost grows with the square of this.
    points_per_bit : int, default=20
        Training rows t in each hash function's kernel sum: more give each bit a richer
        hyperplane and a slower sweep.
    n_iter : int, default=10
        Coordinate-descent sweeps at most; fewer when a sweep moves no weight.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    method = "bre"
    _parameter_constraints = {
        "n_bits": BITS,
        "train_size": [Interval(Integral, 2, None, closed="left")],
        "points_per_bit": [Interval(Integral, 1, None, closed="left")],
        "n_iter": [Interval(Integral, 0, None, closed="left")],
        "random_state": SEED,
    }

    def __init__(
        self,
        n_bits: int = 32,
        *,
        train_size: int = 1000,
        points_per_bit: int = 20,
        n_iter: int = 10,
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.train_size = train_size
        self.points_per_bit = points_per_bit
        self.n_iter = n_iter
        self.random_state = random_state

    def _fit(self, X, y, checkpoint):
        n_t = min(self.train_size, X.shape[0])
        t = check_int_param(self.points_per_bit, "points_per_bit", "BRE", 1, n_t)  # x_pq are training rows
        rng = np.random.default_rng(self.seed_)
        sample = np.asarray(sample_rows(X, n_t, rng), dtype=np.float64)
        self.mean_ = sample.mean(axis=0)
        U = unit_rows(sample - self.mean_)
        points = np.stack([rng.choice(n_t, t, replace=False) for _ in range(self.n_bits)])
        # the scale of W is irrelevant (a bit is a sign of sums linear in W); the authors' 1e-3 x N(0, 1)
        W0 = rng.standard_normal((self.n_bits, t))

        def report(sweep, value, moved):
            log.info("BRE: sweep %d/%d, objective %.6g, %d weights moved", sweep + 1, self.n_iter, value, moved)

        W, history = train_bre(U @ U.T, scaled_distances(U), points, W0, self.n_iter, log=report)
        self.points_ = U[points]
        self.weights_ = W
        self.components_ = np.einsum("pq,pqd->dp", W, self.points_)
        self.training_stats_.update({"passes": 0, "n_sample": n_t, "sweeps": len(history) - 1, "objective": history})

    def _encode_kernel(self, block):
        return encode_linear(block, self.mean_, self.components_)

    def _project_kernel(self, block):
        return project_linear(block, self.mean_, self.components_)

    def _learned_arrays(self):
        return {
            "mean_": self.mean_,
            "points_": self.points_,
            "weights_": self.weights_,
            "components_": self.components_,
        }

    def _fitted_array_spec(self, n_features):
        d, r, t = n_features, self.n_bits, self.points_per_bit  # a fit refuses fewer rows than t
        return {
            "mean_": (FLOAT, (d,)),
            "points_": (FLOAT, (r, t, d)),
            "weights_": (FLOAT, (r, t)),
            "components_": (FLOAT, (d, r)),
        }


class KSH(AnchorKernelHasher):
    """Supervised hashing with kernels (kernels/ksh.py).

    Gaussian kernel with the bandwidth = the mean distance of the labeled rows to the anchors;
    all l^2 label pairs are used (2 l^2 x 8 bytes on the client). Learned: ``anchors_``
    (m, d), ``bandwidth_``, ``kernel_mean_`` (m,), ``components_`` (m, n_bits); encoding is
    sgn((k(x) - kernel_mean_) components_) per chunk.

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    n_labeled : int, default=5000
        Labeled training rows l drawn with the seed (the KSH paper used 1000-2000, the MAC
        paper's comparison 5000). The client holds all l^2 label pairs.
    n_anchors : int, default=300
        Kernel anchors m drawn among the labeled rows (the paper's 300).
    max_iter : int, default=500
        L-BFGS steps of each bit's sigmoid-smoothed problem (the authors' gradient budget);
        0 keeps the spectral start.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    method = "ksh"
    uses_labels = True
    anchor_dtype = FLOAT
    _parameter_constraints = {
        "n_bits": BITS,
        "n_labeled": [Interval(Integral, 2, None, closed="left")],
        "n_anchors": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "random_state": SEED,
    }

    def __init__(
        self,
        n_bits: int = 32,
        *,
        n_labeled: int = 5000,
        n_anchors: int = 300,
        max_iter: int = 500,
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.n_labeled = n_labeled
        self.n_anchors = n_anchors
        self.max_iter = max_iter
        self.random_state = random_state

    def _fit(self, X, y, checkpoint):
        n = X.shape[0]
        name = type(self).__name__
        l_count = check_int_param(self.n_labeled, "n_labeled", name, 2, n)
        m = check_int_param(self.n_anchors, "n_anchors", name, 1, l_count)  # anchors are labeled rows
        rng = np.random.default_rng(self.seed_)
        rows = np.sort(rng.choice(n, l_count, replace=False))
        labels = labels_of_rows(y, n, rows, f"{name} (supervised)", "use an unsupervised method (itq, sgh, ...)")
        Xl = np.asarray(select_rows(X, rows, keep=True).compute(), dtype=np.float64)
        self.anchors_ = Xl[np.sort(rng.choice(l_count, m, replace=False))]
        self.bandwidth_ = float(np.sqrt(squared_distances(Xl, self.anchors_)).mean())
        if not self.bandwidth_ > 0:
            raise InputError(f"{name}: every labeled row is the same point; the data has no spread to hash")
        K = rbf_features(Xl, self.anchors_, self.bandwidth_).astype(np.float64)
        self.kernel_mean_ = K.mean(axis=0)

        def report(bit, score):
            log.info("KSH %d bits: bit %d, b^T R b = %.6g", self.n_bits, bit + 1, score)

        self.components_, scores = train_ksh(
            K - self.kernel_mean_, pair_labels(labels), self.n_bits, self.max_iter, report
        )
        self.n_iter_ = self.n_bits
        self.training_stats_.update({"passes": 0, "n_labeled": l_count, "n_anchors": m, "bit_scores": scores})
