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
from pathlib import Path

import numpy as np

from pipeline.errors import InputError

CHECKPOINT_SCHEMA = "dhash.checkpoint/1"
STATE_FILE = "state.json"
ARRAYS_FILE = "arrays.npz"


def checkpoint_path(model_path) -> Path:
    model_path = Path(model_path)
    return model_path.parent / f"{model_path.name}.checkpoint"


class Checkpoint:
    """``fingerprint`` names what the state belongs to (method, parameters, data shape and
    mean); a checkpoint with another fingerprint is refused, never silently resumed."""

    def __init__(self, path, fingerprint: dict):
        self.path = Path(path)
        self.fingerprint = json.loads(json.dumps(fingerprint, sort_keys=True, default=_plain))

    def load(self) -> tuple[int, dict, dict] | None:
        """(iterations done, arrays, meta) of a matching checkpoint, None when there is none."""
        state_file = self.path / STATE_FILE
        if not state_file.exists():
            return None
        try:
            state = json.loads(state_file.read_text())
        except json.JSONDecodeError as exc:
            raise InputError(f"checkpoint {self.path} is unreadable ({exc.msg}); delete it to start over") from None
        if state.get("schema") != CHECKPOINT_SCHEMA or state.get("fingerprint") != self.fingerprint:
            raise InputError(f"checkpoint {self.path} was written by another training run (other method, parameters "
                             "or data); delete it or train into another --out")
        with np.load(self.path / ARRAYS_FILE, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        return int(state["iteration"]), arrays, state["meta"]

    def save(self, iteration: int, arrays: dict, meta: dict) -> None:
        from pipeline.storage.atomic import atomic_path
        state = {"schema": CHECKPOINT_SCHEMA, "iteration": int(iteration), "fingerprint": self.fingerprint,
                 "meta": json.loads(json.dumps(meta, default=_plain))}
        with atomic_path(self.path, overwrite=True) as tmp:
            tmp.mkdir(parents=True)
            np.savez(tmp / ARRAYS_FILE, **arrays)
            (tmp / STATE_FILE).write_text(json.dumps(state) + "\n")

    def remove(self) -> None:
        import shutil
        shutil.rmtree(self.path, ignore_errors=True)


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def data_fingerprint(estimator, X, mean: np.ndarray) -> dict:
    """What a checkpoint must match: method, parameters, data shape and the training mean
    (recomputed on resume: one cheap pass that catches a different dataset or split)."""
    return {"method": estimator.method, "params": estimator.get_params(), "shape": list(X.shape),
            "mean_sha": _array_digest(mean)}


def _array_digest(a: np.ndarray) -> str:
    import hashlib
    # rounded: the mean of the same rows may differ in the last bits with another chunking
    return hashlib.sha256(np.round(np.asarray(a, dtype=np.float64), 6).tobytes()).hexdigest()[:16]
