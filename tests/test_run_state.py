"""The library functions ``dhash run`` decides with: storage fingerprints (skip a step whose
inputs and output did not change) and a checkpoint's progress (read through its commit
record, so a hand-edited state is never reported)."""

from __future__ import annotations

import json
import os

import numpy as np

from dask_hashcodes.hashing.checkpoint import STATE_FILE, Checkpoint, checkpoint_path, checkpoint_progress
from dask_hashcodes.storage.fingerprint import fingerprint
from dask_hashcodes.storage.location import resolve


def test_fingerprint_of_files_directories_and_absent_paths(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a").write_bytes(b"12345")
    (tmp_path / "d" / "sub" / "b").write_bytes(b"123")
    (tmp_path / "f").write_bytes(b"xy")
    paths = [tmp_path / "d", tmp_path / "f", tmp_path / "nothing"]
    found = fingerprint(paths)
    assert found[str(tmp_path / "d")][:2] == [2, 8]
    assert found[str(tmp_path / "f")][:2] == [1, 2]
    assert found[str(tmp_path / "nothing")] is None
    assert fingerprint([resolve(tmp_path / "d")]) == {str(tmp_path / "d"): found[str(tmp_path / "d")]}
    # a write that keeps the size is seen by its time
    later = found[str(tmp_path / "d")][2] + 10**9
    os.utime(tmp_path / "d" / "a", ns=(later, later))
    assert fingerprint(paths) != found


def test_fingerprint_of_a_url(tmp_path):
    loc = resolve("memory://dhash-fingerprint/d")
    loc.child("a").write_bytes(b"12345")
    first = fingerprint([loc])[str(loc)]
    assert first[:2] == [1, 5]
    assert fingerprint(["memory://dhash-fingerprint/d"]) == {str(loc): first}  # a URL given as text
    loc.child("b").write_bytes(b"1")
    assert fingerprint([loc])[str(loc)][:2] == [2, 6]
    assert fingerprint(["memory://dhash-fingerprint/none"]) == {"memory://dhash-fingerprint/none": None}


def test_checkpoint_progress_is_read_through_the_commit_record(tmp_path):
    ckpt = checkpoint_path(tmp_path / "model")
    assert checkpoint_progress(ckpt) is None  # no checkpoint
    Checkpoint(ckpt, {"method": "itq"}).save(3, {"rotation": np.eye(4)}, {})
    assert checkpoint_progress(ckpt) == 3
    state = ckpt.child(STATE_FILE)
    edited = json.loads(state.read_bytes())
    edited["iteration"] = 40
    state.write_text(json.dumps(edited) + "\n")
    assert checkpoint_progress(ckpt) is None  # edited by hand: not reported


def test_a_false_option_keys_the_step_differently_from_a_true_one(tmp_path):
    """A true/false method option (not a switch) stays in the step's command line, so a
    step whose ``sgh-refine`` changed from true to false is not skipped as unchanged."""
    from dask_hashcodes.cli.run import load_pipeline

    argvs = {}
    for value in ("true", "false"):
        config = tmp_path / f"{value}.toml"
        config.write_text(
            '[pipeline]\nname = "p"\n\n[[steps]]\ncommand = "train"\ndataset = "d.zarr"\nmethod = "sgh"\n'
            f'out = "m"\nsgh-refine = {value}\n'
        )
        (step,) = load_pipeline(config, date="2026-01-01", workdir=tmp_path).steps
        argvs[value] = step.argv
    for value, argv in argvs.items():
        at = argv.index("--sgh-refine")
        assert argv[at + 1] == value, argv


def test_a_steps_own_cluster_keys_are_refused_by_name(tmp_path, capsys):
    """dhash run connects one cluster for all its steps: a step's workers, threads or
    scheduler would do nothing, so the pipeline is refused before any step runs."""
    from dask_hashcodes.cli.main import main

    for key, value in (("workers", "4"), ("threads", "2"), ("scheduler", '"tcp://127.0.0.1:8786"')):
        config = tmp_path / f"{key}.toml"
        config.write_text(
            f'[pipeline]\nname = "p"\n\n[[steps]]\ncommand = "synth"\nkind = "sift"\nn = 1000\nout = "s.zarr"\n'
            f"{key} = {value}\n"
        )
        assert main(["run", str(config), "--workdir", str(tmp_path / key)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{key} does not apply to a step" in err[0] and f"--{key}" in err[0], err
        assert not (tmp_path / key / "s.zarr").exists()
