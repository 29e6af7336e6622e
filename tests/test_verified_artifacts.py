"""Models and checkpoints are read only as written: through their commit record's checksums,
with exactly the arrays their estimator declares, and a checkpoint only for the data it was
trained on.

* A checkpoint edited by hand (an iteration count in ``state.json``, a rotation in
  ``arrays.npz``) is refused on ``dhash train --resume`` in one line, never resumed.
* A checkpoint of another dataset is refused even when the shape and mean match.
* For every registered method: the declared arrays (``_fitted_array_spec``) are what a fit
  learns, and a model whose ``arrays.npz`` gained, lost or reshaped an array is a one-line
  error, also when its commit record was rewritten to match; no stored name that is not
  declared is ever set on the estimator.
* The model id covers the arrays' dtypes and shapes, not only their bytes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone

from dask_hashcodes import InputError, load_model
from dask_hashcodes.cli.main import main
from dask_hashcodes.hashing import HASHERS
from dask_hashcodes.hashing.checkpoint import Checkpoint
from dask_hashcodes.storage.atomic import COMMIT_FILE
from dask_hashcodes.storage.npz import npz_bytes
from tests.test_estimators import SMALL

STOP_AFTER = 2  # iterations an interrupted training run completed


def run(*argv):
    return main([str(a) for a in argv])


class Stopped(Exception):
    """Stands for the kill of a training run right after a checkpoint was written."""


def _features(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((3000, 24)) @ rng.standard_normal((24, 24))).astype(np.float32)


@pytest.fixture(scope="module")
def datasets(cluster, tmp_path_factory):
    """Two datasets of the same rows in opposite order: same shape and mean, other content."""
    base = tmp_path_factory.mktemp("verified")
    X = _features(3)
    for name, rows in (("a", X), ("b", X[::-1].copy())):
        np.save(base / f"{name}.npy", rows)
        assert run("ingest", base / f"{name}.npy", "--out", base / f"{name}.zarr", "--quiet") == 0
    return base


def _interrupted_checkpoint(dataset: Path, out: Path, monkeypatch, method: str = "itq") -> Path:
    """Train ``method`` on ``dataset`` into ``out`` and stop right after iteration STOP_AFTER's
    checkpoint, as a killed job leaves it."""
    from dask_hashcodes import workflows

    save = Checkpoint.save

    def save_then_stop(self, iteration, arrays, meta):
        save(self, iteration, arrays, meta)
        if iteration == STOP_AFTER:
            raise Stopped

    with monkeypatch.context() as patched:
        patched.setattr(Checkpoint, "save", save_then_stop)
        with pytest.raises(Stopped):
            workflows.train(dataset, method, out, bits=8, params={"n_iter": 20} if method == "itq" else None)
    ckpt = out.parent / f"{out.name}.checkpoint"
    assert json.loads((ckpt / "state.json").read_text())["iteration"] == STOP_AFTER
    return ckpt


def _resume(dataset: Path, out: Path, cluster, method: str = "itq", *extra) -> int:
    params = ["--n-iter", 20] if method == "itq" else []
    return run(
        "train", "--dataset", dataset, "--method", method, "--bits", 8, *params, "--out", out, "--resume",
        "--scheduler", cluster.scheduler_address, "--quiet", *extra,
    )  # fmt: skip


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    return err


def rewrite_committed_file(artifact: Path, name: str, data: bytes) -> None:
    """Replace a file of a committed artifact and make its commit record list the new bytes,
    as a tool that knows the format could: what is left to catch is the content itself."""
    (artifact / name).write_bytes(data)
    record = json.loads((artifact / COMMIT_FILE).read_text())
    record["files"][name] = {"size": len(data), "checksum": "sha256:" + hashlib.sha256(data).hexdigest()}
    (artifact / COMMIT_FILE).write_text(json.dumps(record))


def test_an_untouched_checkpoint_resumes(datasets, cluster, client, tmp_path, monkeypatch, capsys):
    out = tmp_path / "m"
    _interrupted_checkpoint(datasets / "a.zarr", out, monkeypatch)
    capsys.readouterr()
    assert _resume(datasets / "a.zarr", out, cluster) == 0
    assert load_model(out).training_stats_["passes"] == 21


def _edit_iteration(ckpt: Path) -> str:
    state = json.loads((ckpt / "state.json").read_text())
    (ckpt / "state.json").write_text(json.dumps({**state, "iteration": 1000}) + "\n")
    return "state.json"


def _edit_rotation(how):
    def edit(ckpt: Path) -> str:
        with np.load(ckpt / "arrays.npz") as npz:
            rotation = npz["rotation"]
        changed = rotation[:, ::-1] if how == "swapped" else rotation * 1.0001
        (ckpt / "arrays.npz").write_bytes(npz_bytes({"rotation": changed}))
        return "arrays.npz"

    return edit


def _remove_record(ckpt: Path) -> str:
    (ckpt / COMMIT_FILE).unlink()
    return COMMIT_FILE


EDITS = {  # hand edits of a checkpoint -> the file each changes
    "iteration-1000": _edit_iteration,
    "rotation-swapped": _edit_rotation("swapped"),
    "rotation-scaled": _edit_rotation("scaled"),
    "no-commit-record": _remove_record,
}
REFUSALS = {  # edited file -> what Checkpoint.load says
    "state.json": "state.json differs from its commit record",
    "arrays.npz": "arrays.npz differs from its commit record",
    COMMIT_FILE: f"is not a complete dhash checkpoint (no {COMMIT_FILE}",
}


@pytest.mark.parametrize("edit", EDITS)
def test_an_edited_checkpoint_is_refused_by_train_resume(
    datasets, cluster, client, tmp_path, monkeypatch, capsys, edit
):
    """`dhash train --resume` refuses in one line naming the file, before any iteration runs."""
    out = tmp_path / "m"
    ckpt = _interrupted_checkpoint(datasets / "a.zarr", out, monkeypatch)
    changed = EDITS[edit](ckpt)
    saved = []
    monkeypatch.setattr(Checkpoint, "save", lambda self, *args: saved.append(args))
    capsys.readouterr()
    assert _resume(datasets / "a.zarr", out, cluster) == 2
    err = _one_line_error(capsys)
    assert str(ckpt) in err and (changed in err or changed == COMMIT_FILE), err  # without a record: its files are named
    assert saved == [] and not out.exists()


@pytest.mark.parametrize("edit", EDITS)
def test_an_edited_checkpoint_is_never_resumed_by_the_workflow(datasets, client, tmp_path, monkeypatch, edit):
    """The train workflow (and any fit given the checkpoint) reads it only through its commit
    record: an edited file is refused saying to remove the checkpoint."""
    from dask_hashcodes import workflows

    out = tmp_path / "m"
    ckpt = _interrupted_checkpoint(datasets / "a.zarr", out, monkeypatch)
    changed = EDITS[edit](ckpt)
    with pytest.raises(InputError) as info:
        workflows.train(datasets / "a.zarr", "itq", out, bits=8, params={"n_iter": 20}, resume=True)
    message = str(info.value)
    remedy = f"remove the checkpoint directory {ckpt} to train from the start"
    assert "\n" not in message and REFUSALS[changed] in message and remedy in message, message
    assert not out.exists()


@pytest.mark.parametrize("extra", [[], ["--resume"], ["--overwrite"]])
def test_an_edited_checkpoint_is_refused_with_a_remedy_that_works(
    datasets, cluster, client, tmp_path, monkeypatch, capsys, extra
):
    """A checkpoint whose state.json was edited by hand: train (a re-run, with --resume or
    --overwrite alike) says it was changed since dhash wrote it and to remove it; done so,
    the next train succeeds."""
    import shutil

    out = tmp_path / "m"
    ckpt = _interrupted_checkpoint(datasets / "a.zarr", out, monkeypatch)
    _edit_iteration(ckpt)
    capsys.readouterr()
    train = ["train", "--dataset", datasets / "a.zarr", "--method", "itq", "--bits", 8, "--n-iter", 3, "--out", out]
    train += ["--scheduler", cluster.scheduler_address, "--quiet"]
    assert run(*train, *extra) == 2
    err = _one_line_error(capsys)
    assert f"checkpoint {ckpt} was changed since dhash wrote it" in err and "state.json" in err, err
    assert f"remove the checkpoint directory {ckpt} to train from the start" in err, err
    assert not out.exists() and (ckpt / "state.json").exists()
    shutil.rmtree(ckpt)  # the remedy, as the message gives it
    assert run(*train) == 0, capsys.readouterr().err
    assert load_model(out).training_stats_["passes"] == 4 and not ckpt.exists()


def test_a_checkpoint_of_another_dataset_is_refused(datasets, cluster, client, tmp_path, monkeypatch, capsys):
    """The two datasets have the same shape and (rounded) mean: only the recorded dataset
    identity tells them apart."""
    from dask_hashcodes.storage.datasets import open_dataset

    out = tmp_path / "m"
    _interrupted_checkpoint(datasets / "a.zarr", out, monkeypatch)
    capsys.readouterr()
    assert _resume(datasets / "b.zarr", out, cluster) == 2
    err = _one_line_error(capsys)
    a, b = (open_dataset(datasets / f"{name}.zarr").content_id for name in "ab")
    assert a != b
    assert f"was trained on dataset {a} (3000 rows; 3000 training rows), not on dataset {b}" in err
    assert "delete it or pass --overwrite" in err
    assert not out.exists()


def test_a_checkpoint_of_another_split_is_refused(datasets, cluster, client, tmp_path, monkeypatch, capsys):
    from dask_hashcodes import workflows

    work = tmp_path / "a.zarr"
    assert run("ingest", datasets / "a.npy", "--out", work, "--quiet") == 0
    workflows.split(work, queries=50, seed=1, name="s")
    out = tmp_path / "m"
    _interrupted_checkpoint(work, out, monkeypatch)  # every row
    capsys.readouterr()
    assert _resume(work, out, cluster, "itq", "--split", "s") == 2
    assert "(3000 rows, split s; 2950 training rows)" in _one_line_error(capsys)


def test_a_dish_checkpoint_with_other_arrays_is_refused(tmp_path, monkeypatch):
    """The arrays of a resumed state are those the fit saves (names and shapes), even when a
    commit record lists them."""
    from dask_hashcodes import DisH

    X = _features(4)[:600]
    ckpt = tmp_path / "m.checkpoint"
    save = Checkpoint.save

    def save_then_stop(self, iteration, arrays, meta):
        save(self, iteration, arrays, meta)
        raise Stopped

    with monkeypatch.context() as patched:
        patched.setattr(Checkpoint, "save", save_then_stop)
        with pytest.raises(Stopped):
            DisH(n_bits=4, nodes=2, max_iter=5).fit(X, checkpoint=ckpt)
    with np.load(ckpt / "arrays.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    rewrite_committed_file(ckpt, "arrays.npz", npz_bytes({**arrays, "multipliers": arrays["multipliers"][:1]}))
    with pytest.raises(InputError, match="array 'multipliers' is 1 x 24 x 4, expected 2 x 24 x 4") as info:
        DisH(n_bits=4, nodes=2, max_iter=5).fit(X, checkpoint=ckpt)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------ models ------------


def _fit(estimator):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 6))
    return clone(estimator).fit(X, np.arange(40) % 3)


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """Every entry of SMALL (every registered method, with its variants) fitted and saved."""
    base = tmp_path_factory.mktemp("models")
    models = []
    for i, estimator in enumerate(SMALL):
        model = _fit(estimator)
        model.save(base / f"{i}-{model.method}")
        models.append((model, base / f"{i}-{model.method}"))
    return models


def test_every_registered_method_is_covered(saved_models):
    assert {type(model) for model, _ in saved_models} == set(HASHERS.values())


def _cases():
    return [pytest.param(i, id=f"{i}-{e.method}") for i, e in enumerate(SMALL)]


@pytest.mark.parametrize("index", _cases())
def test_the_declared_arrays_are_the_learned_ones(saved_models, index):
    model, path = saved_models[index]
    spec = model._fitted_array_spec(model.n_features_in_)
    arrays = {k: np.asarray(v) for k, v in model._learned_arrays().items()}
    assert set(spec) == set(arrays)
    for name, (dtype, shape) in spec.items():
        array = arrays[name]
        assert (array.dtype.kind in dtype) if isinstance(dtype, str) else array.dtype == np.dtype(dtype), name
        assert array.ndim == len(shape) and all(s in (None, t) for s, t in zip(shape, array.shape)), name
    loaded = load_model(path)
    assert loaded.model_id == model.model_id
    X = np.random.default_rng(5).standard_normal((30, 6))
    np.testing.assert_array_equal(loaded.encode(X), model.encode(X))


def _damaged(arrays: dict, damage: str) -> tuple[dict, str]:
    """(arrays with one damage, the array name the refusal must name). The extra array is
    named like a method, which setting every stored name on the estimator would replace."""
    if damage == "extra":
        return {**arrays, "encode": np.zeros(3)}, "'encode'"
    if damage == "missing":
        name = next(iter(arrays))
        return {k: v for k, v in arrays.items() if k != name}, repr(name)
    name = max(arrays, key=lambda k: arrays[k].size)  # the largest array, flattened or given a new axis
    array = arrays[name]
    return {**arrays, name: array.reshape(-1) if array.ndim > 1 else array.reshape(1, -1)}, repr(name)


@pytest.mark.parametrize("damage", ["extra", "missing", "reshaped"])
@pytest.mark.parametrize("index", _cases())
def test_a_model_with_other_arrays_is_a_one_line_error(saved_models, tmp_path, index, damage):
    import shutil

    model, path = saved_models[index]
    copy = tmp_path / "m"
    shutil.copytree(path, copy)
    with np.load(copy / "arrays.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    damaged, name = _damaged(arrays, damage)
    # without the commit record rewritten: the checksum refuses it
    (copy / "arrays.npz").write_bytes(npz_bytes(damaged))
    with pytest.raises(InputError, match="arrays.npz differs from its commit record.*re-train") as info:
        load_model(copy)
    assert "\n" not in str(info.value)
    # with it rewritten: the declared arrays refuse it, naming the array
    rewrite_committed_file(copy, "arrays.npz", npz_bytes(damaged))
    with pytest.raises(InputError, match="re-train") as info:
        load_model(copy)
    assert "\n" not in str(info.value) and name in str(info.value)
    # and the estimator itself never takes an undeclared or ill-shaped array
    fresh = type(model)(**model.get_params())
    fresh.n_features_in_ = model.n_features_in_
    with pytest.raises(InputError, match=name):
        fresh._set_learned_arrays(damaged)
    assert "encode" not in vars(fresh)


def test_an_edited_model_json_is_refused(saved_models, tmp_path):
    import shutil

    _, path = saved_models[0]
    copy = tmp_path / "m"
    shutil.copytree(path, copy)
    meta = json.loads((copy / "model.json").read_text())
    (copy / "model.json").write_text(json.dumps({**meta, "n_bits": 4}))
    with pytest.raises(InputError, match="model.json differs from its commit record.*re-train"):
        load_model(copy)


def test_the_model_id_covers_dtype_and_shape():
    """Arrays with the same bytes but another shape or dtype are another model."""
    from dask_hashcodes import LSH

    model = LSH(n_bits=2).fit(np.random.default_rng(1).standard_normal((50, 8)))
    first, raw = model.model_id, model.components_.tobytes()
    model.components_ = np.frombuffer(raw, dtype=np.float64).reshape(4, 4)
    assert model.model_id != first
    model.components_ = np.frombuffer(raw, dtype=np.int64).reshape(8, 2)
    assert model.model_id != first
    model.components_ = np.frombuffer(raw, dtype=np.float64).reshape(8, 2)
    assert model.model_id == first
