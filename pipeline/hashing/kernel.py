"""Kernel hash functions learned from a few anchor rows: KLSH.

KLSH (Kulis & Grauman 2009) needs no pass over the data: p anchor rows are drawn with the
seed and gathered to the client (p x d, e.g. 300 x 784); everything else is p x p. Encoding
maps each chunk to its Gaussian kernel features against the anchors (n x p float32, per
chunk) followed by the linear encoder, like SGH's.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval

from pipeline.distributed.graph import select_rows
from pipeline.errors import InputError
from pipeline.hashing.base import BITS, SEED, Hasher
from pipeline.kernels.codes import encode_linear
from pipeline.kernels.klsh import gaussian_kernel, klsh_weights
from pipeline.kernels.sgh import kernel_features
from pipeline.validation import check_int_param


class KLSH(Hasher):
    """Kernelized LSH with a Gaussian kernel exp(-||x - y||^2 / (2 bandwidth^2)).
    ``n_anchors`` p = 300 and ``subset_size`` t = 30 as the paper's experiments; the
    bandwidth is ``bandwidth_scale`` x the RMS distance between anchors (the paper tunes
    its kernels per dataset). Learned: ``anchors_`` (p, d), ``subsets_`` (n_bits, t),
    ``kernel_mean_`` (p,: column means of the anchors' kernel matrix), ``components_``
    (p, n_bits), ``bandwidth_``."""

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
        rows = np.sort(rng.choice(n, p, replace=False))
        self.anchors_ = np.asarray(select_rows(X, rows, keep=True).compute())
        A = self.anchors_.astype(np.float64)
        sq = np.einsum("ij,ij->i", A, A)
        mean_sq_distance = 2.0 * sq.mean() - 2.0 * float(A.mean(axis=0) @ A.mean(axis=0))
        self.bandwidth_ = self.bandwidth_scale * float(np.sqrt(max(mean_sq_distance, 0.0)))
        if not self.bandwidth_ > 0:
            raise InputError("KLSH: every anchor row is the same point; the data has no spread to hash")
        K = gaussian_kernel(self.anchors_, self.anchors_, self.bandwidth_)
        self.subsets_ = np.stack([np.sort(rng.choice(p, t, replace=False)) for _ in range(self.n_bits)])
        self.kernel_mean_ = K.mean(axis=0)
        self.components_ = klsh_weights(K, self.subsets_)
        self.training_stats_.update({"passes": 0, "n_anchors": p, "bandwidth": self.bandwidth_})

    def _encode_kernel(self, block):
        return encode_linear(
            kernel_features(block, self.anchors_, self.bandwidth_), self.kernel_mean_, self.components_
        )

    def _learned_arrays(self):
        return {
            "anchors_": self.anchors_,
            "subsets_": self.subsets_,
            "kernel_mean_": self.kernel_mean_,
            "components_": self.components_,
            "bandwidth_": np.float64(self.bandwidth_),
        }

    def _set_learned_arrays(self, arrays):
        super()._set_learned_arrays(arrays)
        self.bandwidth_ = float(arrays["bandwidth_"])
