"""Training checkpoints: the small state of an iterative fit, written after every outer
iteration so a stopped job (client, scheduler or machine gone) continues where it was.

A checkpoint is a directory next to the model (``MODEL.checkpoint``) holding ``state.json``
(iteration, per-iteration statistics, a fingerprint of the estimator and its data) and
``arrays.npz`` (dictionaries, multipliers, rotation: d x r matrices, never data). It is
replaced atomically each iteration, so a crash mid-write leaves the previous one intact,
and it is loaded with allow_pickle=False. Resuming from it gives the same final model as
an uninterrupted run: the state holds everything the next iteration reads.

Both files are read only through the checkpoint's commit record (their sizes and
checksums), so a state edited by hand (an iteration count, a rotation) is refused rather
than resumed, and the arrays must be the ones the fit declares. The fingerprint names the
dataset (id, row count, split) the rows came from when the caller knows it
(``CheckpointTarget``), so a checkpoint of other data is refused even when its shape and
mean happen to match.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from dask_hashcodes.errors import InputError
from dask_hashcodes.storage.atomic import (
    atomic_output,
    checkpoint_remedy,
    read_verified,
    require_committed,
    writer_alive,
    writer_record,
)
from dask_hashcodes.storage.location import Location, resolve
from dask_hashcodes.storage.npz import check_arrays, npz_arrays, npz_bytes

CHECKPOINT_SCHEMA = "dhash.checkpoint/2"  # 2: the fingerprint names the training data's dataset
STATE_FILE = "state.json"
ARRAYS_FILE = "arrays.npz"
REMEDY = "delete it or pass `overwrite=True` to start over"


def checkpoint_path(model_path):
    """The checkpoint Location of a model output (``MODEL.checkpoint`` beside it)."""

    model_path = resolve(model_path)
    return model_path.sibling(f"{model_path.name}.checkpoint")


@dataclass(frozen=True)
class CheckpointTarget:
    """Where a fit keeps its checkpoint (``path``) and the identity of the rows it trains on
    (``identity``: dataset id, row count, split), which the checkpoint records and must match
    on resume. A plain path passed as ``checkpoint`` to ``fit`` has no identity: then only
    the data's shape and mean are checked."""

    path: Location
    identity: dict | None = None


def dataset_identity(dataset_id: str, n: int, split: str | None, query_rows, rows: int) -> dict:
    """The identity of training rows: the dataset (content id and row count), the split
    whose database rows they are (name and a digest of its query rows: the same name may be
    re-drawn) and how many rows were trained on."""
    import hashlib

    digest = None if split is None else hashlib.sha256(np.asarray(query_rows, dtype=np.int64).tobytes()).hexdigest()
    return {"id": dataset_id, "n": int(n), "split": split, "split_sha": digest and digest[:16], "rows": int(rows)}


class Checkpoint:
    """``fingerprint`` names what the state belongs to (method, parameters, dataset, data
    shape and mean); a checkpoint with another fingerprint is refused, never silently resumed."""

    def __init__(self, path, fingerprint: dict):

        self.path = resolve(path)
        self.fingerprint = json.loads(json.dumps(fingerprint, sort_keys=True, default=_plain))

    def load(self, spec: dict | None = None) -> tuple[int, dict, dict] | None:
        """(iterations done, arrays, meta) of a matching checkpoint, None when there is none.
        ``spec``: the arrays the fit saves (``check_arrays``). Files are read only as their
        commit record lists them; anything else is a one-line error saying how to start over."""
        if not self.path.exists():
            return None
        # not as dhash wrote it: removing it always works (`overwrite=True` replaces only what dhash wrote)
        changed = checkpoint_remedy(self.path)
        record = require_committed(self.path, "checkpoint", changed)
        raw = read_verified(self.path, STATE_FILE, record, changed)
        try:
            state = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(f"checkpoint {self.path} is unreadable ({str(exc)[:60]}); {changed}") from None
        schema, fingerprint = (
            (state.get("schema"), state.get("fingerprint")) if isinstance(state, dict) else (None, None)
        )
        if schema != CHECKPOINT_SCHEMA or not isinstance(fingerprint, dict):
            raise InputError(
                f"checkpoint {self.path} has schema {schema!r}, not {CHECKPOINT_SCHEMA} (written by another "
                f"dhash version); {REMEDY}"
            )
        theirs, ours = fingerprint.get("dataset"), self.fingerprint.get("dataset")
        if theirs != ours:
            raise InputError(
                f"checkpoint {self.path} was trained on {_describe(theirs)}, not on {_describe(ours)}; {REMEDY}"
            )
        if fingerprint != self.fingerprint:
            raise InputError(
                f"checkpoint {self.path} was written by another training run (other method, parameters "
                f"or data); {REMEDY}, or train into another `out`"
            )
        iteration = state.get("iteration")
        if not isinstance(iteration, int) or isinstance(iteration, bool) or iteration < 0:
            raise InputError(f"checkpoint {self.path} has a bad iteration count {iteration!r}; {REMEDY}")
        where = self.path.child(ARRAYS_FILE)
        arrays = npz_arrays(read_verified(self.path, ARRAYS_FILE, record, changed), where, changed)
        if spec is not None:
            check_arrays(arrays, spec, where, REMEDY)
        return iteration, arrays, state["meta"]

    def save(self, iteration: int, arrays: dict, meta: dict) -> None:

        state = {
            "schema": CHECKPOINT_SCHEMA,
            "iteration": int(iteration),
            "fingerprint": self.fingerprint,
            "meta": json.loads(json.dumps(meta, default=_plain)),
            "writer": writer_record(),
        }
        with atomic_output(self.path, kind="checkpoint", overwrite=True) as tmp:
            tmp.child(ARRAYS_FILE).write_bytes(npz_bytes(arrays))
            tmp.child(STATE_FILE).write_text(json.dumps(state) + "\n")


def checkpoint_progress(path) -> int | None:
    """How many iterations the checkpoint at ``path`` (``checkpoint_path(model)``) holds, read
    through its commit record so a state edited by hand is never reported; None when there
    is no checkpoint or it is not as dhash wrote it (resuming it then fails, naming why)."""
    loc = resolve(path)
    if not loc.exists():
        return None
    try:
        record = require_committed(loc, "checkpoint", checkpoint_remedy(loc))
        state = json.loads(read_verified(loc, STATE_FILE, record, checkpoint_remedy(loc)))
    except ValueError:  # an InputError (missing, unlisted or changed file), bad JSON or UTF-8
        return None
    iteration = state.get("iteration") if isinstance(state, dict) else None
    valid = isinstance(iteration, int) and not isinstance(iteration, bool) and iteration >= 0
    return iteration if valid else None


def live_writer(path) -> dict | None:
    """The training process still writing the checkpoint at ``path`` (this host, alive), else None."""

    try:
        writer = json.loads(path.child(STATE_FILE).read_bytes()).get("writer")
    except (OSError, ValueError, AttributeError):
        return None
    return writer if isinstance(writer, dict) and writer_alive(writer) else None


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def _describe(identity) -> str:
    if not isinstance(identity, dict):
        return "data of unrecorded origin"
    split = f", split {identity.get('split')}" if identity.get("split") else ""
    return f"dataset {identity.get('id')} ({identity.get('n')} rows{split}; {identity.get('rows')} training rows)"


def data_fingerprint(estimator, X, mean: np.ndarray, dataset: dict | None = None) -> dict:
    """What a checkpoint must match: method, parameters, the dataset the rows come from
    (``dataset_identity``, when known), data shape and the training mean (recomputed on
    resume: one cheap pass that catches a different dataset or split)."""
    return {
        "method": estimator.method,
        "params": estimator.get_params(),
        "dataset": dataset,
        "shape": list(X.shape),
        "mean_sha": _array_digest(mean),
    }


def _array_digest(a: np.ndarray) -> str:
    import hashlib

    # rounded: the mean of the same rows may differ in the last bits with another chunking
    return hashlib.sha256(np.round(np.asarray(a, dtype=np.float64), 6).tobytes()).hexdigest()[:16]
