"""Estimator base: scikit-learn contract, encode on numpy or dask, save/load without pickle.

``__init__`` only stores parameters (keyword-only); ``fit`` validates, resolves
``random_state`` once and sets learned attributes ending in ``_``. A fitted hasher is
small (a mean and a d x r matrix for the linear family), so it travels to every worker.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import time

import numpy as np

from pipeline.errors import InputError
from pipeline.validation import check_features_array, check_finite_block

MODEL_SCHEMA = "dhash.model/1"
ARRAYS_FILE = "arrays.npz"
MODEL_FILE = "model.json"


class Hasher:
    """Base class of every hash-function learner."""

    method: str = ""          # registry name, e.g. "itq"
    linear_pca_based = False  # n_bits <= n_features for PCA-based methods
    uses_labels = False       # semi-supervised: fit(X, y) with one label per training row

    # ---------------------------------------------------------------- params ----------
    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p for p in sig.parameters if p != "self"]

    def get_params(self, deep: bool = True) -> dict:
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        for name, value in params.items():
            if name not in self._param_names():
                raise InputError(f"{type(self).__name__} has no parameter {name!r}; valid: {', '.join(self._param_names())}")
            setattr(self, name, value)
        return self

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    # ---------------------------------------------------------------- fit -------------
    def _validate_training_data(self, X):
        from pipeline.distributed.graph import as_dask
        from pipeline.validation import check_int_param
        X = check_features_array(X, "training features")
        high = X.shape[1] if self.linear_pca_based else None
        if self.linear_pca_based and isinstance(self.n_bits, int) and self.n_bits > X.shape[1]:
            raise InputError(f"The 'n_bits' parameter of {type(self).__name__} must be at most the number of features "
                             f"({X.shape[1]}) because its bits are principal directions. Got {self.n_bits} instead; use lsh for longer codes.")
        check_int_param(self.n_bits, "n_bits", type(self).__name__, 1, high)
        return as_dask(X)

    supports_checkpoint = False  # iterative fits that save their state after every iteration

    def fit(self, X, y=None, *, checkpoint=None):
        """Learn the hash functions from X (numpy or dask, rows = points). ``y``: one label
        (or multi-hot row) per row, used by semi-supervised methods and DisH's by-label
        partition. ``checkpoint``: a directory for the per-iteration state of iterative
        methods (``supports_checkpoint``); a checkpoint of the same run there is resumed."""
        started = time.perf_counter()
        X = self._validate_training_data(X)
        self.n_features_in_ = int(X.shape[1])
        self.training_stats_ = {"n_train": int(X.shape[0]), "n_chunks": int(X.numblocks[0])}
        self._y, self._checkpoint_path = y, checkpoint
        try:
            self._fit(X)
        finally:
            del self._y, self._checkpoint_path
        self.training_stats_["train_seconds"] = round(time.perf_counter() - started, 4)
        return self

    def labels_for_fit(self, y):
        """The labels ``fit`` should get from a dataset's label array (one row per training
        row): semi-supervised methods take them, others none (DisH: 1-D only, see there)."""
        return y if self.uses_labels else None

    def _checkpoint(self, X):
        """(Checkpoint or None, saved state or None) for this fit; call after ``mean_`` is set."""
        from pipeline.hashing.checkpoint import Checkpoint, data_fingerprint
        if self._checkpoint_path is None:
            return None, None
        ckpt = Checkpoint(self._checkpoint_path, data_fingerprint(self, X, self.mean_))
        return ckpt, ckpt.load()

    def _fit(self, X):  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_fitted(self):
        if not hasattr(self, "n_features_in_"):
            raise InputError(f"this {type(self).__name__} is not fitted yet; call fit(X) or load a trained model")

    # ---------------------------------------------------------------- encode ----------
    @property
    def code_bytes(self) -> int:
        return (self.n_bits + 7) // 8

    def _check_encode_input(self, X):
        self._check_fitted()
        X = check_features_array(X, "features to encode")
        if X.shape[1] != self.n_features_in_:
            raise InputError(f"the model was trained on {self.n_features_in_}-dimensional features but got "
                             f"{X.shape[1]}-dimensional ones; encode data of the training dimensionality or retrain")
        return X

    def encode(self, X):
        """Packed uint8 codes (n, ceil(n_bits/8)); lazy dask array for dask input."""
        X = self._check_encode_input(X)
        if isinstance(X, np.ndarray):
            return self._encode_block(X)
        from dask.base import tokenize
        return X.map_blocks(self._encode_block, dtype=np.uint8,
                            chunks=(X.chunks[0], (self.code_bytes,)),
                            token=f"{self.method}-encode", name=f"{self.method}-encode-{tokenize(X, self.model_id)}")

    def _encode_block(self, block: np.ndarray) -> np.ndarray:
        check_finite_block(block, what="features to encode")
        return self._encode_kernel(block)

    def _encode_kernel(self, block):  # pragma: no cover - abstract
        raise NotImplementedError

    # ---------------------------------------------------------------- persistence -----
    def _learned_arrays(self) -> dict[str, np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _set_learned_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        for k, v in arrays.items():
            setattr(self, k, v)

    @property
    def model_id(self) -> str:
        """Content hash of method, parameters and learned arrays: names codes' origin."""
        self._check_fitted()
        h = hashlib.sha256(json.dumps({"method": self.method, "params": self.get_params()},
                                      sort_keys=True, default=str).encode())
        for name, arr in sorted(self._learned_arrays().items()):
            h.update(name.encode())
            h.update(np.ascontiguousarray(arr).tobytes())
        return h.hexdigest()[:16]

    def save(self, path, *, dataset: dict | None = None, overwrite: bool = False):
        """Write a model directory (model.json + arrays.npz) atomically; returns its Location."""
        from pipeline import __version__
        from pipeline.storage.atomic import atomic_output
        from pipeline.storage.jsonio import dumps
        self._check_fitted()
        meta = {"schema": MODEL_SCHEMA, "method": self.method, "params": self.get_params(),
                "n_bits": int(self.n_bits), "n_features": int(self.n_features_in_),
                "model_id": self.model_id, "library_version": __version__,
                "training": self.training_stats_, "dataset": dataset or {}}
        with atomic_output(path, kind="model", overwrite=overwrite) as tmp:
            tmp.child(ARRAYS_FILE).write_bytes(npz_bytes(self._learned_arrays()))
            tmp.child(MODEL_FILE).write_text(dumps(meta) + "\n")
        return resolve_location(path)


def resolve_location(path):
    from pipeline.storage.location import resolve
    return resolve(path)


def npz_bytes(arrays: dict) -> bytes:
    """Arrays as the bytes of an .npz file (no pickle: plain numeric arrays only)."""
    import io
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def load_npz(loc, remedy: str) -> dict[str, np.ndarray]:
    """The arrays of an .npz file at a Location, never unpickling; a damaged or truncated
    file is a one-line InputError."""
    import io
    import zipfile
    try:
        raw = loc.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{loc} is missing; {remedy}") from None
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as exc:
        raise InputError(f"{loc} is damaged ({type(exc).__name__}: {str(exc)[:60]}); {remedy}") from None


def load_model(path) -> Hasher:
    """Load a committed model directory written by ``Hasher.save`` (no pickle: JSON + .npz)."""
    from pipeline.hashing import HASHERS
    from pipeline.storage.atomic import require_committed
    loc = resolve_location(path)
    remedy = "re-train it with `dhash train`"
    if not loc.child(MODEL_FILE).exists() and not loc.child(".dhash-commit.json").exists():
        raise InputError(f"{loc} is not a model directory (no {MODEL_FILE}); train one with `dhash train`")
    require_committed(loc, "model", remedy)
    meta_file = loc.child(MODEL_FILE)
    try:
        meta = json.loads(meta_file.read_bytes())
    except FileNotFoundError:
        raise InputError(f"{meta_file} is missing; {remedy}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{meta_file} is not valid JSON ({str(exc)[:60]}); {remedy}") from None
    if not isinstance(meta, dict) or meta.get("schema") != MODEL_SCHEMA or meta.get("method") not in HASHERS:
        got = (meta.get("schema"), meta.get("method")) if isinstance(meta, dict) else (None, None)
        raise InputError(f"{meta_file} has schema {got[0]!r} / method {got[1]!r}; expected {MODEL_SCHEMA} with one of {', '.join(HASHERS)}")
    try:
        model = HASHERS[meta["method"]](**meta["params"])
        arrays = load_npz(loc.child(ARRAYS_FILE), remedy)
        model._set_learned_arrays(arrays)
        model.n_features_in_ = int(meta["n_features"])
        expected_id = meta["model_id"]
    except (KeyError, TypeError) as exc:
        raise InputError(f"{meta_file} lacks or has a bad entry ({exc}); {remedy}") from None
    model.training_stats_ = meta.get("training", {})
    model.dataset_ = meta.get("dataset", {})
    if model.model_id != expected_id:
        raise InputError(f"{loc}: arrays do not match model.json (model id {model.model_id} != {expected_id}); the model directory is corrupt, re-train it")
    return model
