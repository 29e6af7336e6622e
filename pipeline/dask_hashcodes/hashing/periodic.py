"""Spectral hashing (SH) and shift-invariant kernel hashing (SIKH) as distributed estimators:
the periodic hash functions of kernels/periodic.py.

* SH (Weiss, Torralba & Fergus 2008), as the authors' reference code: PCA to
  p = min(n_bits, d) directions (one pass of per-chunk moments), the range of the data
  along each (one pass of per-chunk min/max), then the n_bits lowest 1-D eigenfunction modes
  of the box, chosen analytically. Two passes, d x d and p-sized terms travel.
* SIKH (Raginsky & Lazebnik 2009): random Fourier features of a Gaussian kernel
  exp(-||x - y||^2 / (2 bandwidth^2)), each thresholded at a random level. The one pass
  gives the mean (the projection is centred so that float32 keeps its precision: the
  uniform phase absorbs the shift) and the total variance for the default bandwidth.
"""

from __future__ import annotations

from numbers import Real

import dask
import numpy as np

from dask_hashcodes.distributed.graph import chunk_reads, map_reduce
from dask_hashcodes.distributed.row_sums import finite_row_sums
from dask_hashcodes.hashing.base import BITS, SEED, Hasher
from dask_hashcodes.hashing.constraints import Interval
from dask_hashcodes.hashing.linear import training_covariance
from dask_hashcodes.kernels.gram import centred_sq_norm
from dask_hashcodes.kernels.periodic import combine_ranges, encode_cosine, projection_range, spectral_hash_function
from dask_hashcodes.kernels.stats import add_partials, top_eigenvectors
from dask_hashcodes.storage.npz import FLOAT


class PeriodicHasher(Hasher):
    """Common encode/persistence: h(x) = sgn(cos((x - mean_) components_ + phase_) + offset_)."""

    def _encode_kernel(self, block):
        return encode_cosine(block, self.mean_, self.components_, self.phase_, self.offset_)

    def _learned_arrays(self):
        return {"mean_": self.mean_, "components_": self.components_, "phase_": self.phase_, "offset_": self.offset_}

    def _fitted_array_spec(self, n_features):
        d, r = n_features, self.n_bits
        return {
            "mean_": (FLOAT, (d,)),
            "components_": (FLOAT, (d, r)),
            "phase_": (FLOAT, (r,)),
            "offset_": (FLOAT, (r,)),
        }


class SH(PeriodicHasher):
    """Spectral hashing: thresholded sinusoids along the principal directions.

    Learned: ``mean_``, ``pca_components_`` (d, p), the projections' range ``lo_`` / ``hi_``
    (p,), and the hash function ``components_`` (d, n_bits), ``phase_``, ``offset_`` (zeros).

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    """

    method = "sh"

    def __init__(self, n_bits: int = 32):
        self.n_bits = n_bits

    def _fit(self, X, y, checkpoint):
        self.mean_, cov = training_covariance(X, "sh")
        _, pc = top_eigenvectors(cov, min(self.n_bits, X.shape[1]))
        lo, hi = dask.compute(map_reduce("sh-range", projection_range, combine_ranges, chunk_reads(X), self.mean_, pc))[
            0
        ]
        hi = np.where(hi > lo, hi, lo + 1.0)  # a constant direction: any range, its modes never split
        self.pca_components_, self.lo_, self.hi_ = pc, lo, hi
        self.components_, self.phase_ = spectral_hash_function(pc, lo, hi, self.n_bits)
        self.offset_ = np.zeros(self.n_bits)
        self.training_stats_["passes"] = 2

    def _learned_arrays(self):
        return {**super()._learned_arrays(), "pca_components_": self.pca_components_, "lo_": self.lo_, "hi_": self.hi_}

    def _fitted_array_spec(self, n_features):
        p = min(self.n_bits, n_features)  # principal directions whose modes make the bits
        ranges = {"lo_": (FLOAT, (p,)), "hi_": (FLOAT, (p,))}
        return {**super()._fitted_array_spec(n_features), "pca_components_": (FLOAT, (n_features, p)), **ranges}


class SIKH(PeriodicHasher):
    """Shift-invariant kernel hashing: random Fourier features of a Gaussian kernel, thresholded.

    The kernel width sigma defaults to ``bandwidth_scale`` x the root mean squared distance
    of a point to the mean, so the default holds in any units (the paper leaves sigma to the
    user). Learned: ``mean_``, ``components_`` (d, n_bits) ~ N(0, 1 / sigma^2), ``phase_`` ~
    U[0, 2 pi), ``offset_`` ~ U[-1, 1], ``bandwidth_``.

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    bandwidth : float or None, default=None
        Width sigma of the Gaussian kernel, in the data's units. None: bandwidth_scale x the
        RMS distance to the mean. Give it to compare with a sigma chosen elsewhere.
    bandwidth_scale : float, default=1.0
        Kernel width as a multiple of the RMS distance to the mean (when bandwidth is None).
        Smaller widths make the bits local (near rows share codes, far ones are random);
        larger ones make them behave like LSH.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    method = "sikh"
    _parameter_constraints = {
        "n_bits": BITS,
        "bandwidth": [Interval(Real, 0, None, closed="neither"), None],
        "bandwidth_scale": [Interval(Real, 0, None, closed="neither")],
        "random_state": SEED,
    }

    def __init__(
        self,
        n_bits: int = 32,
        *,
        bandwidth: float | None = None,
        bandwidth_scale: float = 1.0,
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.bandwidth = bandwidth
        self.bandwidth_scale = bandwidth_scale
        self.random_state = random_state

    def _fit(self, X, y, checkpoint):
        rng = np.random.default_rng(self.seed_)
        n, col_sum, sq_sum = dask.compute(map_reduce("sikh-mean", finite_row_sums, add_partials, chunk_reads(X)))[0]
        self.mean_ = col_sum / n
        spread = float(np.sqrt(max(centred_sq_norm(n, col_sum, sq_sum, self.mean_) / n, 0.0)))
        self.bandwidth_ = float(self.bandwidth or self.bandwidth_scale * spread or 1.0)
        d, r = X.shape[1], self.n_bits
        self.components_ = rng.standard_normal((d, r)) / self.bandwidth_
        self.phase_ = rng.uniform(0.0, 2.0 * np.pi, r)
        self.offset_ = rng.uniform(-1.0, 1.0, r)
        self.training_stats_["passes"] = 1

    def _learned_arrays(self):
        return {**super()._learned_arrays(), "bandwidth_": np.float64(self.bandwidth_)}

    def _fitted_array_spec(self, n_features):
        return {**super()._fitted_array_spec(n_features), "bandwidth_": (FLOAT, ())}

    def _set_learned_arrays(self, arrays, where="the learned arrays"):
        super()._set_learned_arrays(arrays, where)
        self.bandwidth_ = float(arrays["bandwidth_"])
