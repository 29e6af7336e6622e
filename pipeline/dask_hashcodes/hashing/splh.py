"""Sequential projection learning (Wang, Kumar & Chang, ICML 2010): S3PLH, USPLH and the
single-shot label-adjusted PCAH, as distributed estimators.

Only the data covariance needs every row: one pass of per-chunk moments (tree reduction).
Everything else is d x d:

* S3PLH (``SPLH``): l labeled rows (drawn from the training set with the seed, or given)
  are gathered to the client (l x d, e.g. 1000 x 784); per bit, w_k = top eigenvector of
  M_k = C_k + eta s X_l^T S_k X_l (s: the label scale of kernels/splh.py), then the
  truncated label update S_{k+1} = S_k - alpha T(S~_k, S_k) and the deflation
  C_{k+1} = (I - w w^T) C_k (I - w w^T). X_l is not deflated: the label term may pull
  later bits back into earlier directions (paper 2.4).
* USPLH (Algorithm 2): w_1 = top principal direction; after each bit, one distributed
  pass projects every row and keeps the ``region_size`` rows nearest to and farthest from
  the boundary on each side (exact top-k per chunk, merged by a tree: ties by row id);
  their pseudo-labels, on the rows of the current residual, give L_k (kernels/splh.py),
  accumulated with decay lambda: M_{k+1} = C_{k+1} + eta s sum_i lambda^(k-i) L_i.
* ``pcah-adjusted`` (SPLH with sequential=False): the top n_bits eigenvectors of M_1, the
  paper's single-shot baseline (the SSH solution with orthogonal projections).

Hash function h(x) = sgn((x - mean) w_k), mean thresholding as in the paper.
"""

from __future__ import annotations

import functools
import logging
from numbers import Integral, Real

import dask
import numpy as np

from dask_hashcodes.distributed.graph import chunk_reads, map_reduce, row_numbers, select_rows
from dask_hashcodes.distributed.progress import steps
from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing.base import BITS, SEED
from dask_hashcodes.hashing.constraints import ARRAY_LIKE, BOOLEAN, Interval
from dask_hashcodes.hashing.linear import LinearHasher, training_covariance
from dask_hashcodes.kernels.label_similarity import pair_labels
from dask_hashcodes.kernels.splh import (
    boundary_regions,
    deflate,
    label_scale,
    label_term,
    merge_regions,
    pseudo_label_term,
    top_direction,
    truncated_label_update,
)
from dask_hashcodes.kernels.stats import top_eigenvectors
from dask_hashcodes.storage.npz import FLOAT
from dask_hashcodes.validation import check_int_param

log = logging.getLogger(__name__)


class SPLH(LinearHasher):
    """Semi-supervised sequential projection learning (S3PLH).

    ``fit(X, y)``: y holds a label (or a multi-hot row) per training row; only the
    ``n_labeled`` rows drawn with the seed (or ``labeled_rows``) are used, as in the paper's
    protocol. The eta term is dimensionless: at eta = 1 the label term and the covariance have
    the same top eigenvalue at the first bit (see kernels/splh.py). The single-shot
    pcah-adjusted does not gain from the labels where PCA already ranks the between-class
    directions first: the sequential updates, not the adjusted covariance, carry S3PLH's gain.

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    n_labeled : int, default=1000
        Labeled training rows drawn with the seed (the paper's protocol labels 1000). Their
        pairwise label matrix is formed on the client, so the cost grows with its square.
    labeled_rows : array-like or None, default=None
        Indices of the labeled rows, instead of drawing n_labeled of them.
    eta : float, default=1.0
        Weight of the label term relative to the covariance; small values approach PCAH.
    alpha : float or None, default=None
        Step alpha of the sequential label update; None: 1 / max ||x_l - mean||^2, the paper's
        step that keeps every updated pair weight in [-1, 1].
    sequential : bool, default=True
        Learn the bits one after another, each correcting its predecessors' label errors;
        False (method pcah-adjusted): all bits at once from the label-adjusted covariance.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    passes_over_rows_repeatedly = True

    method = "splh"
    linear_pca_based = False
    uses_labels = True
    _parameter_constraints = {
        "n_bits": BITS,
        "n_labeled": [Interval(Integral, 2, None, closed="left")],
        "labeled_rows": [ARRAY_LIKE, None],
        "eta": [Interval(Real, 0, None, closed="neither")],
        "alpha": [Interval(Real, 0, None, closed="neither"), None],
        "sequential": [BOOLEAN],
        "random_state": SEED,
    }

    def __init__(
        self,
        n_bits: int = 32,
        *,
        n_labeled: int = 1000,
        labeled_rows=None,
        eta: float = 1.0,
        alpha: float | None = None,
        sequential: bool = True,
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.n_labeled = n_labeled
        self.labeled_rows = labeled_rows
        self.eta = eta
        self.alpha = alpha
        self.sequential = sequential
        self.random_state = random_state

    def _labeled_rows(self, n: int) -> np.ndarray:
        if self.labeled_rows is not None:
            rows = np.unique(np.asarray(self.labeled_rows, dtype=np.int64))
            if rows.size < 2 or rows[0] < 0 or rows[-1] >= n:
                raise InputError(
                    f"labeled_rows must hold at least 2 distinct row numbers in [0, {n}); got {rows.size} rows "
                    f"in [{rows[:1]}, {rows[-1:]}]"
                )
            return rows
        count = check_int_param(self.n_labeled, "n_labeled", type(self).__name__, 2, n)
        return np.sort(np.random.default_rng(self.seed_).choice(n, count, replace=False))

    def _fit(self, X, y, checkpoint):
        name = type(self).__name__
        n, d = X.shape
        if y is None:
            raise InputError(
                f"{name} ({self.method}) requires y to be passed, but the target y is None: it is "
                "semi-supervised, call fit(X, y) or evaluate a dataset with labels (`n_labeled=N`); for "
                "unlabeled data use usplh"
            )
        y = np.asarray(y)
        if y.shape[0] != n:
            raise InputError(
                f"{name}: got {y.shape[0]} labels for {n} training rows; pass one label (or multi-hot row) per row"
            )
        if not self.sequential:
            check_int_param(self.n_bits, "n_bits", f"{name} (pcah-adjusted, orthogonal directions)", 1, d)
        rows = self._labeled_rows(n)
        self.mean_, C = training_covariance(X, self.method)
        Xl = np.asarray(select_rows(X, rows, keep=True).compute(), dtype=np.float64) - self.mean_
        S = pair_labels(y[rows])
        alpha = self.alpha if self.alpha is not None else 1.0 / float(np.einsum("ij,ij->i", Xl, Xl).max())
        scale = label_scale(C, label_term(Xl, S))  # eta is relative to this (kernels/splh.py)
        self.training_stats_.update({"passes": 1, "n_labeled": len(rows), "label_scale": scale})
        if not self.sequential:
            M = C + self.eta * scale * label_term(Xl, S)
            self.explained_variance_, self.components_ = top_eigenvectors(M, self.n_bits)
            return
        W = np.empty((d, self.n_bits))
        violated = []
        for k in steps(range(self.n_bits), f"SPLH {self.n_bits} bits: bits"):
            W[:, k] = w = top_direction(C + self.eta * scale * label_term(Xl, S))
            p = Xl @ w
            violated.append(int(((S * np.outer(p, p)) < 0).sum() // 2))
            S = truncated_label_update(S, p, alpha)
            C = deflate(C, w)
            log.info("%s %d bits: bit %d, %d labeled pairs violated", self.method, self.n_bits, k + 1, violated[-1])
        self.components_ = W
        self.training_stats_.update({"alpha": float(alpha), "violated_pairs": violated})

    def _learned_arrays(self):
        arrays = super()._learned_arrays()
        if not self.sequential:
            arrays["explained_variance_"] = self.explained_variance_
        return arrays

    def _fitted_array_spec(self, n_features):
        spec = super()._fitted_array_spec(n_features)
        if not self.sequential:
            spec["explained_variance_"] = (FLOAT, (self.n_bits,))
        return spec


class USPLH(LinearHasher):
    """Unsupervised sequential projection learning: each bit learns from its predecessors' boundary errors.

    Choices the paper leaves open (their effect, as ablations on sift-synth, is on the SGH and
    SPLH documentation page):

    * Regions: the paper samples pairs from M (split, |w^T (x_i - x_j)| small) and C (same
      bit, far apart) without giving the thresholds. Here r-/r+ are the ``region_size`` rows
      closest to the boundary on each side and R-/R+ the ``region_size`` farthest, by the
      encoder's projection (the bit's own errors).
    * Pair weights: (r-, r+) pairs weigh 1 in total and each of (r-, R-) and (r+, R+) 1/2, so
      neighbour and non-neighbour pairs weigh the same.
    * Rows: Algorithm 2 samples the current residual X (deflated by the earlier bits), not
      the rows of the original data.
    * Scale: the pseudo-label term is scaled, like S3PLH's label term, so that at eta = 1 its
      norm equals the covariance's top eigenvalue at its first bit (the region means grow
      with n as the far regions get more extreme, so an unscaled eta meant a different
      balance at every n).

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    region_size : int, default=2000
        Rows per boundary region (the paper's 2000): the rows nearest each side of a bit's
        boundary and the farthest ones, from which its pseudo-labels are drawn.
    eta : float, default=2.0
        Weight of the pseudo-label term relative to the covariance; eta -> 0 is PCAH.
    decay : float, default=0.5
        Decay lambda of earlier bits' pseudo-labels: 1 keeps them all at full weight, small
        values let each bit follow mostly its predecessor's errors.
    """

    passes_over_rows_repeatedly = True

    method = "usplh"
    _parameter_constraints = {
        "n_bits": BITS,
        "region_size": [Interval(Integral, 1, None, closed="left")],
        "eta": [Interval(Real, 0, None, closed="neither")],
        "decay": [Interval(Real, 0, 1, closed="right")],
    }

    def __init__(self, n_bits: int = 32, *, region_size: int = 2000, eta: float = 2.0, decay: float = 0.5):
        self.n_bits = n_bits
        self.region_size = region_size
        self.eta = eta
        self.decay = decay

    def _fit(self, X, y, checkpoint):
        n, d = X.shape
        k_region = check_int_param(self.region_size, "region_size", "USPLH", 1, n)
        self.mean_, C = training_covariance(X, "usplh")
        pieces = list(zip(chunk_reads(X), chunk_reads(row_numbers(X))))
        merge = functools.partial(merge_regions, k=k_region)
        L = np.zeros((d, d))
        W = np.empty((d, self.n_bits))
        residual = np.eye(d)  # centred row -> row of the current residual X (Algorithm 2)
        scale, covariance = None, C
        region_sizes = []
        for k in steps(range(self.n_bits), f"USPLH {self.n_bits} bits: bits"):
            W[:, k] = w = top_direction(C + self.eta * (scale or 0.0) * L)
            C = deflate(C, w)
            if k == self.n_bits - 1:
                break
            # pseudo-labels of bit k for the next bits: one pass over every row
            regions = dask.compute(
                map_reduce("usplh-regions", boundary_regions, merge, pieces, self.mean_, w, k_region)
            )[0]
            term = pseudo_label_term([rows for _, _, rows in regions], self.mean_, residual)
            if scale is None:  # eta relative to the covariance, whatever n and the data's units
                scale = label_scale(covariance, term)
            L = self.decay * L + term
            residual = residual - np.outer(w, w @ residual)  # X <- (I - w w^T) X
            region_sizes.append([len(ids) for _, ids, _ in regions])
            log.info(
                "usplh %d bits: bit %d, pseudo-labels from regions of %s rows", self.n_bits, k + 1, region_sizes[-1]
            )
        self.components_ = W
        self.training_stats_["label_scale"] = scale
        self.training_stats_.update({"passes": 1 + max(0, self.n_bits - 1), "region_sizes": region_sizes})
