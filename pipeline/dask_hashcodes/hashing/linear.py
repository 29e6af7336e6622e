"""LSH, PCAH, ITQ and IsoHash: linear hash functions h(x) = sgn((x - mean) W).

Distributed fit = per-chunk statistics combined by a tree reduction (means, covariance,
ITQ's r x r terms); only d x d and r x r matrices travel, never data rows.
"""

from __future__ import annotations

import logging
from numbers import Integral

import dask
import numpy as np

from dask_hashcodes.distributed.graph import chunk_reads, map_reduce, row_bounds
from dask_hashcodes.distributed.progress import steps
from dask_hashcodes.hashing.base import BITS, SEED, Hasher
from dask_hashcodes.hashing.constraints import Interval
from dask_hashcodes.kernels.codes import encode_linear, project_linear
from dask_hashcodes.kernels.gram import gram_chunk
from dask_hashcodes.kernels.isohash import isotropic_rotation
from dask_hashcodes.kernels.itq import itq_loss, itq_rotation, random_rotation
from dask_hashcodes.kernels.stats import (
    add,
    add_partials,
    chunk_count_sum,
    chunk_moments,
    combine_moments,
    covariance,
    top_eigenvectors,
)
from dask_hashcodes.storage.npz import FLOAT
from dask_hashcodes.validation import check_finite_block

log = logging.getLogger(__name__)


def _checked(kernel):
    """Wrap a chunk kernel so NaN/Inf rows raise InputError naming the global row."""

    def run(block, row_offset):
        check_finite_block(block, row_offset, what="training features")
        return kernel(block)

    run.__name__ = kernel.__name__
    return run


_checked_count_sum = _checked(chunk_count_sum)
_checked_moments = _checked(chunk_moments)


def _with_offsets(X) -> list:
    return list(zip(chunk_reads(X), row_bounds(X)[:-1].tolist()))


def training_mean(X, name: str) -> np.ndarray:
    n, total = dask.compute(map_reduce(f"{name}-mean", _checked_count_sum, add_partials, _with_offsets(X)))[0]
    return total / n


def training_covariance(X, name: str) -> tuple[np.ndarray, np.ndarray]:
    moments = dask.compute(map_reduce(f"{name}-covariance", _checked_moments, combine_moments, _with_offsets(X)))[0]
    return covariance(moments)


def rotated_pca_spec(spec: dict, n_features: int, n_bits: int) -> dict:
    """``spec`` with the arrays of PCA followed by a rotation (ITQ, IsoHash)."""
    return {**spec, "pca_components_": (FLOAT, (n_features, n_bits)), "rotation_": (FLOAT, (n_bits, n_bits))}


class LinearHasher(Hasher):
    """Common encode/persistence of the linear family: mean_ (d,), components_ (d, r)."""

    def _encode_kernel(self, block):
        return encode_linear(block, self.mean_, self.components_)

    def _project_kernel(self, block):
        return project_linear(block, self.mean_, self.components_)

    def _learned_arrays(self):
        return {"mean_": self.mean_, "components_": self.components_}

    def _fitted_array_spec(self, n_features):
        return {"mean_": (FLOAT, (n_features,)), "components_": (FLOAT, (n_features, self.n_bits))}


class LSH(LinearHasher):
    """Sign random projections (Charikar) of mean-centred data: W ~ N(0, 1).

    The baseline every learned method should beat: no training beyond the mean, one pass over
    the data.

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    method = "lsh"
    _parameter_constraints = {"n_bits": BITS, "random_state": SEED}

    def __init__(self, n_bits: int = 32, *, random_state: int | None = 0):
        self.n_bits = n_bits
        self.random_state = random_state

    def _fit(self, X, y, checkpoint):
        rng = np.random.default_rng(self.seed_)
        self.mean_ = training_mean(X, "lsh")
        self.components_ = rng.standard_normal((X.shape[1], self.n_bits))
        self.training_stats_["passes"] = 1


class PCAH(LinearHasher):
    """PCA hashing: the signs of the top n_bits principal directions of the training data.

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into, one per principal direction,
        so at most the number of features.
    """

    method = "pcah"
    linear_pca_based = True

    def __init__(self, n_bits: int = 32):
        self.n_bits = n_bits

    def _fit(self, X, y, checkpoint):
        self.mean_, cov = training_covariance(X, "pcah")
        self.explained_variance_, self.components_ = top_eigenvectors(cov, self.n_bits)
        self.training_stats_["passes"] = 1

    def _learned_arrays(self):
        return {**super()._learned_arrays(), "explained_variance_": self.explained_variance_}

    def _fitted_array_spec(self, n_features):
        return {**super()._fitted_array_spec(n_features), "explained_variance_": (FLOAT, (self.n_bits,))}


class ITQ(LinearHasher):
    """Iterative quantization: PCA to n_bits, then the rotation R minimising ||B - V R||^2.

    Each iteration is one pass over the features summing B^T (X - mean) (r x d) over chunks
    (tree reduction); the orthogonal Procrustes problem is solved on the client.

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into, one per principal direction,
        so at most the number of features.
    n_iter : int, default=50
        Rotation iterations, one pass over the data each (Gong & Lazebnik's 50). The
        quantisation error falls quickly in the first iterations; fewer iterations train
        faster at a slightly higher error, 0 keeps a random rotation of PCA.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    passes_over_rows_repeatedly = True

    method = "itq"
    linear_pca_based = True
    supports_checkpoint = True
    _parameter_constraints = {
        "n_bits": BITS,
        "n_iter": [Interval(Integral, 0, None, closed="left")],
        "random_state": SEED,
    }

    def __init__(self, n_bits: int = 32, *, n_iter: int = 50, random_state: int | None = 0):
        self.n_bits = n_bits
        self.n_iter = n_iter
        self.random_state = random_state

    def _fit(self, X, y, checkpoint):
        n_iter = self.n_iter
        rng = np.random.default_rng(self.seed_)
        self.mean_, cov = training_covariance(X, "itq")
        _, W = top_eigenvectors(cov, self.n_bits)
        n = X.shape[0]
        projected_sq = n * float(np.trace(W.T @ cov @ W))  # ||V||^2 of V = (X - mean) W
        chunks = chunk_reads(X)
        R = random_rotation(self.n_bits, rng)
        losses, start = [], 0
        ckpt, saved = self._checkpoint(X, checkpoint, {"rotation": (FLOAT, (self.n_bits, self.n_bits))})
        if saved is not None:  # resume: the rotation after iteration `start`
            start, arrays, meta = saved
            R, losses = arrays["rotation"], meta["quantization_loss"]
            log.info("itq %d bits: resuming after iteration %d from %s", self.n_bits, start, ckpt.path)
        for it in steps(range(start, n_iter), f"ITQ {self.n_bits} bits: iterations", initial=start):
            # B^T V = (B^T (X - mean)) W: the fused sign + byte-grouped Gram pass over the
            # features (the same kernel as DisH), so V is never stored or re-read
            gram = dask.compute(map_reduce("itq-gram", gram_chunk, add, chunks, self.mean_, W @ R))[0]
            BtV = gram @ W
            losses.append(itq_loss(BtV, R, n, projected_sq))
            R = itq_rotation(BtV)
            log.info("itq %d bits: iteration %d/%d, quantization loss %.6g", self.n_bits, it + 1, n_iter, losses[-1])
            if ckpt is not None:
                ckpt.save(it + 1, {"rotation": R}, {"quantization_loss": losses})
        self.pca_components_ = W
        self.rotation_ = R
        self.components_ = W @ R
        self.training_stats_.update({"passes": 1 + n_iter, "quantization_loss": [round(v, 6) for v in losses]})

    def _learned_arrays(self):
        return {**super()._learned_arrays(), "pca_components_": self.pca_components_, "rotation_": self.rotation_}

    def _fitted_array_spec(self, n_features):
        return rotated_pca_spec(super()._fitted_array_spec(n_features), n_features, self.n_bits)


class IsoHash(LinearHasher):
    """Isotropic hashing (Kong & Li, NIPS 2012): PCA to n_bits, then the orthogonal Q that
    gives every projected dimension the same variance.

    The common variance is the mean of the top n_bits eigenvalues, so that no bit is a
    low-variance one. Q is found by the paper's lift and projection on n_bits x n_bits
    matrices, from a random orthogonal start (the seed); the data is read once (the
    covariance).

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into, one per principal direction,
        so at most the number of features.
    max_iter : int, default=1000
        Lift-and-projection iterations at most; they run on n_bits x n_bits matrices on the
        client, never on the data, so the cap only matters when the variances cannot be
        equalised exactly.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    method = "isohash"
    linear_pca_based = True
    _parameter_constraints = {
        "n_bits": BITS,
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "random_state": SEED,
    }

    def __init__(self, n_bits: int = 32, *, max_iter: int = 1000, random_state: int | None = 0):
        self.n_bits = n_bits
        self.max_iter = max_iter
        self.random_state = random_state

    def _fit(self, X, y, checkpoint):
        self.mean_, cov = training_covariance(X, "isohash")
        variances, W = top_eigenvectors(cov, self.n_bits)
        Q0 = random_rotation(self.n_bits, np.random.default_rng(self.seed_))
        Q, iterations = isotropic_rotation(variances, Q0, self.max_iter)
        self.pca_components_, self.rotation_ = W, Q
        self.components_ = W @ Q
        self.n_iter_ = iterations
        self.training_stats_.update({"passes": 1, "lift_projection_iterations": iterations})
        if iterations == self.max_iter:
            log.warning("isohash %d bits: lift and projection stopped at max_iter=%d", self.n_bits, self.max_iter)

    def _learned_arrays(self):
        return {**super()._learned_arrays(), "pca_components_": self.pca_components_, "rotation_": self.rotation_}

    def _fitted_array_spec(self, n_features):
        return rotated_pca_spec(super()._fitted_array_spec(n_features), n_features, self.n_bits)
