"""K-means hashing (KMH; He, Wen & Sun, CVPR 2013) as a distributed estimator (kernels/kmh.py).

Passes over the data: one for the covariance (PCA), then one per iteration: every chunk
assigns its rows to the nearest codeword of each subspace and returns the counts and the
raw row sums per codeword (M k x d), tree-reduced; the update of the M k codewords
(Newton's method, one codeword at a time) runs on the client. Encoding is per chunk:
project, nearest codeword per subspace, its b-bit index.

Choices the paper leaves open, and what decides them here (the authors' released Matlab
code where it has one):

* Subspaces: PCA over all d directions (no reduction, as the authors' code), truncated to
  the largest multiple of M = n_bits / b (the fewer than M smallest-variance directions are
  dropped), dealt to M subspaces of equal dimension so that the products of their
  eigenvalues balance (greedy, largest first: the authors' ``balanced_partition``, Ge et
  al.'s eigenvalue allocation). ``n_bits`` must be a multiple of b and at most d (each
  subspace needs b principal directions for the initialisation).
* Initialisation, per subspace (the authors' ``init_PCAH``): codewords on the vertices of a
  hypercube on the subspace's top b principal directions, 0 on its other directions; index
  bit t is the sign of coordinate t (PCAH's code; the authors' code redoes a PCA inside each
  subspace, which is the identity here: the global PCA's coordinates are already
  uncorrelated and dealt in descending order). The half-edge a is PCAH's least-squares
  scale, the mean |y_t| over points and the b directions; it comes from the first
  assignment's statistics (a point's vertex is its sign pattern whatever a), so costs no pass.
* The scale s of d_h = s sqrt(h) is the initial hypercube's edge, 2a, kept fixed (the
  authors' code fixes it so). Refitting it by least squares after every update would be a
  valid descent step too, but the authors' code does not do it.
* lambda = 10 (the paper) and ``n_iter`` = 50 (the authors' code: "50 to 200, usually 50
  is enough"); b = 4 by default (the paper's main setting; the authors suggest b = 2 for
  32-bit SIFT).
* Update: each codeword in index order minimises E with the others fixed, from its current
  position (the authors use Matlab's fminunc, a quasi-Newton method); here Newton's method
  with the analytic Hessian and a backtracking line search (the majoriser's step, SMACOF's,
  where the Hessian is not positive definite), to a gradient norm of 1e-6 in units of s per
  point of the codeword: the same minima as BFGS (the dense reference test), in a fraction
  of its time.
  A codeword without points is not in E and stays where it is.
* Training uses every row given to ``fit`` (the authors' code: "better to use all samples");
  each iteration is one pass.

KMH draws no random numbers: the result is fixed by the data alone.
"""

from __future__ import annotations

import logging
from numbers import Integral, Real

import dask
import numpy as np

from dask_hashcodes.distributed.graph import chunk_reads, map_reduce
from dask_hashcodes.distributed.progress import steps
from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing.base import BITS, Hasher
from dask_hashcodes.hashing.constraints import Interval
from dask_hashcodes.hashing.linear import training_covariance
from dask_hashcodes.kernels.kmh import (
    assignment_sums,
    balanced_partition,
    encode_kmh,
    hypercube_codebook,
    initial_scale,
    kmh_objective,
    projected_sums,
    update_codebook,
)
from dask_hashcodes.kernels.stats import add_partials, top_eigenvectors
from dask_hashcodes.storage.npz import FLOAT

log = logging.getLogger(__name__)

GTOL = 1e-6  # Newton stop: gradient norm of one codeword's E, in units of s per point of the codeword


class KMH(Hasher):
    """K-means hashing: affinity-preserving k-means in M = n_bits / bits_per_subspace PCA subspaces.

    Each subspace has 2^b codewords and a point's b bits are its codeword's index. Learned:
    ``mean_`` (d,), ``components_`` (d, D') grouped by subspace, ``explained_variance_``
    (D',), ``centroids_`` (M, 2^b, D'/M) in the projected coordinates, ``scales_`` (M,) = s
    per subspace.

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    bits_per_subspace : int, default=4
        Bits b per subspace, 2^b codewords each; n_bits must be a multiple of it. Larger b
        quantises each subspace more finely and costs 2^b centroids per subspace.
    n_iter : int, default=50
        Iterations of the affinity-preserving k-means, one pass over the data each.
    affinity_weight : float, default=10.0
        Weight lambda of the affinity error (Hamming distances matching centroid distances)
        against the quantisation error; 0 is plain product quantisation.
    """

    passes_over_rows_repeatedly = True

    method = "kmh"
    _parameter_constraints = {
        "n_bits": BITS,
        "bits_per_subspace": [Interval(Integral, 1, 8, closed="both")],
        "n_iter": [Interval(Integral, 1, None, closed="left")],
        "affinity_weight": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(
        self, n_bits: int = 32, *, bits_per_subspace: int = 4, n_iter: int = 50, affinity_weight: float = 10.0
    ):
        self.n_bits = n_bits
        self.bits_per_subspace = bits_per_subspace
        self.n_iter = n_iter
        self.affinity_weight = affinity_weight

    def _fit(self, X, y, checkpoint):
        n, d = X.shape
        b = self.bits_per_subspace
        if self.n_bits % b or self.n_bits > d:
            raise InputError(
                f"KMH: n_bits ({self.n_bits}) must be a multiple of bits_per_subspace ({b}) and at most the number "
                f"of features ({d}): each subspace codes b bits on b of its principal directions"
            )
        M = self.n_bits // b
        self.mean_, cov = training_covariance(X, "kmh")
        values, vectors = top_eigenvectors(cov, M * (d // M))
        order = balanced_partition(values, M)
        self.components_, self.explained_variance_ = vectors[:, order], values[order]
        sum_sq = n * self.explained_variance_.reshape(M, -1).sum(axis=1)  # sum_x ||y_m||^2 per subspace
        centroids = np.stack([hypercube_codebook(b, d // M)] * M)
        reads, history = chunk_reads(X), []
        for it in steps(range(self.n_iter), f"KMH {self.n_bits} bits: iterations"):
            counts, sums = dask.compute(
                map_reduce("kmh-assign", assignment_sums, add_partials, reads, self.mean_, self.components_, centroids)
            )[0]
            S = projected_sums(sums, counts, self.mean_, self.components_)
            if it == 0:  # the assignment to the unit hypercube gives PCAH's scale
                half_edges = np.array([initial_scale(S[m], n, b) for m in range(M)])
                if not (half_edges > 0).all():
                    raise InputError("KMH: a subspace's principal directions have no spread; the data cannot be coded")
                centroids *= half_edges[:, None, None]
                self.scales_ = 2.0 * half_edges
            parts = [kmh_objective(centroids[m], S[m], counts[m], n, sum_sq[m], self.scales_[m]) for m in range(M)]
            quan, aff = (float(sum(p[i] for p in parts)) for i in (0, 1))
            history.append(round(quan + self.affinity_weight * aff, 6))
            log.info(
                "kmh %d bits: iteration %d/%d, E_quan %.6g, E_aff %.6g", self.n_bits, it + 1, self.n_iter, quan, aff
            )
            centroids = np.stack(
                [
                    update_codebook(centroids[m], S[m], counts[m], n, self.scales_[m], self.affinity_weight, GTOL)
                    for m in range(M)
                ]
            )
        self.centroids_ = centroids
        self.training_stats_.update({"passes": 1 + self.n_iter, "objective": history})

    def _encode_kernel(self, block):
        return encode_kmh(block, self.mean_, self.components_, self.centroids_)

    def _learned_arrays(self):
        return {
            "mean_": self.mean_,
            "components_": self.components_,
            "explained_variance_": self.explained_variance_,
            "centroids_": self.centroids_,
            "scales_": self.scales_,
        }

    def _fitted_array_spec(self, n_features):
        b = self.bits_per_subspace
        M = self.n_bits // b
        per = n_features // M  # principal directions per subspace
        return {
            "mean_": (FLOAT, (n_features,)),
            "components_": (FLOAT, (n_features, M * per)),
            "explained_variance_": (FLOAT, (M * per,)),
            "centroids_": (FLOAT, (M, 2**b, per)),
            "scales_": (FLOAT, (M,)),
        }
