"""Supervised discrete hashing (SDH; Shen, Shen, Liu & Shen, CVPR 2015) with its steps over
the cluster (pipeline/dask_hashcodes/kernels/sdh.py has the math).

Training rows: ``n_labeled`` rows drawn with the seed (5000: the ADSH paper's protocol for
its non-deep baselines), or every row when ``n_labeled`` is at least their number (the
paper's SDH-D). Each pass is one ``sdh-bstep`` task per chunk of training rows: the chunk's
kernel features are computed in the task, its codes B stay on the workers between passes,
and only the sums Phi^T Phi, Phi^T B, B^T B and B^T Y ((m+1)^2, (m+1) x L, L^2, L x C)
come back. The G- and F-steps are solved from them on the client.

B starts from random signs per row, as the authors' code (sign(randn(n, L))), drawn from the
seed and the row's number (``kernels.codes.random_codes``) so that the start does
not depend on the chunking; the first G- and F-steps are solved from it.

Defaults are the authors' code's: 1000 anchors drawn from the training rows, lambda = 1
(G-step), lambda_F = 0.01 and nu = 1e-5 (F-step and its weight in the B-step), 5
iterations, DCC sweeps until no bit changes (at most 10). The bandwidth is the mean
distance from the training rows to the anchors (the authors fix 0.4 for unit-length GIST
features; the mean distance carries over to any scale), times ``bandwidth_scale``.
"""

from __future__ import annotations

import logging
from numbers import Integral, Real

import numpy as np

from dask_hashcodes.distributed.graph import chunk_delayeds, is_dask_array, row_bounds, select_rows, update_and_reduce
from dask_hashcodes.distributed.progress import steps
from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing.base import BITS, SEED, Hasher, label_chunks, labels_of_rows
from dask_hashcodes.hashing.constraints import Interval
from dask_hashcodes.kernels.codes import pack_signs
from dask_hashcodes.kernels.l2 import squared_distances
from dask_hashcodes.kernels.rbf import rbf_features
from dask_hashcodes.kernels.sdh import ridge, sdh_chunk_pass
from dask_hashcodes.kernels.stats import add_partials
from dask_hashcodes.storage.npz import FLOAT
from dask_hashcodes.validation import check_int_param

log = logging.getLogger(__name__)


def label_classes(labels) -> np.ndarray | None:
    """The sorted classes of class labels (numpy or dask; any orderable values), or None for
    multi-hot rows (their columns are the classes)."""
    if np.ndim(labels) == 2:
        return None
    if is_dask_array(labels):
        import dask.array as da

        return np.asarray(da.unique(labels).compute())
    return np.unique(np.asarray(labels))


def training_rows(X, y, n_labeled, rng, who: str):
    """(rows of X as a dask array, their labels, n): ``n_labeled`` rows drawn with ``rng`` in
    row order, or X itself when that is all of them. The labels of a sample come to the client
    (n_labeled of them); those of the whole set stay as given (numpy or dask)."""
    n = X.shape[0]
    remedy = "use an unsupervised method (itq, sgh, ...)"
    if n_labeled >= n:
        labels_of_rows(y, n, np.arange(0), f"{who} (supervised)", remedy)
        return X, y, n
    rows = np.sort(rng.choice(n, n_labeled, replace=False))
    labels = labels_of_rows(y, n, rows, f"{who} (supervised)", remedy)
    return select_rows(X, rows, keep=True).persist(), labels, n_labeled


class SDH(Hasher):
    """Supervised discrete hashing: binary codes that predict the labels, fitted by RBF kernel features.

    Learned: ``anchors_`` (m, d), ``bandwidth_``, ``components_`` (m, L) and ``bias_`` (L,):
    bits sign(phi(x) components_ + bias_).

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    n_labeled : int, default=5000
        Training rows drawn with the seed, every row when the data has at most this many;
        their labels define the pairwise similarities, so the cost grows with it.
    n_anchors : int, default=1000
        RBF anchors drawn from the training rows (the paper's 1000); each costs one kernel
        value per encoded row.
    bandwidth_scale : float, default=1.0
        Kernel width as a multiple of the mean distance of the training rows to the anchors.
    lambda_g : float, default=1.0
        Ridge lambda of the G-step (labels predicted from the codes).
    lambda_f : float, default=0.01
        Ridge lambda_F of the F-step (codes predicted from the kernel features).
    nu : float, default=1e-05
        Weight nu of the kernel features' fit to the codes in the B-step; larger ties the
        codes closer to what the hash function can reproduce.
    max_iter : int, default=5
        Alternations of the G-, F- and B-steps (the paper's 5).
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    method = "sdh"
    uses_labels = True
    _parameter_constraints = {
        "n_bits": BITS,
        "n_labeled": [Interval(Integral, 2, None, closed="left")],
        "n_anchors": [Interval(Integral, 1, None, closed="left")],
        "bandwidth_scale": [Interval(Real, 0, None, closed="neither")],
        "lambda_g": [Interval(Real, 0, None, closed="neither")],
        "lambda_f": [Interval(Real, 0, None, closed="neither")],
        "nu": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "random_state": SEED,
    }

    def __init__(
        self,
        n_bits: int = 32,
        *,
        n_labeled: int = 5000,
        n_anchors: int = 1000,
        bandwidth_scale: float = 1.0,
        lambda_g: float = 1.0,
        lambda_f: float = 1e-2,
        nu: float = 1e-5,
        max_iter: int = 5,
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.n_labeled = n_labeled
        self.n_anchors = n_anchors
        self.bandwidth_scale = bandwidth_scale
        self.lambda_g = lambda_g
        self.lambda_f = lambda_f
        self.nu = nu
        self.max_iter = max_iter
        self.random_state = random_state

    def _fit(self, X, y, checkpoint):
        rng = np.random.default_rng(self.seed_)
        Xt, labels, n = training_rows(X, y, self.n_labeled, rng, "SDH")
        m = check_int_param(self.n_anchors, "n_anchors", "SDH (anchors are training rows)", 1, n)
        anchor_rows = np.sort(rng.choice(n, m, replace=False))
        self.anchors_ = np.asarray(select_rows(Xt, anchor_rows, keep=True).compute(), dtype=np.float64)
        classes = label_classes(labels)
        start_seed = int(rng.integers(2**63))  # of the start codes B, random signs per row
        # the bandwidth from the anchors' distances to a seeded sample of the training rows
        probe = select_rows(Xt, np.sort(rng.choice(n, min(n, 2000), replace=False)), keep=True).compute()
        self.bandwidth_ = self.bandwidth_scale * float(np.sqrt(squared_distances(probe, self.anchors_)).mean())
        if not self.bandwidth_ > 0:
            raise InputError("SDH: every training row is the same point; the data has no spread to hash")

        starts = [int(a) for a in row_bounds(Xt)[:-1]]
        chunks = list(zip(chunk_delayeds(Xt), label_chunks(labels, Xt), starts, strict=True))
        B = [None] * len(chunks)
        common = {"anchors": self.anchors_, "bandwidth": self.bandwidth_, "classes": classes}
        B, sums = self._pass(chunks, B, common | {"start_seed": start_seed, "n_bits": self.n_bits}, "sdh-start")
        path = []
        for it in steps(range(self.max_iter), f"SDH {self.n_bits} bits: iterations"):
            W, P = self._solve(sums)
            B, sums = self._pass(chunks, B, common | {"W": W, "P": P, "nu": float(self.nu)}, "sdh-bstep")
            label_term, fit_term = (float(v) for v in sums[4])
            path.append({"iteration": it + 1, "label_loss": label_term, "hash_loss": fit_term})
            log.info("SDH %d bits: iteration %d: %s", self.n_bits, it + 1, path[-1])
        _, P = self._solve(sums)  # the hash function of the final codes
        self.components_, self.bias_ = P[:-1], P[-1]
        self.n_iter_ = self.max_iter
        self.training_stats_.update(
            {
                "passes": self.max_iter + 1,
                "n_labeled": n,
                "n_anchors": m,
                "sdh_path": path,
                "bandwidth": self.bandwidth_,
            }
        )

    def _pass(self, chunks, B, params, name):
        chunks = [(x, lab, b, start) for (x, lab, start), b in zip(chunks, B, strict=True)]
        return update_and_reduce(name, sdh_chunk_pass, chunks, add_partials, **params)

    def _solve(self, sums):
        PhiPhi, PhiB, BtB, BtY, _ = sums
        W = ridge(BtB, BtY, self.lambda_g)  # G-step (L x C)
        P = ridge(PhiPhi, PhiB, self.lambda_f)  # F-step ((m + 1) x L)
        return W, P

    def _encode_kernel(self, block):
        return pack_signs(self._project_kernel(block))

    def _project_kernel(self, block):
        K = rbf_features(block, self.anchors_, self.bandwidth_).astype(np.float64)
        return K @ self.components_ + self.bias_

    def _learned_arrays(self):
        return {
            "anchors_": self.anchors_,
            "bandwidth_": np.float64(self.bandwidth_),
            "components_": self.components_,
            "bias_": self.bias_,
        }

    def _fitted_array_spec(self, n_features):
        m, r = self.n_anchors, self.n_bits  # a fit refuses fewer labeled rows than anchors: exactly m
        return {
            "anchors_": (FLOAT, (m, n_features)),
            "bandwidth_": (FLOAT, ()),
            "components_": (FLOAT, (m, r)),
            "bias_": (FLOAT, (r,)),
        }

    def _set_learned_arrays(self, arrays, where="the learned arrays"):
        super()._set_learned_arrays(arrays, where)
        self.bandwidth_ = float(arrays["bandwidth_"])
