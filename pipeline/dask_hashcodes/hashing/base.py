"""Estimator base: the scikit-learn contract, encode on numpy or dask, save/load without pickle.

``__init__`` only stores parameters (keyword-only after ``n_bits``); ``fit`` validates them
against ``_parameter_constraints`` and learns on a fresh copy of the estimator, so learned
attributes (ending in ``_``) appear only after a fit has succeeded: a failed refit leaves the
previous fitted state as it was. A fitted hasher is small (a mean and a d x r matrix for the
linear family), so it travels to every worker.

``transform(X)`` gives the bits unpacked, one uint8 column per bit with values {0, 1} (bit
j = 1 where projection j is >= 0), so hashers compose with scikit-learn pipelines;
``encode(X)`` gives the same bits packed 8 per byte (FAISS's layout), what is stored and
searched.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import validate_data
from threadpoolctl import threadpool_limits

from dask_hashcodes import __version__
from dask_hashcodes.distributed.graph import as_dask, is_dask_array
from dask_hashcodes.distributed.resident import kept_on_workers
from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing.checkpoint import Checkpoint, CheckpointTarget, data_fingerprint
from dask_hashcodes.hashing.constraints import Interval, validate_params
from dask_hashcodes.kernels.codes import unpack_bits
from dask_hashcodes.storage.atomic import atomic_output
from dask_hashcodes.storage.jsonio import dumps
from dask_hashcodes.storage.location import resolve
from dask_hashcodes.storage.npz import check_arrays, npz_bytes
from dask_hashcodes.validation import check_features_array, check_finite_block

MODEL_SCHEMA = "dhash.model/1"
ARRAYS_FILE = "arrays.npz"
MODEL_FILE = "model.json"
MODEL_REMEDY = "re-train it with `dhash train`"

SEED = [Interval(Integral, 0, None, closed="left"), None]  # random_state: a seed, or None for fresh entropy
BITS = [Interval(Integral, 1, None, closed="left")]


class NotFitted(InputError, NotFittedError):
    """encode/transform/save before fit: scikit-learn's error type, and a one-line InputError."""


def resolve_seed(random_state) -> int:
    """The integer seed of a fit: ``random_state`` itself, or fresh entropy for None (resolved
    once per fit, kept as ``seed_`` so every later step of the fit draws from the same seed)."""
    if random_state is None:
        return int(np.random.SeedSequence().generate_state(1)[0])
    return int(random_state)


def _validated(estimator, X, what: str, **kwargs):
    """scikit-learn's input validation of a non-dask X (array-likes, DataFrames, object
    arrays of numbers; refuses sparse and complex input; records ``n_features_in_`` and
    feature names), then our checks; its errors become one-line InputErrors."""
    dtype = getattr(X, "dtype", None)
    if dtype is not None and dtype.kind in "USV":
        check_features_array(X, what)  # names the dtype and the fix
    try:
        X = validate_data(estimator, X, dtype="numeric", ensure_all_finite=False, **kwargs)
    except ValueError as exc:
        raise InputError(f"{what}: {exc}") from None
    return check_features_array(X, what)


def _computable(block: np.ndarray) -> np.ndarray:
    """float16 rows as float32: the compiled kernels have no half-precision arithmetic, and
    every float16 value is exactly a float32 one, so the codes are those of the same values."""
    return block.astype(np.float32) if block.dtype == np.float16 else block


def labels_of_rows(y, n: int, rows: np.ndarray, who: str, unlabeled_remedy: str) -> np.ndarray:
    """The labels of training rows ``rows`` from ``y`` (numpy or dask, one label or multi-hot
    row per training row), with one-line errors when y is missing or of the wrong length."""
    if y is None:
        raise InputError(
            f"{who} requires y to be passed, but the target y is None (the data has no labels); pass fit(X, y), "
            f"evaluate a labelled dataset, or {unlabeled_remedy}"
        )
    if y.shape[0] != n:
        raise InputError(f"{who}: got {y.shape[0]} labels for {n} training rows; pass one label per row")
    return np.asarray(y[rows].compute() if is_dask_array(y) else y[rows])


def label_chunks(y, X) -> list:
    """The labels (numpy or dask, one label or multi-hot row per row of the dask array X) cut
    like X's row chunks, persisted: one Delayed per chunk, kept on the workers."""
    import dask
    from dask import delayed

    from dask_hashcodes.distributed.graph import row_bounds

    if is_dask_array(y):
        parts = y.rechunk({0: X.chunks[0], **({1: -1} if y.ndim == 2 else {})}).to_delayed().ravel().tolist()
    else:
        bounds = row_bounds(X)
        parts = [delayed(y[a:b], pure=True) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return list(dask.persist(*parts))


@dataclass(frozen=True)
class Scored:
    """One report row of the evaluation protocol, as an estimator's ``evaluation_results``
    hook gives it: the metrics and timing of one way of encoding; ``variant`` names that way
    in the row's label (``"method (variant)"``; None: the method's plain row), ``extras`` are
    further entries of the row (e.g. the spread over several runs that were averaged)."""

    metrics: dict
    timing: dict
    variant: str | None = None
    extras: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TrainingPlot:
    """A group of panels in a report's ``training.png``. Every report row whose estimator
    names this plot (``Hasher.training_plot``) is drawn on the same ``n_axes`` axes, so bit
    lengths and variants of one method are compared in one place. ``draw(rows, axes)`` gets
    those report rows (dicts; their ``training`` entry holds the fit's ``training_stats_``)
    and a list of ``n_axes`` matplotlib axes; it draws from the rows alone, so a report is
    plotted the same from a live evaluation or from its stored report.json."""

    n_axes: int
    draw: Callable[[list, list], None]


def report_row_label(row: dict) -> str:
    """A report row's legend entry in training plots: its label (or method) and bit length."""
    return f"{row.get('label', row['method'])} {row['n_bits']}b"


def draw_objective(
    rows: list, ax, title="training objective", xlabel="iteration", ylabel="objective / first value"
) -> None:
    """Each row's objective per iteration (``training["objective"]``), relative to its first
    value, so fits of different bit lengths and data scales share one axis."""
    for r in rows:
        obj = np.asarray(r["training"]["objective"])
        ax.plot(np.arange(1, len(obj) + 1), obj / obj[0], marker=".", label=report_row_label(r))
    label_panel(ax, xlabel, ylabel, title)


def label_panel(ax, xlabel: str, ylabel: str, title: str) -> None:
    """A training-plot panel's labels, grid and legend, alike on every method's panels."""
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


# the default training plot: iterative fits that record their objective per iteration
OBJECTIVE_PLOT = TrainingPlot(1, lambda rows, axes: draw_objective(rows, axes[0]))


class Hasher(TransformerMixin, BaseEstimator):
    """Base class of every hash-function learner."""

    method: str = ""  # registry name, e.g. "itq"
    linear_pca_based = False  # n_bits <= n_features for PCA-based methods
    uses_labels = False  # semi-supervised: fit(X, y) with one label per training row
    supports_checkpoint = False  # iterative fits that save their state after every iteration
    # fits that pass over the training rows again and again (an iteration, a bit, a step at a
    # time): ``fit`` first keeps the rows on the workers (distributed.resident), so that every
    # pass after the first reads memory, not storage
    passes_over_rows_repeatedly = False
    learns_database_codes = False  # asymmetric: the training rows' codes are learned (database_codes_)
    _parameter_constraints: dict = {"n_bits": BITS}

    def _validate_params(self):
        """Refuse a parameter value its ``_parameter_constraints`` do not accept (an
        InvalidParameter, one line); run by ``fit`` before any work and by ``load_model``."""
        validate_params(type(self).__name__, self._parameter_constraints, self.get_params(deep=False))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = []  # bits, whatever the input dtype
        tags.target_tags.required = self.uses_labels
        return tags

    # ---------------------------------------------------------------- fit -------------
    def fit(self, X, y=None, *, checkpoint=None):
        """Learn the hash functions from X (numpy or dask, rows = points). ``y``: one label
        (or multi-hot row) per row, used by semi-supervised methods and DisH's by-label
        partition, ignored by the others. ``checkpoint``: a directory (path or URL) for the
        per-iteration state of iterative methods (``supports_checkpoint``), or a
        ``CheckpointTarget`` that also names the dataset the rows come from; a checkpoint of
        the same run there is resumed."""

        started = time.perf_counter()
        self._validate_params()
        learner = self._unfitted_copy()
        X = learner._training_input(X)
        if "random_state" in self.get_params():
            learner.seed_ = resolve_seed(self.random_state)
        learner.training_stats_ = {"n_train": int(X.shape[0]), "n_chunks": int(X.numblocks[0])}
        learner.dataset_ = {}
        if y is not None and not is_dask_array(y):
            y = np.asarray(y)
        if learner.passes_over_rows_repeatedly:
            X = kept_on_workers(X, f"{learner.method} training")
        # The client's share of a fit (eigendecompositions, SVDs and rotations of d x d or
        # smaller matrices) on one BLAS thread: more threads gain little on matrices this
        # size, and between calls OpenBLAS's idle threads spin on the cores the workers
        # compute on (a local cluster's workers hold one BLAS thread per worker thread).
        with threadpool_limits(limits=1, user_api="blas"):
            learner._fit(X, learner.labels_for_fit(y), checkpoint)
        # work taken from an earlier fit instead of done again (MAC's two-step start) still
        # counts: a model's training time does not depend on what this process fitted before
        reused = learner.training_stats_.get("reused_seconds", 0.0)
        learner.training_stats_["train_seconds"] = round(time.perf_counter() - started + reused, 4)
        self._take_learned_state(learner)
        return self

    def _learned_names(self) -> list[str]:
        return [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]

    def _unfitted_copy(self):
        learner = copy.copy(self)
        for name in learner._learned_names():
            delattr(learner, name)
        return learner

    def _take_learned_state(self, learner) -> None:
        for name in self._learned_names():
            delattr(self, name)
        for name in learner._learned_names():
            setattr(self, name, getattr(learner, name))

    def _training_input(self, X):
        """Checked training features as a dask array; sets ``n_features_in_``."""

        if is_dask_array(X):
            X = check_features_array(X, "training features")
            self.n_features_in_ = int(X.shape[1])
        else:
            X = _validated(self, X, "training features", ensure_min_samples=2)
            check_finite_block(X, what="training features")
        d = X.shape[1]
        if self.linear_pca_based and self.n_bits > d:
            raise InputError(
                f"The 'n_bits' parameter of {type(self).__name__} must be at most the number of features "
                f"(n_features = {d}) because its bits are principal directions. Got {self.n_bits} instead; "
                "use lsh for longer codes."
            )
        return as_dask(X)

    def labels_for_fit(self, y):
        """The labels ``fit`` uses from a dataset's label array (one row per training row):
        semi-supervised methods take them, others none (DisH: 1-D only, see there)."""
        return y if self.uses_labels else None

    def _checkpoint(self, X, target, spec: dict):
        """(Checkpoint or None, saved state or None) for this fit; call after ``mean_`` is set.
        ``target``: a path or a ``CheckpointTarget``; ``spec``: the arrays the fit saves in
        it (``dask_hashcodes.storage.npz.check_arrays``), so a resumed state has exactly those."""

        if target is None:
            return None, None
        if not isinstance(target, CheckpointTarget):
            target = CheckpointTarget(resolve(target))
        ckpt = Checkpoint(target.path, data_fingerprint(self, X, self.mean_, target.identity))
        return ckpt, ckpt.load(spec)

    def _fit(self, X, y, checkpoint):  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_fitted(self):
        if not hasattr(self, "n_features_in_"):
            raise NotFitted(f"this {type(self).__name__} is not fitted yet; call fit(X) or load a trained model")

    # ---------------------------------------------------------------- encode ----------
    @property
    def code_size(self) -> int:
        return (self.n_bits + 7) // 8

    def _check_encode_input(self, X):

        self._check_fitted()
        if is_dask_array(X):
            X = check_features_array(X, "features to encode")
        else:
            X = _validated(self, X, "features to encode", reset=False)
        if X.shape[1] != self.n_features_in_:
            raise InputError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input; encode data of the training dimensionality "
                "or retrain"
            )
        return X

    def encode(self, X):
        """Packed uint8 codes (n, ceil(n_bits/8)); lazy dask array for dask input."""
        X = self._check_encode_input(X)
        if isinstance(X, np.ndarray):
            return self._encode_block(X)
        from dask.base import tokenize

        return X.map_blocks(
            self._encode_block,
            dtype=np.uint8,
            chunks=(X.chunks[0], (self.code_size,)),
            token=f"{self.method}-encode",
            name=f"{self.method}-encode-{tokenize(X, self.model_id)}",
        )

    def transform(self, X):
        """The bits unpacked: uint8 (n, n_bits) of {0, 1}; lazy dask array for dask input."""
        codes = self.encode(X)
        if isinstance(codes, np.ndarray):
            return unpack_bits(codes, self.n_bits)
        return codes.map_blocks(unpack_bits, self.n_bits, dtype=np.uint8, chunks=(codes.chunks[0], (self.n_bits,)))

    def project(self, X: np.ndarray) -> np.ndarray:
        """Real projections (n, n_bits) whose signs (>= 0: bit 1) are the codes' bits, for
        asymmetric distances between unbinarised queries and database codes; numpy input
        (query batches). Methods whose bits are not signs of one projection refuse."""
        X = self._check_encode_input(X)
        if is_dask_array(X):
            raise InputError("project takes a numpy array of queries; compute the query rows first")
        if type(self)._project_kernel is Hasher._project_kernel:
            raise InputError(
                f"{self.method}'s bits are not the signs of real projections, so asymmetric distances do not "
                "apply; re-rank with exact distances (`rerank='exact'`)"
            )
        check_finite_block(X, what="features to project")
        return self._project_kernel(_computable(X))

    def _project_kernel(self, block):  # the projections behind the bits, where there are such
        raise NotImplementedError

    def _encode_block(self, block: np.ndarray) -> np.ndarray:
        check_finite_block(block, what="features to encode")
        return self._encode_kernel(_computable(block))

    def _encode_kernel(self, block):  # pragma: no cover - abstract
        raise NotImplementedError

    # ---------------------------------------------------------------- evaluation ------
    # Method-specific behaviour of the evaluation and of reports lives in these hooks, so the
    # generic layers (dask_hashcodes.evaluation, dask_hashcodes.workflows) never test which method they run.

    # Evaluation options this method takes (``dask_hashcodes.workflows.evaluate(evaluation_options=...)``),
    # each with what a report's protocol records when it is not given.
    evaluation_options: dict = {}
    # Parameters the evaluation protocol sets itself while scoring (``evaluation_results``), so
    # the evaluation commands do not take them; training does.
    evaluation_sets: tuple = ()

    def evaluation_results(self, scorer, options: dict) -> list[Scored]:
        """How the evaluation protocol scores this fitted model: one ``Scored`` per report row.

        ``scorer`` is the protocol's scoring of one split (``dask_hashcodes.evaluation.evaluate.Scorer``):
        ``symmetric(encoder)`` encodes every row with ``encoder`` and ranks the query codes
        against the database codes; ``asymmetric(encoder, database_codes)`` ranks the given
        database codes against queries encoded by ``encoder``; ``grouped(...)`` scores
        database rows encoded group by group against each group's query codes;
        ``mean_and_std(runs)`` averages several runs' metrics; ``view`` is the database view
        and ``seed`` the evaluation's seed. ``options``: the given evaluation options that this
        class declares in ``evaluation_options`` (absent or None: the option's default).

        Default: one row, this model's codes of every row; a model that learns the database's
        codes (``learns_database_codes``) is scored with those against the queries it
        encodes. Methods scored in several ways override it (DisH: DisH2 and DisH1)."""
        if self.learns_database_codes:
            metrics, timing = scorer.asymmetric(self, self.database_codes_)
        else:
            metrics, timing = scorer.symmetric(self)
        return [Scored(metrics, timing)]

    @classmethod
    def training_plot(cls, row: dict) -> TrainingPlot | None:
        """The panels of a report's ``training.png`` that draw this report row's training
        statistics (``row["training"]``: the fit's ``training_stats_``), or None for no plot.
        A class method on the stored row alone, so a report can be re-plotted without the
        model. Default: the objective curve for fits that record their objective per
        iteration (``training_stats_["objective"]``, a list), else none; methods with richer
        statistics (DisH's consensus, MAC's path, ADSH's losses) override it."""
        return OBJECTIVE_PLOT if isinstance(row["training"].get("objective"), list) else None

    # ---------------------------------------------------------------- persistence -----
    def _learned_arrays(self) -> dict[str, np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _fitted_array_spec(self, n_features: int) -> dict[str, tuple]:  # pragma: no cover - abstract
        """Every array ``_learned_arrays`` gives after a fit of these parameters on
        ``n_features`` features: name -> (dtype kinds, e.g. ``npz.FLOAT``, or an exact dtype;
        shape, None for a dimension only the data decides). Loading accepts exactly these."""
        raise NotImplementedError

    def check_learned_arrays(self, arrays: dict, where) -> None:
        """Refuse stored arrays that are not exactly this model's declared ones (missing,
        extra, ill-typed or ill-shaped): one line naming the array; needs ``n_features_in_``."""
        check_arrays(arrays, self._fitted_array_spec(int(self.n_features_in_)), where, MODEL_REMEDY)

    def _set_learned_arrays(self, arrays: dict[str, np.ndarray], where="the learned arrays") -> None:
        """Take stored arrays as the learned state (``n_features_in_`` set first): checked
        against the declared spec, so no other name is ever set on the estimator."""
        self.check_learned_arrays(arrays, where)
        for name in self._fitted_array_spec(int(self.n_features_in_)):
            setattr(self, name, arrays[name])

    @property
    def model_id(self) -> str:
        """Content hash of everything stored that determines the codes: method, parameters,
        the number of features, and every learned array's name, dtype, shape and bytes (each
        header length-delimited by JSON, so no two states hash the same input)."""
        self._check_fitted()
        head = {"method": self.method, "params": self.get_params(), "n_features": int(self.n_features_in_)}
        h = hashlib.sha256(json.dumps(head, sort_keys=True, default=str).encode())
        for name, arr in sorted(self._learned_arrays().items()):
            arr = np.ascontiguousarray(arr)
            h.update(json.dumps([name, arr.dtype.str, list(arr.shape)]).encode())
            h.update(arr.tobytes())
        return h.hexdigest()[:16]

    def save(self, path, *, dataset: dict | None = None, overwrite: bool = False):
        """Write a model directory (model.json + arrays.npz) atomically; returns its Location.
        ``dataset``: what it was trained on (default ``dataset_``, set by the train workflow)."""

        self._check_fitted()
        meta = {
            "schema": MODEL_SCHEMA,
            "method": self.method,
            "params": self.get_params(),
            "n_bits": int(self.n_bits),
            "n_features": int(self.n_features_in_),
            "model_id": self.model_id,
            "library_version": __version__,
            "seed": getattr(self, "seed_", None),
            "training": self.training_stats_,
            "dataset": self.dataset_ if dataset is None else dataset,
        }
        with atomic_output(path, kind="model", overwrite=overwrite) as tmp:
            tmp.child(ARRAYS_FILE).write_bytes(npz_bytes(self._learned_arrays()))
            tmp.child(MODEL_FILE).write_text(dumps(meta) + "\n")
        return resolve_location(path)


def resolve_location(path):

    return resolve(path)
