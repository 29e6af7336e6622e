"""Column-sampling discrete supervised hashing (COSDISH; Kang, Li & Zhou, AAAI 2016) with its
row-wise steps over the cluster (pipeline/dask_hashcodes/kernels/cosdish.py has the math).

Training rows: ``n_labeled`` rows drawn with the seed (5000: the ADSH paper's protocol for
its non-deep baselines), or every row when ``n_labeled`` is at least their number. Their
codes stay on the workers, one block per chunk. Each of ``max_iter`` (T_sto, 10) iterations
draws Omega (``n_columns`` rows, default q = the code length, as the authors' code), then
``alternations`` (T_alt, 3) times solves B_Omega on the client from r-sized sums and runs the
Gamma step as one ``cosdish-gamma`` task per chunk, S formed from labels inside the task.
Integer sums only, so the codes do not depend on the chunking or the number of workers.
A last pass gives the moments and X^T B for the hash functions: a ridge regression from the
standardised features to the codes (lambda 1), as the authors' code.

B starts from random signs per row, as the authors' code (B = randn(n, q) > 0), drawn from the
seed and the row's number (``kernels.codes.random_codes``) so that the start does
not depend on the chunking.
"""

from __future__ import annotations

import logging
from numbers import Integral, Real

import dask
import numpy as np

from dask_hashcodes.distributed.graph import chunk_delayeds, map_chunks, row_bounds, tree_reduce, update_and_reduce
from dask_hashcodes.distributed.progress import steps
from dask_hashcodes.hashing.base import BITS, SEED, Hasher, label_chunks
from dask_hashcodes.hashing.constraints import Interval
from dask_hashcodes.hashing.sdh import training_rows
from dask_hashcodes.kernels.codes import encode_linear, project_linear, random_codes
from dask_hashcodes.kernels.cosdish import cosdish_chunk_pass, linear_hash, omega_step, regression_sums
from dask_hashcodes.kernels.label_similarity import add_chunk_sums, negative_weight, similarity_product
from dask_hashcodes.kernels.ranking import relevance_from_labels
from dask_hashcodes.kernels.stats import combine_moments
from dask_hashcodes.storage.npz import FLOAT
from dask_hashcodes.validation import check_int_param

log = logging.getLogger(__name__)


class COSDISH(Hasher):
    """Column-sampling discrete supervised hashing.

    Learned: ``mean_``, ``scale_`` (d,) and ``components_`` (d, q): bits
    sign(((x - mean_) / scale_) components_).

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    n_labeled : int, default=5000
        Training rows drawn with the seed, every row when the data has at most this many;
        their labels define the pairwise similarities, so the cost grows with it.
    n_columns : int or None, default=None
        Columns |Omega| of the similarity matrix sampled per iteration; None: the code length.
    max_iter : int, default=10
        Iterations T_sto, each with a new column sample.
    alternations : int, default=3
        Alternations T_alt between the sampled and the other rows' codes per iteration.
    ridge : float, default=1.0
        Ridge lambda of the hash functions' regression onto the learned codes.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    method = "cosdish"
    uses_labels = True
    _parameter_constraints = {
        "n_bits": BITS,
        "n_labeled": [Interval(Integral, 2, None, closed="left")],
        "n_columns": [Interval(Integral, 1, None, closed="left"), None],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "alternations": [Interval(Integral, 1, None, closed="left")],
        "ridge": [Interval(Real, 0, None, closed="neither")],
        "random_state": SEED,
    }

    def __init__(
        self,
        n_bits: int = 32,
        *,
        n_labeled: int = 5000,
        n_columns: int | None = None,
        max_iter: int = 10,
        alternations: int = 3,
        ridge: float = 1.0,
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.n_labeled = n_labeled
        self.n_columns = n_columns
        self.max_iter = max_iter
        self.alternations = alternations
        self.ridge = ridge
        self.random_state = random_state

    def _fit(self, X, y, checkpoint):
        rng = np.random.default_rng(self.seed_)
        Xt, labels, n = training_rows(X, y, self.n_labeled, rng, "COSDISH")
        m = check_int_param(
            self.n_bits if self.n_columns is None else self.n_columns, "n_columns", "COSDISH (|Omega|)", 1, n
        )
        q = self.n_bits
        start_seed = int(rng.integers(2**63))  # of the start codes B, random signs per row
        label_parts = label_chunks(labels, Xt)
        bounds = row_bounds(Xt)
        starts = [int(a) for a in bounds[:-1]]
        start_tasks = map_chunks("cosdish-start", _start_codes, list(zip(label_parts, starts)), start_seed, q)
        B = list(dask.persist(*start_tasks))
        path = []
        for it in steps(range(self.max_iter), f"COSDISH {self.n_bits} bits: iterations"):
            omega = np.sort(rng.choice(n, m, replace=False))
            omega_labels = _labels_at(labels, omega)
            B, sums = self._pass(B, label_parts, starts, omega, omega_labels, None, 1.0)
            weight = negative_weight(sums[3], m * n)
            share = relevance_from_labels(omega_labels, omega_labels)
            S_omega = np.where(share, 1.0, -weight)
            for _ in range(self.alternations):
                VtV, PV, ones_B, _, held, held_codes, _ = sums
                B_omega = held_codes[np.searchsorted(held, omega)].astype(np.int64)
                # sums over Gamma = all training rows minus Omega's (integers: exact)
                BtB_gamma = VtV - B_omega.T @ B_omega
                StB_gamma = similarity_product(
                    PV - share.astype(np.int64) @ B_omega, ones_B - B_omega.sum(axis=0), weight
                )
                new_omega = omega_step(B_omega, S_omega, StB_gamma, BtB_gamma, q)
                B, sums = self._pass(B, label_parts, starts, omega, omega_labels, new_omega, weight)
            path.append({"iteration": it + 1, "similarity_weight": weight})
            log.info("COSDISH %d bits: iteration %d of %d", q, it + 1, self.max_iter)
        parts = map_chunks("cosdish-regression", regression_sums, list(zip(chunk_delayeds(Xt), B, strict=True)))
        moments, XtB, column_sums = tree_reduce("cosdish-regression-sums", parts, _combine_regression).compute()
        self.mean_, self.scale_, self.components_ = linear_hash(moments, XtB, column_sums, self.ridge)
        self.n_iter_ = self.max_iter
        self.training_stats_.update({"passes": 1 + self.max_iter * (1 + self.alternations), "n_labeled": n})

    def _pass(self, B, label_parts, starts, omega, omega_labels, B_omega, weight):
        name = "cosdish-gamma" if B_omega is not None else "cosdish-sums"
        chunks = list(zip(B, label_parts, starts, strict=True))
        return update_and_reduce(
            name, cosdish_chunk_pass, chunks, add_chunk_sums, omega, omega_labels, B_omega, weight=weight
        )

    def _encode_kernel(self, block):
        return encode_linear(
            np.asarray(block, dtype=np.float64) / self.scale_, self.mean_ / self.scale_, self.components_
        )

    def _project_kernel(self, block):
        return project_linear(
            np.asarray(block, dtype=np.float64) / self.scale_, self.mean_ / self.scale_, self.components_
        )

    def _learned_arrays(self):
        return {"mean_": self.mean_, "scale_": self.scale_, "components_": self.components_}

    def _fitted_array_spec(self, n_features):
        d = n_features
        return {"mean_": (FLOAT, (d,)), "scale_": (FLOAT, (d,)), "components_": (FLOAT, (d, self.n_bits))}


def _start_codes(labels, start, seed, n_bits):
    return random_codes(seed, start, len(labels), n_bits)


def _labels_at(labels, rows):
    return np.asarray(labels[rows].compute() if hasattr(labels, "compute") else labels[rows])


def _combine_regression(a, b):
    return combine_moments(a[0], b[0]), a[1] + b[1], a[2] + b[2]
