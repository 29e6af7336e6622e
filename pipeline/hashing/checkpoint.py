"""Training checkpoints: the small state of an iterative fit, written after every outer
iteration so a stopped job (client, scheduler or machine gone) continues where it was.

A checkpoint is a directory next to the model (``MODEL.checkpoint``) holding ``state.json``
(iteration, per-iteration statistics, a fingerprint of the estimator and its data) and
``arrays.npz`` (dictionaries, multipliers, rotation: d x r matrices, never data). It is
replaced atomically each iteration, so a crash mid-write leaves the previous one intact,
and it is loaded with allow_pickle=False. Resuming from it gives the same final model as
an uninterrupted run: the state holds everything the next iteration reads.
"""

from __future__ import annotations

import json

import numpy as np

from pipeline.errors import InputError
from pipeline.storage.atomic import atomic_output, writer_alive, writer_record
from pipeline.storage.location import resolve
from pipeline.storage.npz import load_npz, npz_bytes

CHECKPOINT_SCHEMA = "dhash.checkpoint/1"
STATE_FILE = "state.json"
ARRAYS_FILE = "arrays.npz"


def checkpoint_path(model_path):
    """The checkpoint Location of a model output (``MODEL.checkpoint`` beside it)."""

    model_path = resolve(model_path)
    return model_path.sibling(f"{model_path.name}.checkpoint")


class Checkpoint:
    """``fingerprint`` names what the state belongs to (method, parameters, data shape and
    mean); a checkpoint with another fingerprint is refused, never silently resumed."""

    def __init__(self, path, fingerprint: dict):

        self.path = resolve(path)
        self.fingerprint = json.loads(json.dumps(fingerprint, sort_keys=True, default=_plain))

    def load(self) -> tuple[int, dict, dict] | None:
        """(iterations done, arrays, meta) of a matching checkpoint, None when there is none."""
        state_file = self.path.child(STATE_FILE)
        if not state_file.exists():
            return None
        try:
            state = json.loads(state_file.read_bytes())
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(
                f"checkpoint {self.path} is unreadable ({str(exc)[:60]}); delete it to start over"
            ) from None
        if state.get("schema") != CHECKPOINT_SCHEMA or state.get("fingerprint") != self.fingerprint:
            raise InputError(
                f"checkpoint {self.path} was written by another training run (other method, parameters "
                "or data); delete it or train into another --out (in `dhash run`: --force restarts the step)"
            )
        arrays = load_npz(self.path.child(ARRAYS_FILE), "delete the checkpoint to start over (or --force in dhash run)")
        return int(state["iteration"]), arrays, state["meta"]

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


def data_fingerprint(estimator, X, mean: np.ndarray) -> dict:
    """What a checkpoint must match: method, parameters, data shape and the training mean
    (recomputed on resume: one cheap pass that catches a different dataset or split)."""
    return {
        "method": estimator.method,
        "params": estimator.get_params(),
        "shape": list(X.shape),
        "mean_sha": _array_digest(mean),
    }


def _array_digest(a: np.ndarray) -> str:
    import hashlib

    # rounded: the mean of the same rows may differ in the last bits with another chunking
    return hashlib.sha256(np.round(np.asarray(a, dtype=np.float64), 6).tobytes()).hexdigest()[:16]
