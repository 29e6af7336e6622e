"""Affinity-based hashing optimised by the method of auxiliary coordinates (MAC;
Carreira-Perpinan & Raziperchikolaei, NIPS 2015), and the two-step methods it starts from.

The problem: over the hash function h (one linear or kernel SVM per bit), minimise an
affinity loss L(h(X)) of the codes of N training points (KSH or eSPLH, kernels/affinity.py,
on kappa+ similar and kappa- dissimilar pairs per point). MAC adds auxiliary codes Z with
the constraint Z = h(X) and minimises L(Z) + mu ||Z - h(X)||^2 while mu grows
(mu_i = mu_1 alpha^(i-1)), alternating

* h-step: fit each bit's classifier to Z's column. The paper's step minimises the
  misclassification count ||Z - h(X)||^2 through an SVM "with a high penalty for
  misclassified points"; here the SVMs' C is chosen on the validation rows from
  ``SVM_C_GRID`` (1 to 1000), once, at the two-step start (``svm_c=None``), or fixed. All
  bits are solved together by a Newton method over row blocks (kernels/svm.py, the same
  optimum as LIBLINEAR's), warm-started from the previous h, with the rows held by the
  workers and only small matrices moving (rows that fit one worker stay on one, where each
  whole solve runs as one task: distributed/row_blocks.py). ``h_step="refit"`` takes the refitted SVMs, as
  the paper does; "lower-loss" weighs the refit against the refit with each bit's previous
  SVM kept where that fits the column better and takes the one with the lower L(h(X))
  (``lower_loss_h``);
* Z-step: bit by bit, with the other bits fixed, by the quadratic surrogate (``quad``) or by
  GraphCut over blocks of points (``cut``), repeated until Z stops changing or ``z_passes``
  passes ran (kernels/zstep.py), never raising the penalised loss;

until Z = h(X) after a Z-step (then nothing can change any more) or ``max_iter`` iterations.
The start (mu -> 0+) is the two-step methods' result: free codes minimising L(Z) alone,
then h fitted to them once. With ``max_iter = 0`` that start is the answer: the ``quad``
(TSH-like) and ``cut`` (FastHash-like) baselines. The start is a deterministic function of
the training features, the affinities, the validation rows and the few parameters it uses,
so a fit whose start inputs equal those of a recent fit in this process (macquad after quad
in one evaluation, a sweep over the iteration parameters) takes that start instead of
computing it again (``TWO_STEP_STARTS``): the model is the one a fresh start gives, and the
training time still counts the start's seconds (``reused_seconds``).

Early stopping (paper Sec. 3.1): after each iteration, the precision of the new h on a
validation set (``validation_size`` rows of the training data drawn with the seed, apart
from the training points; never the test queries; half of them rank the other half) is
compared with the current one's; an iteration that lowers it is discarded (Z and h stay)
and mu moves on. With ``early_stopping="precision-and-loss"`` so is one that raises the
training loss L(h(X)), which the paper's rule alone allows; the kept h then has a loss no
higher and a validation precision no lower than the start's.

Where the work runs: the N training rows are gathered once, their hash features go to the
workers once as row blocks (every pass of the SVM solver is one task per block and a tree
sum, ``mac-h-step-*``) and the sparse affinities once (every Z-step is a task,
``mac-z-step``). Encoding is a map over
chunks: features of each row, one GEMM, signs.
"""

from __future__ import annotations

import copy
import functools
import logging
import threading
import time
from numbers import Integral, Real

import dask
import numpy as np
from dask import delayed
from dask.base import tokenize

from dask_hashcodes.distributed.graph import reduction_fan_in, select_rows
from dask_hashcodes.distributed.progress import active_client, steps
from dask_hashcodes.distributed.row_blocks import svm_blocks
from dask_hashcodes.errors import InputError, shape_words
from dask_hashcodes.hashing.base import BITS, SEED, Hasher, TrainingPlot, label_panel, labels_of_rows, report_row_label
from dask_hashcodes.hashing.constraints import Interval, Options
from dask_hashcodes.kernels.affinity import (
    LOSSES,
    Pairs,
    affinity_loss,
    affinity_shortfall,
    knn_affinities,
    label_affinities,
    label_blocks,
    neighbour_blocks,
    penalty_scale,
)
from dask_hashcodes.kernels.codes import pack_signs
from dask_hashcodes.kernels.hash_functions import (
    apply_bits,
    linear_features,
    linear_scaling,
    lower_loss_h,
    rbf_centres,
    standard_scaling,
)
from dask_hashcodes.kernels.knn import SEARCHES as KNN_SEARCHES
from dask_hashcodes.kernels.knn import knn_recall
from dask_hashcodes.kernels.l2 import l2_topk
from dask_hashcodes.kernels.ranking import relevance_from_labels, relevance_from_neighbours, signs_precision_at_k
from dask_hashcodes.kernels.rbf import rbf_features
from dask_hashcodes.kernels.zstep import CutBlocks, free_codes, z_steps
from dask_hashcodes.storage.npz import FLOAT
from dask_hashcodes.validation import check_int_param

log = logging.getLogger(__name__)

# the paper's first penalty for each Z-step solver (its Sec. 4, whatever the data)
DEFAULT_MU_START = {"cut": 0.3, "quad": 0.01}
# the SVMs' C tried on the validation rows when ``svm_c`` is None: from LIBLINEAR's default up
# to the high penalty on misclassified points the paper asks for
SVM_C_GRID = (1.0, 10.0, 100.0, 1000.0)
# the largest GraphCut block of one label's points: the max-flow's cost grows faster than
# the block, so whole classes of many thousand points dominate the Z-step, while smaller
# blocks move fewer points together and end at a higher energy; chosen on the validation
# rows between 2000 and 4000 points on Fashion-MNIST's tens of thousands of training points,
# where larger blocks would not fit the time a cluster job should take
LABEL_BLOCK_POINTS = 4000
# training points whose exact neighbours measure an approximate knn search (one exact
# search over the training points each)
KNN_RECALL_POINTS = 256


class TwoStepStarts:
    """The two-step starts of the last few fits in this process, by a token of everything a
    start depends on (``_MacRun.start_token``). A start holds the free codes, the chosen C,
    h's weights and intercepts, and what the fit records of it; its arrays are read-only, so
    no later step can change a start another fit will take."""

    def __init__(self, kept: int):
        self.kept = kept
        self._starts: dict[str, dict] = {}
        self._lock = threading.Lock()  # fits may run in several threads of one process

    def get(self, token: str) -> dict | None:
        with self._lock:
            return self._starts.get(token)

    def put(self, token: str, start: dict) -> dict:
        for value in start.values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        with self._lock:
            self._starts[token] = start
            while len(self._starts) > self.kept:
                self._starts.pop(next(iter(self._starts)))  # the oldest first
        return start

    def clear(self) -> None:
        with self._lock:
            self._starts.clear()


# an evaluation runs every method at one code length before the next, so quad's and cut's
# starts are both still held when macquad and maccut follow; a start is a few MB at most (the
# codes as int8, h's weights)
TWO_STEP_STARTS = TwoStepStarts(kept=4)


class _Shared:
    """A value the MAC tasks share: scattered once to a worker when a distributed client is
    active (``handle`` is then its Future; a graph embedding it would resend it with every
    step), else the value itself; ``token`` names it in task keys."""

    def __init__(self, value, token_of):
        self.token = tokenize(token_of)
        client = active_client()
        self.handle = value if client is None else client.scatter(value, hash=False)


class MAC(Hasher):
    """Binary hashing with auxiliary coordinates (see the module docstring).

    The scale of mu (``penalty_scale``): with the KSH loss the Z-step weighs the penalty by
    b^2, i.e. mu is measured against the normalised loss (z_n^T z_m / b - y_nm)^2. A bit's
    coefficient per pair is A_nm = 2 (s_nm - b y_nm) (s_nm: the other bits' inner product)
    summed over a point's pairs, so flipping a bit against h, which costs 4 mu, competes with
    couplings of order 10^3 - 10^4 at eq. 3's raw scale; there the paper's schedule changed
    almost no bit for many iterations. On the normalised scale MACcut ends within the paper's
    iteration range and reaches a lower training loss than its two-step start.

    The SVMs see centred, scaled features (``mean_``, ``scale_``): the linear function's
    divided by one number (their RMS norm), the kernel function's standardised feature by
    feature, which its smooth RBF features need at C = 1 (kernels/hash_functions.py).

    Learned: ``weights_`` (p, b) and ``intercepts_`` (b,) of the SVMs on the features,
    ``mean_`` and ``scale_`` of the features, and for the kernel function ``centres_`` and
    ``bandwidth_``. ``training_stats_["mac_path"]``: per iteration mu, L(Z), L(h(X)), the
    penalty mu ||Z - h(X)||^2 on the loss's scale (times ``penalty_scale``), bits changed by
    the Z-step, bits where Z != h(X), bits whose previous classifier the h-step kept,
    validation precision and whether the iteration was kept.

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    solver : {'cut', 'quad'}, default='cut'
        Z-step solver: GraphCut on blocks of points ('cut', method maccut: same-label blocks,
        or blocks grown from neighbours with knn affinities) or the quadratic surrogate
        ('quad', method macquad).
    loss : {'ksh', 'esplh'}, default='ksh'
        Pairwise loss of the codes: 'ksh' (z_n^T z_m - b y_nm)^2 or 'esplh'
        exp(-y_nm z_n^T z_m / b).
    hash_function : {'linear', 'kernel'}, default='linear'
        Hash function per bit: a linear SVM on the features, or 'kernel': a linear SVM on
        n_centres RBF features, more flexible and slower to encode.
    affinity : {'labels', 'knn'}, default='labels'
        Which pairs are similar: same class ('labels', drawn at random), or Euclidean
        neighbours among the training points ('knn': no labels needed).
    knn_search : {'exact', 'cells'}, default='exact'
        How knn affinities find the neighbours: 'exact' compares every pair (N^2 d, fine up to
        about 10^5 points); 'cells' searches nearby k-means cells only (about N^1.5 d,
        approximate; for 10^6 points and more).
    n_labeled : int, default=5000
        Training points drawn with the seed (the paper's 5000-10000); every pair cost and
        Z-step grows with it.
    n_similar : int, default=100
        Similar pairs kappa+ per training point (the paper's 100).
    n_dissimilar : int, default=500
        Dissimilar pairs kappa- per training point (the paper's 500).
    n_centres : int, default=500
        RBF centres of the kernel hash function (hash_function='kernel').
    svm_c : float or None, default=None
        C of the hash functions' SVMs. None: chosen at the two-step start among SVM_C_GRID by
        the validation precision of the h fitted to the free codes, and kept for the whole
        path (C = 1 with validation_size=0). The features are scaled to unit RMS norm, so
        C = 1 regularises firmly and C = 1000 fits the codes nearly as closely as a linear
        function can.
    h_step : {'refit', 'lower-loss'}, default='refit'
        The h-step: 'refit' the SVMs to the new codes (the paper's), or 'lower-loss': keep for
        each bit whichever of the refitted and the previous SVM gives the lower training loss.
    early_stopping : {'precision', 'precision-and-loss'}, default='precision-and-loss'
        An iteration is discarded when it lowers the validation precision ('precision', the
        paper's rule), or also when it raises the training loss ('precision-and-loss').
    mu_start : float or None, default=None
        First penalty mu_1; None: the solver's (0.3 for cut, 0.01 for quad, the paper's).
    mu_factor : float, default=1.4
        Penalty multiplier alpha per iteration (the paper's 1.4): larger values reach
        Z = h(X) in fewer iterations with less time to improve the codes.
    max_iter : int, default=40
        MAC iterations at most; 0 is the two-step method (methods cut and quad): free codes,
        then h fitted once.
    z_passes : int, default=2
        Z-step passes over the bits per iteration at most.
    start_passes : int, default=3
        Z-step passes of the mu = 0 start (the free codes) at most.
    validation_size : int, default=2000
        Training rows held out for early stopping and the choice of C (0: none), drawn after
        the training points so it does not change them. Too few rows let noise decide which
        iterate is kept.
    validation_database : {'held-out', 'training'}, default='held-out'
        What early stopping ranks the validation rows against: 'held-out' (the even-numbered
        validation rows are the queries, the odd-numbered ones a database coded as the test's
        is) or 'training' (the training points, whose codes come from SVMs fitted to them, so
        it rewards a closer fit rather than retrieval).
    block_size : int, default=100
        Rows per GraphCut block with knn affinities.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    method = "mac"
    uses_labels = True
    _parameter_constraints = {
        "n_bits": BITS,
        "solver": [Options({"cut", "quad"})],
        "loss": [Options(set(LOSSES))],
        "hash_function": [Options({"linear", "kernel"})],
        "affinity": [Options({"labels", "knn"})],
        "knn_search": [Options(set(KNN_SEARCHES))],
        "n_labeled": [Interval(Integral, 2, None, closed="left")],
        "n_similar": [Interval(Integral, 1, None, closed="left")],
        "n_dissimilar": [Interval(Integral, 1, None, closed="left")],
        "n_centres": [Interval(Integral, 1, None, closed="left")],
        "svm_c": [Interval(Real, 0, None, closed="neither"), None],
        "h_step": [Options({"refit", "lower-loss"})],
        "early_stopping": [Options({"precision", "precision-and-loss"})],
        "mu_start": [Interval(Real, 0, None, closed="neither"), None],
        "mu_factor": [Interval(Real, 1, None, closed="neither")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "z_passes": [Interval(Integral, 1, None, closed="left")],
        "start_passes": [Interval(Integral, 1, None, closed="left")],
        "validation_size": [Interval(Integral, 0, None, closed="left")],
        "validation_database": [Options({"training", "held-out"})],
        "block_size": [Interval(Integral, 1, None, closed="left")],
        "random_state": SEED,
    }

    def __init__(
        self,
        n_bits: int = 32,
        *,
        solver: str = "cut",
        loss: str = "ksh",
        hash_function: str = "linear",
        affinity: str = "labels",
        knn_search: str = "exact",
        n_labeled: int = 5000,
        n_similar: int = 100,
        n_dissimilar: int = 500,
        n_centres: int = 500,
        svm_c: float | None = None,
        h_step: str = "refit",
        early_stopping: str = "precision-and-loss",
        mu_start: float | None = None,
        mu_factor: float = 1.4,
        max_iter: int = 40,
        z_passes: int = 2,
        start_passes: int = 3,
        validation_size: int = 2000,
        validation_database: str = "held-out",
        block_size: int = 100,
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.solver = solver
        self.loss = loss
        self.hash_function = hash_function
        self.affinity = affinity
        self.knn_search = knn_search
        self.n_labeled = n_labeled
        self.n_similar = n_similar
        self.n_dissimilar = n_dissimilar
        self.n_centres = n_centres
        self.svm_c = svm_c
        self.h_step = h_step
        self.early_stopping = early_stopping
        self.mu_start = mu_start
        self.mu_factor = mu_factor
        self.max_iter = max_iter
        self.z_passes = z_passes
        self.start_passes = start_passes
        self.validation_size = validation_size
        self.validation_database = validation_database
        self.block_size = block_size
        self.random_state = random_state

    # ---------------------------------------------------------------- fit -------------
    @property
    def _name(self) -> str:
        return f"{type(self).__name__} ({self.solver}, {self.hash_function} h)"

    def _training_labels(self, y, n: int, rows: np.ndarray) -> np.ndarray:
        labels = labels_of_rows(
            y,
            n,
            rows,
            f"{self._name} with label affinities",
            "use `affinity='knn'` for affinities from Euclidean neighbours",
        )
        if labels.ndim != 1:
            raise InputError(
                f"{self._name}: label affinities need one class per point, got labels of {labels.ndim} dimensions ({shape_words(labels.shape)}); "
                "use `affinity='knn'` for multi-label data"
            )
        return labels

    def _affinities(self, Xt, labels, rng):
        """(Y, GraphCut blocks, relevance of the validation rows' neighbours getter)."""
        if self.affinity == "labels":
            shortfall = affinity_shortfall(labels, self.n_similar, self.n_dissimilar)
            if shortfall:
                raise InputError(
                    f"{self._name}: {shortfall}; lower kappa (`n_similar`/`n_dissimilar`) or train on more "
                    "points (`n_labeled`)"
                )
            Y = label_affinities(labels, self.n_similar, self.n_dissimilar, rng)
            return Y, label_blocks(labels, LABEL_BLOCK_POINTS)
        if len(Xt) <= self.n_similar + self.n_dissimilar:
            raise InputError(
                f"{self._name}: {len(Xt)} training points cannot give each kappa+ + kappa- = "
                f"{self.n_similar + self.n_dissimilar} others; lower kappa or train on more points (`n_labeled`)"
            )
        Y = knn_affinities(Xt, self.n_similar, self.n_dissimilar, rng, self.knn_search)
        if self.knn_search == "cells":  # approximate: how many true neighbours the pairs hold
            self.training_stats_["knn_recall"] = self._neighbour_recall(Xt, Y)
        return Y, neighbour_blocks(Y, self.block_size, rng)

    def _neighbour_recall(self, Xt, Y) -> float:
        """Recall of the exact neighbours among the similar pairs of KNN_RECALL_POINTS
        training points (drawn with a generator of their own: the fit's draws do not depend
        on it)."""
        rows = np.sort(
            np.random.default_rng([self.seed_, 1]).choice(len(Xt), min(len(Xt), KNN_RECALL_POINTS), replace=False)
        )
        found = np.stack(
            [Y.indices[Y.indptr[i] : Y.indptr[i + 1]][Y.data[Y.indptr[i] : Y.indptr[i + 1]] > 0] for i in rows]
        )
        return knn_recall(Xt, rows, found)

    def _validation_relevance(self, X_base, X_queries, base_labels, query_labels):
        if self.affinity == "labels":
            return relevance_from_labels(query_labels, base_labels)
        ids = np.arange(len(X_base), dtype=np.int64)
        _, neighbours = l2_topk(X_base, ids, queries=X_queries, k=self.n_similar)
        return relevance_from_neighbours(neighbours, ids)

    def _validation_set(self, F, Xt, Xv, labels, yv):
        """(query features, database features, relevance) of early stopping's retrieval:
        the even-numbered validation rows against the odd-numbered ones, which no SVM was
        fitted to (``held-out``), or the validation rows against the training points."""
        if not len(Xv):
            return None, None, None
        if self.validation_database == "training":
            return self.hash_features(Xv), F, self._validation_relevance(Xt, Xv, labels, yv)
        Xq, Xb = Xv[0::2], Xv[1::2]  # the rows are a random draw: alternate ones split it at random
        yq, yb = (None, None) if yv is None else (yv[0::2], yv[1::2])
        return self.hash_features(Xq), self.hash_features(Xb), self._validation_relevance(Xb, Xq, yb, yq)

    def _set_features(self, Xt, rng) -> np.ndarray:
        """Learn the feature map (kernel: centres and bandwidth; then the mean and scale of the
        training features) and return the training features."""
        if self.hash_function == "kernel":
            p = check_int_param(self.n_centres, "n_centres", self._name, 1, len(Xt))
            self.centres_, self.bandwidth_ = rbf_centres(Xt, p, rng)
            raw = rbf_features(Xt, self.centres_, self.bandwidth_)
            self.mean_, self.scale_ = standard_scaling(raw)
            return linear_features(raw, self.mean_, self.scale_)
        self.mean_, self.scale_ = linear_scaling(Xt)
        F = self.hash_features(Xt)
        rank = int(np.linalg.matrix_rank(F))
        if self.n_bits > rank:
            raise InputError(
                f"{self._name}: {self.n_bits} bits exceed the rank {rank} of the {len(Xt)} training points' centred "
                f"features, so linear bits would repeat; use at most {rank} bits or "
                "`hash_function='kernel'`"
            )
        return F

    def hash_features(self, X) -> np.ndarray:
        """The features the per-bit SVMs see."""
        if self.hash_function == "kernel":
            X = rbf_features(X, self.centres_, self.bandwidth_)
        return linear_features(X, self.mean_, self.scale_)

    def _fit(self, X, y, checkpoint):
        n = X.shape[0]
        n_val = self.validation_size
        n_train = check_int_param(self.n_labeled, "n_labeled", f"{self._name} (training points)", 2, n)
        if n_train + n_val > n:
            raise InputError(
                f"{self._name}: {n_train} training + {n_val} validation rows exceed the {n} rows of the data; "
                "lower `n_labeled` or `validation_size`"
            )
        if self.validation_database == "held-out" and n_val == 1:
            raise InputError(
                f"{self._name}: a held-out validation database needs at least 2 validation rows (queries and "
                "database), got 1; raise `validation_size` or set it to 0"
            )
        rng = np.random.default_rng(self.seed_)
        train, val = _draw_rows(rng, n, n_train, n_val)
        rows = np.union1d(train, val)  # one gather for both sets, then each set's rows by position
        gathered = np.asarray(select_rows(X, rows, keep=True).compute(), dtype=np.float64)
        Xt, Xv = gathered[np.searchsorted(rows, train)], gathered[np.searchsorted(rows, val)]
        labels = yv = None
        if self.affinity == "labels":
            labels = self._training_labels(y, n, train)
            yv = self._training_labels(y, n, val)
        started = time.perf_counter()
        Y, blocks = self._affinities(Xt, labels, rng)
        pairs = Pairs(Y)
        self.training_stats_["affinity_seconds"] = round(time.perf_counter() - started, 4)
        F = self._set_features(Xt, rng)
        validation = self._validation_set(F, Xt, Xv, labels, yv)

        # the GraphCut plan (each block's pairs) is found once and sent to the Z-step's worker
        # once (none for the quadratic surrogate, which has no blocks)
        plan = CutBlocks(pairs.indptr, pairs.indices, blocks if self.solver == "cut" else [])
        shared = {"affinities": _Shared(pairs, Y), "blocks": _Shared(plan, (plan.members, plan.member_ptr))}
        run = _MacRun(self, F, validation, pairs, shared)
        try:
            run.optimise()
        finally:
            run.release()
        self.weights_, self.intercepts_ = run.W, run.c
        self.n_iter_ = len(run.stats["mac_path"])  # the two-step start counts as the first
        self.training_stats_.update(run.stats)
        self.training_stats_.update({"passes": 1, "n_labeled": n_train, "n_validation": n_val, "n_blocks": len(blocks)})

    # ---------------------------------------------------------------- encode ----------
    def _encode_kernel(self, block):
        return pack_signs(self._project_kernel(block))

    def _project_kernel(self, block):
        return self.hash_features(block) @ self.weights_ + self.intercepts_

    def _learned_arrays(self):
        arrays = {"weights_": self.weights_, "intercepts_": self.intercepts_}
        arrays.update({"mean_": self.mean_, "scale_": np.asarray(self.scale_, dtype=np.float64)})
        if self.hash_function == "kernel":
            arrays.update({"centres_": self.centres_, "bandwidth_": np.float64(self.bandwidth_)})
        return arrays

    def _fitted_array_spec(self, n_features):
        r = self.n_bits
        if self.hash_function == "linear":  # one scale for all features
            p, scale, kernel = n_features, (), {}
        else:  # a fit refuses fewer training points than centres: exactly n_centres, each standardised
            p, scale = self.n_centres, (self.n_centres,)
            kernel = {"centres_": (FLOAT, (p, n_features)), "bandwidth_": (FLOAT, ())}
        return {
            "weights_": (FLOAT, (p, r)),
            "intercepts_": (FLOAT, (r,)),
            "mean_": (FLOAT, (p,)),
            "scale_": (FLOAT, scale),
            **kernel,
        }

    def _set_learned_arrays(self, arrays, where="the learned arrays"):
        super()._set_learned_arrays(arrays, where)
        for name in ("bandwidth_", "scale_"):
            if name in arrays and np.ndim(arrays[name]) == 0:  # the kernel function's scale_ is per feature
                setattr(self, name, float(arrays[name]))

    @classmethod
    def training_plot(cls, row: dict):
        """MAC's path (``training_stats_["mac_path"]``) when the fit ran iterations beyond
        its two-step start (the two-step methods cut and quad record only the start)."""
        steps = row["training"].get("mac_path")
        return MAC_PLOT if isinstance(steps, list) and len(steps) > 1 else None


def _draw_training(rows: list, axes: list) -> None:
    """MAC per iteration: L(h(X)) of the hash function kept so far (solid; discarded candidates
    as x), L(Z) of the auxiliary codes (dotted), both relative to the two-step start; the
    validation precision of the kept function (discarded candidates as x)."""
    loss_ax, precision_ax = axes
    for r in rows:
        label = report_row_label(r)
        steps = r["training"]["mac_path"]
        start = steps[0]["loss_h"]
        kept_loss, kept_precision, current = [], [], (start, steps[0].get("validation_precision"))
        for e in steps:
            if e.get("kept", True):
                current = (e["loss_h"], e.get("validation_precision", current[1]) or current[1])
            kept_loss.append(current[0] / start)
            kept_precision.append(current[1])
        it = [e["iteration"] for e in steps]
        line = loss_ax.plot(it, kept_loss, marker=".", label=f"{label} L(h(X))")[0]
        colour = line.get_color()
        loss_ax.plot(it, [e["loss_z"] / start for e in steps], ls=":", color=colour, label=f"{label} L(Z)")
        dropped = [e for e in steps if not e.get("kept", True)]
        loss_ax.plot([e["iteration"] for e in dropped], [e["loss_h"] / start for e in dropped], "x", color=colour)
        if kept_precision[0] is not None:
            precision_ax.plot(it, kept_precision, marker=".", color=colour, label=label)
            precision_ax.plot(
                [e["iteration"] for e in dropped], [e["validation_precision"] for e in dropped], "x", color=colour
            )
    label_panel(loss_ax, "MAC iteration (0: two-step start)", "loss / L(h(X)) of the start", "MAC loss")
    label_panel(precision_ax, "MAC iteration (x: discarded)", "validation precision", "early stopping")


MAC_PLOT = TrainingPlot(2, _draw_training)


def _draw_rows(rng, n: int, n_train: int, n_val: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted training and validation rows, disjoint. The training rows are drawn first, so
    they do not depend on the validation size: MAC with any validation set and its two-step
    baseline (no validation) learn from the same points."""
    train = rng.choice(n, n_train, replace=False)
    # from a generator of its own, so that rng's later draws (affinities, centres) do not
    # depend on n_val either; n_train + n_val distinct candidates hold n_val rows outside train
    candidates = np.random.default_rng(rng.integers(2**63)).choice(n, n_train + n_val, replace=False)
    val = candidates[~np.isin(candidates, train)][:n_val]
    return np.sort(train), np.sort(val)


class _MacRun:
    """One MAC optimisation: the state (Z, W, c, H = h(X)) and its Dask steps. Holds no math:
    the steps are kernels/zstep.py and kernels/hash_functions.py."""

    def __init__(self, model: MAC, F, validation, Y, on_cluster):
        self.model, self.F, self.Y = model, F, Y
        self.Fv, self.F_base, self.relevant = validation  # early stopping's queries, database, relevance
        self.cluster = on_cluster
        self.mu_scale = penalty_scale(model.loss, model.n_bits)
        self.stats: dict = {"mac_path": [], "svm_passes": 0}
        C = SVM_C_GRID[0] if model.svm_c is None else model.svm_c
        # the rows go to the workers once; each solve then sends only codes and weights
        self.svm = svm_blocks("mac-h-step", F, C)

    def release(self) -> None:
        self.svm.release()

    def free_codes(self):
        m = self.model
        affinities = self.cluster["affinities"]
        blocks = self.cluster["blocks"]
        key = f"mac-z-step-{tokenize('free', affinities.token, blocks.token, m.loss, m.n_bits, m.solver)}"
        task = delayed(free_codes, pure=True)(
            m.loss, affinities.handle, m.n_bits, m.solver, blocks.handle, m.start_passes, dask_key_name=key
        )
        return dask.compute(task)[0]

    def z_step(self, Z, mu):
        m = self.model
        affinities = self.cluster["affinities"]
        blocks = self.cluster["blocks"]
        key = f"mac-z-step-{tokenize(affinities.token, blocks.token, m.loss, Z, mu, self.H, m.solver)}"
        # codes travel in the graph as int8: an eighth of float64's bytes
        task = delayed(z_steps, pure=True)(
            m.loss,
            Z.astype(np.int8),
            affinities.handle,
            mu * self.mu_scale,
            self.H.astype(np.int8),
            m.solver,
            blocks.handle,
            m.z_passes,
            dask_key_name=key,
        )
        return dask.compute(task)[0]

    def h_step(self, Z, start=None):
        """(W, c): every bit's SVM fitted to Z's column, all bits in one Newton solve whose
        passes over the rows run where the row blocks are (``start``: warm-start (W, c))."""
        W0 = None if start is None else np.vstack([start[0], start[1][None, :]])
        W, stats = self.svm.solve(Z, start=W0)
        self.stats["svm_passes"] += stats["passes"]
        return W[:-1], W[-1]

    def choose_svm_c(self, Z):
        """The h of the two-step start: SVMs fitted to the free codes Z at ``svm_c``, or at each
        C of ``SVM_C_GRID`` (ascending, each solve warm-started from the previous one) keeping
        the C whose h ranks the validation rows best (the smallest on a tie); without
        validation rows, LIBLINEAR's default C = 1. Returns (W, c, validation precision)."""
        if self.model.svm_c is not None or self.Fv is None:  # fixed, or no validation rows: C = 1
            self.stats["svm_c"] = self.svm.C
            W, c = self.h_step(Z)
            return W, c, self.precision(W, c)
        tried, best, start = {}, None, None
        for C in SVM_C_GRID:
            self.svm.C = C
            start = self.h_step(Z, start)
            tried[f"{C:g}"] = precision = self.precision(*start)
            if best is None or precision > best[0]:
                best = (precision, C, start)
        self.svm.C = best[1]
        self.stats.update(svm_c=best[1], svm_c_validation_precision=tried)
        return (*best[2], best[0])

    def choose_h(self, Z, W, c):
        """The h-step's result from the refit SVMs (W, c): (W, c, H, L(h(X)), bits with their
        previous SVM, L(h(X)) of the refit). ``h_step="refit"`` takes the refit, as the paper
        does; "lower-loss" takes ``lower_loss_h``'s choice."""
        H = apply_bits(self.F, W, c)
        loss_of = functools.partial(affinity_loss, self.model.loss, Y=self.Y)
        if self.model.h_step == "refit":
            loss = loss_of(H)
            return W, c, H, loss, 0, loss
        return lower_loss_h(Z, (W, c, H), (self.W, self.c, self.H), loss_of)

    def precision(self, W, c) -> float | None:
        if self.Fv is None:
            return None
        k = self.model.n_similar
        return signs_precision_at_k(apply_bits(self.Fv, W, c), apply_bits(self.F_base, W, c), self.relevant, k)

    def record(self, **entry):
        self.stats["mac_path"].append(entry)
        log.info("%s %d bits: %s", self.model._name, self.model.n_bits, entry)

    def start_token(self) -> str:
        """Everything the two-step start depends on: the training features, the affinities and
        the GraphCut blocks, the validation rows and their relevance, the parameters the start
        uses, C's grid and how the SVM solves sum over the rows."""
        m = self.model
        pairs = self.Y  # by its arrays: dask's token of a sparse matrix can differ between equal copies
        return tokenize(
            self.F,
            (pairs.shape, pairs.indptr, pairs.indices, pairs.kind),
            self.cluster["blocks"].token,
            self.Fv,
            self.F_base,
            self.relevant,
            (m.loss, m.n_bits, m.solver, m.start_passes, m.svm_c, m.n_similar),
            SVM_C_GRID,
            # where the SVM solves run and the fan-in of their sums, which set the summation order
            (type(self.svm).__name__, reduction_fan_in()),
        )

    def two_step_start(self) -> dict:
        """Free codes, then h fitted to them once (choosing C), with what the fit records."""
        started = time.perf_counter()
        svm_passes = self.stats["svm_passes"]
        Z, passes = self.free_codes()
        z_seconds = time.perf_counter() - started
        started = time.perf_counter()
        W, c, best = self.choose_svm_c(Z)
        h_seconds = time.perf_counter() - started
        chosen = {k: self.stats[k] for k in ("svm_c", "svm_c_validation_precision") if k in self.stats}
        return {
            "Z": Z.astype(np.int8),  # the codes are +-1: an eighth of the bytes, restored exactly
            "Z_dtype": Z.dtype,
            "W": W,
            "c": c,
            "best": best,
            "C": self.svm.C,
            "chosen": chosen,
            "svm_passes": self.stats["svm_passes"] - svm_passes,
            "z_passes": passes,
            "z_seconds": z_seconds,
            "h_seconds": h_seconds,
        }

    def optimise(self):
        m = self.model
        loss = m.loss
        token = self.start_token()
        start = TWO_STEP_STARTS.get(token)
        self.stats["start_reused"] = start is not None
        if start is None:
            start = TWO_STEP_STARTS.put(token, self.two_step_start())
        else:  # the very start a fresh computation gives (module docstring); its work is counted
            self.svm.C = start["C"]
            self.stats.update(copy.deepcopy(start["chosen"]))
            self.stats["svm_passes"] += start["svm_passes"]
            self.stats["reused_seconds"] = round(start["z_seconds"] + start["h_seconds"], 4)
        # copies: the fit's arrays (a two-step model's weights) never share the kept start's
        Z, best = start["Z"].astype(start["Z_dtype"]), start["best"]
        self.W, self.c = start["W"].copy(), start["c"].copy()
        self.H = apply_bits(self.F, self.W, self.c)
        self.loss_h = affinity_loss(loss, self.H, self.Y)
        self.stats["free_codes_loss"] = affinity_loss(loss, Z, self.Y)
        self.record(
            iteration=0,
            mu=0.0,
            loss_z=self.stats["free_codes_loss"],
            loss_h=self.loss_h,
            penalty=0.0,
            bits_changed=int(Z.size),
            mismatch=int((Z != self.H).sum()),
            validation_precision=best,
            kept=True,
            z_passes=start["z_passes"],
            z_seconds=round(start["z_seconds"], 3),
            h_seconds=round(start["h_seconds"], 3),
        )
        mu_start = m.mu_start if m.mu_start is not None else DEFAULT_MU_START[m.solver]
        self.stats["stopped"] = "two-step" if m.max_iter == 0 else "max_iter"
        rejected = None  # the last discarded (Z, h-step result)
        for i in steps(range(1, m.max_iter + 1), f"{m._name} {m.n_bits} bits: iterations"):
            mu = mu_start * m.mu_factor ** (i - 1)
            started = time.perf_counter()
            new, passes = self.z_step(Z, mu)
            z_seconds = time.perf_counter() - started
            changed = int((new != Z).sum())
            entry = {
                "iteration": i,
                "mu": mu,
                "loss_z": affinity_loss(loss, new, self.Y),
                "penalty": mu * self.mu_scale * float(((new - self.H) ** 2).sum()),
                "bits_changed": changed,
                "z_passes": passes,
                "z_seconds": round(z_seconds, 3),
            }
            if np.array_equal(new, self.H):  # the constraints hold: no step can change anything
                self.record(**entry, loss_h=self.loss_h, mismatch=0, kept=True)
                self.stats["stopped"] = "Z = h(X)"
                break
            if changed == 0:  # h would be refitted to the same Z: the same h (the fits are deterministic)
                self.record(**entry, loss_h=self.loss_h, mismatch=int((new != self.H).sum()), kept=True)
                continue
            started = time.perf_counter()
            if rejected is not None and np.array_equal(new, rejected[0]):
                # the Z-step repeated a discarded step (Z and h unchanged, a larger mu): so
                # would the h-step, as its fits are deterministic
                W, c, H, loss_h, precision, previous_bits, loss_h_refit = rejected[1]
            else:
                W, c, H, loss_h, previous_bits, loss_h_refit = self.choose_h(new, *self.h_step(new, (self.W, self.c)))
                precision = self.precision(W, c)
            # kept when it does not raise MAC's objective L(h(X)) nor lower the validation precision
            kept = (best is None or precision >= best) and (m.early_stopping == "precision" or loss_h <= self.loss_h)
            self.record(
                **entry,
                h_seconds=round(time.perf_counter() - started, 3),
                loss_h=loss_h,
                loss_h_refit=loss_h_refit,
                mismatch=int((new != H).sum()),
                bits_with_previous_h=previous_bits,
                validation_precision=precision,
                kept=kept,
            )
            if kept:
                Z, self.W, self.c, self.H, self.loss_h, best = new, W, c, H, loss_h, precision
                rejected = None
            else:
                rejected = (new, (W, c, H, loss_h, precision, previous_bits, loss_h_refit))
        self.stats["loss"] = self.loss_h
        self.stats["validation_precision"] = best
