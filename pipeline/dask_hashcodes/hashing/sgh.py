"""SGH: scalable graph hashing with feature transformation (Jiang & Li, IJCAI 2015) on Dask.

All n^2 similarities S~_ij = 2 exp(-||x_i - x_j||^2 / rho) - 1 enter through the feature
transformation (kernels/sgh.py), so training only ever sums small per-chunk terms:

  pass 1  row count, column sums, sum of squares      -> mean, kernel bandwidth
  pass 2  max ||x - mean||^2, kernel feature sums     -> rho, kernel mean
  pass 3  K^T K, K^T P (m x m, m x (d+2))              -> Z, A_1
  2c passes, one per bit of Algorithm 1 (c bits, then the refinement sweep of the c bits
  in a random order): u = K^T sgn(K w), m floats per chunk.

Kernel features (n x m float32) are either kept on the workers between passes
(``kernel_cache="memory"``: each bit's pass is then a GEMV over memory) or recomputed from
the stored features in every pass (``"recompute"``: a GEMM n x d x m per pass, nothing
held). ``"auto"`` keeps them when they take at most a quarter of the cluster's worker
memory (1M points x 300 bases = 1.2 GB; 100M points would need 120 GB, so it recomputes).

Hash function h(x) = sgn((phi(x) - kernel_mean) W): linear in the kernel features, so the
encoder is the linear family's (kernels/codes.py) applied to phi(x).
"""

from __future__ import annotations

import logging
from numbers import Integral, Real

import dask
import numpy as np

from dask_hashcodes.distributed.cluster import cluster_memory_bytes
from dask_hashcodes.distributed.graph import (
    chunk_delayeds,
    chunk_reads,
    map_reduce,
    select_rows,
)
from dask_hashcodes.distributed.progress import steps
from dask_hashcodes.distributed.row_sums import finite_row_sums
from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing.base import BITS, SEED, Hasher
from dask_hashcodes.hashing.constraints import BOOLEAN, Interval, Options
from dask_hashcodes.kernels.codes import encode_linear, project_linear
from dask_hashcodes.kernels.rbf import rbf_features
from dask_hashcodes.kernels.sgh import (
    combine_max_sum,
    gram_terms,
    initial_residual,
    kernel_sign_gram,
    max_centred_sq_norm_and_kernel_sum,
    sq_distance_moments,
    top_generalized_eigenvector,
)
from dask_hashcodes.kernels.stats import add, add_partials
from dask_hashcodes.storage.npz import FLOAT, REAL
from dask_hashcodes.validation import check_int_param

log = logging.getLogger(__name__)
KERNEL_CACHE_FRACTION = 0.25  # of the cluster's worker memory that cached kernel features may take
KERNEL_CACHE_MODES = ("auto", "memory", "recompute")


def _phi(X, phi, bases, bandwidth):
    """A chunk's kernel features: the cached ones, or computed from its feature rows."""
    return phi if phi is not None else rbf_features(X, bases, bandwidth)


def _norm_and_kernel_sum(X, phi, mean, bases, bandwidth):
    return max_centred_sq_norm_and_kernel_sum(X, _phi(X, phi, bases, bandwidth), mean)


def _gram_terms(X, phi, mean, bases, bandwidth, kernel_mean, rho):
    return gram_terms(X, _phi(X, phi, bases, bandwidth), mean, kernel_mean, rho)


def _sign_gram(X, phi, bases, bandwidth, kernel_mean, w):
    return kernel_sign_gram(_phi(X, phi, bases, bandwidth), kernel_mean, w)


class SGH(Hasher):
    """Scalable graph hashing: the n^2 Gaussian similarities fitted bit by bit through kernel features.

    Learned: ``mean_`` (d,), ``bases_`` (m, d, the training rows drawn as kernel bases),
    ``kernel_mean_`` (m,), ``components_`` (m, c) = W^T, and the scalars ``bandwidth_`` and
    ``rho_``. The paper's settings: m = 300 random training points as Gaussian-kernel bases,
    gamma = 1e-6, one refinement sweep; rho_scale = 1 is the bound under which
    2 x_i.x_j / rho stays in [-1, 1] (the paper treats rho as a hyper-parameter).

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    n_bases : int, default=300
        Kernel bases m, training rows drawn with the seed. More bases give a richer hash
        function; each costs m kernel values per row in every pass.
    bandwidth_scale : float, default=0.5
        Kernel width sigma in exp(-||x - a||^2 / (2 sigma^2)) = this x the RMS distance between
        training rows and bases; smaller makes the hash function more local.
    rho : float or None, default=None
        Width rho of the similarity 2 exp(-||x_i - x_j||^2 / rho) - 1 that the codes
        reproduce; None: from rho_scale.
    rho_scale : float, default=0.5
        rho = this x 2 max ||x - mean||^2, when rho is None; smaller makes only close pairs
        count as similar.
    gamma : float, default=1e-06
        Ridge gamma of each bit's kernel regression: raise it when the kernel features are
        nearly collinear (many bases, few rows).
    refine : bool, default=True
        Re-fit each bit against all the others after the first sweep (one more pass per bit),
        as the paper's Algorithm 1.
    kernel_cache : {'auto', 'memory', 'recompute'}, default='auto'
        Keep the kernel features on the workers between passes ('memory'), recompute them in
        every pass ('recompute'), or keep them when they fit in a quarter of the workers'
        memory ('auto').
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    passes_over_rows_repeatedly = True

    method = "sgh"
    _parameter_constraints = {
        "n_bits": BITS,
        "n_bases": [Interval(Integral, 1, None, closed="left")],
        "bandwidth_scale": [Interval(Real, 0, None, closed="neither")],
        "rho": [Interval(Real, 0, None, closed="neither"), None],
        "rho_scale": [Interval(Real, 0, None, closed="neither")],
        "gamma": [Interval(Real, 0, None, closed="neither")],
        "refine": [BOOLEAN],
        "kernel_cache": [Options(set(KERNEL_CACHE_MODES))],
        "random_state": SEED,
    }

    def __init__(
        self,
        n_bits: int = 32,
        *,
        n_bases: int = 300,
        bandwidth_scale: float = 0.5,
        rho: float | None = None,
        rho_scale: float = 0.5,
        gamma: float = 1e-6,
        refine: bool = True,
        kernel_cache: str = "auto",
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.n_bases = n_bases
        self.bandwidth_scale = bandwidth_scale
        self.rho = rho
        self.rho_scale = rho_scale
        self.gamma = gamma
        self.refine = refine
        self.kernel_cache = kernel_cache
        self.random_state = random_state

    def _cache_kernel(self, n: int) -> bool:
        if self.kernel_cache != "auto":
            return self.kernel_cache == "memory"
        return n * self.n_bases * 4 <= KERNEL_CACHE_FRACTION * cluster_memory_bytes()

    def _fit(self, X, y, checkpoint):
        n = X.shape[0]
        check_int_param(self.n_bases, "n_bases", "SGH", 1, n)  # bases are training rows
        c, m = self.n_bits, self.n_bases
        rng = np.random.default_rng(self.seed_)
        base_rows = np.sort(rng.choice(n, m, replace=False))
        reads = chunk_reads(X)

        n_rows, col_sum, sq_sum = dask.compute(map_reduce("sgh-mean", finite_row_sums, add_partials, reads))[0]
        self.mean_ = col_sum / n_rows
        self.bases_ = np.asarray(select_rows(X, base_rows, keep=True).compute())
        self.bandwidth_ = self.bandwidth_scale * float(
            np.sqrt(sq_distance_moments(n_rows, col_sum, sq_sum, self.bases_))
        )
        if not self.bandwidth_ > 0:
            raise InputError(
                "SGH: every training point equals every kernel base (zero distances); the data has no spread to hash"
            )

        cached = self._cache_kernel(n)
        if cached:
            import dask.array as da
            from dask.base import tokenize

            phi = da.map_blocks(
                rbf_features,
                X,
                self.bases_,
                self.bandwidth_,
                dtype=np.float32,
                chunks=(X.chunks[0], (m,)),
                name=f"sgh-kernel-{tokenize(X, self.bases_, self.bandwidth_)}",
            ).persist()
            pairs = list(zip(reads, chunk_delayeds(phi)))
            phi_only = [(None, p) for p in chunk_delayeds(phi)]
        else:
            pairs = phi_only = [(r, None) for r in reads]
        kernel = (self.bases_, self.bandwidth_)

        max_sq, kernel_sum = dask.compute(
            map_reduce("sgh-kernel-mean", _norm_and_kernel_sum, combine_max_sum, pairs, self.mean_, *kernel)
        )[0]
        self.kernel_mean_ = kernel_sum / n_rows
        self.rho_ = float(self.rho) if self.rho is not None else self.rho_scale * 2.0 * max_sq
        if not self.rho_ > 0:
            raise InputError("SGH: all training points are equal to their mean; the data has no spread to hash")
        KtK, KtH, Ks = dask.compute(
            map_reduce("sgh-gram", _gram_terms, add_partials, pairs, self.mean_, *kernel, self.kernel_mean_, self.rho_)
        )[0]
        Z = KtK + self.gamma * np.eye(m)
        A = initial_residual(KtH, Ks, c)

        def sign_gram(w):
            return dask.compute(map_reduce("sgh-bit", _sign_gram, add, phi_only, *kernel, self.kernel_mean_, w))[0]

        W = np.empty((m, c))
        U = np.empty((m, c))
        for t in steps(range(c), f"SGH {c} bits: bits"):  # Algorithm 1, first sweep: bit t fits the residual
            W[:, t] = top_generalized_eigenvector(A, Z)
            U[:, t] = sign_gram(W[:, t])
            A -= np.outer(U[:, t], U[:, t])
            log.info("sgh %d bits: bit %d/%d", c, t + 1, c)
        order = rng.permutation(c) if self.refine else np.array([], dtype=np.int64)
        for step, t in enumerate(order):  # refinement: re-fit each bit against all the others
            A += np.outer(U[:, t], U[:, t])
            W[:, t] = top_generalized_eigenvector(A, Z)
            U[:, t] = sign_gram(W[:, t])
            A -= np.outer(U[:, t], U[:, t])
            log.info("sgh %d bits: refinement %d/%d (bit %d)", c, step + 1, c, t + 1)
        if cached:
            del phi
        self.components_ = W
        self.training_stats_.update(
            {
                "passes": 3 + c + len(order),
                "kernel_cache": "memory" if cached else "recompute",
                "bandwidth": self.bandwidth_,
                "rho": self.rho_,
                "n_bases": m,
                "refine_order": order.tolist(),
            }
        )

    def _encode_kernel(self, block):
        return encode_linear(rbf_features(block, self.bases_, self.bandwidth_), self.kernel_mean_, self.components_)

    def _project_kernel(self, block):
        return project_linear(rbf_features(block, self.bases_, self.bandwidth_), self.kernel_mean_, self.components_)

    def _learned_arrays(self):
        return {
            "mean_": self.mean_,
            "bases_": self.bases_,
            "kernel_mean_": self.kernel_mean_,
            "components_": self.components_,
            "bandwidth_": np.float64(self.bandwidth_),
            "rho_": np.float64(self.rho_),
        }

    def _fitted_array_spec(self, n_features):
        m = self.n_bases  # a fit refuses fewer rows than bases: exactly m, training rows as stored
        return {
            "mean_": (FLOAT, (n_features,)),
            "bases_": (REAL, (m, n_features)),
            "kernel_mean_": (FLOAT, (m,)),
            "components_": (FLOAT, (m, self.n_bits)),
            "bandwidth_": (FLOAT, ()),
            "rho_": (FLOAT, ()),
        }

    def _set_learned_arrays(self, arrays, where="the learned arrays"):
        super()._set_learned_arrays(arrays, where)
        self.bandwidth_ = float(arrays["bandwidth_"])
        self.rho_ = float(arrays["rho_"])
