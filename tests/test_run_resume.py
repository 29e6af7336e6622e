"""`dhash run` as a scheduled job that is killed: the next run resumes the train step from
its checkpoint (or, with --force, restarts it) and ends with the model an uninterrupted run
gives; an output the pipeline did not write is never replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dask_hashcodes.cli.main import main
from tests.killing import kill_after_checkpoint

PIPELINE = """
[pipeline]
name = "resume"
workdir = "work"

[[steps]]
command = "synth"
kind = "sift"
n = 30000
chunk-rows = 8192
seed = 5
out = "data/sift.zarr"

[[steps]]
command = "train"
dataset = "data/sift.zarr"
method = "dish"
bits = 16
nodes = 3
max-iter = 12
out = "models/dish16"
"""


def _pipeline(tmp_path) -> Path:
    file = tmp_path / "resume.toml"
    file.write_text(PIPELINE)
    return file


@pytest.fixture(scope="module")
def reference_model_id(tmp_path_factory, cluster):
    """The model of an uninterrupted run of the same pipeline (on the session's cluster of
    the shape the killed run starts)."""
    tmp = tmp_path_factory.mktemp("reference")
    assert main(["run", str(_pipeline(tmp)), "--scheduler", cluster.scheduler_address, "--quiet"]) == 0
    return json.loads((tmp / "work" / "models" / "dish16" / "model.json").read_text())["model_id"]


@pytest.mark.slow
@pytest.mark.parametrize("force", [False, True])
def test_killed_run_then_rerun_gives_the_uninterrupted_model(reference_model_id, cluster, tmp_path, capsys, force):
    """The killed run starts its own local cluster (killed with it); the next run joins the
    session's cluster of the same shape."""
    pipeline = _pipeline(tmp_path)
    work = tmp_path / "work"
    state = work / "models" / "dish16.checkpoint" / "state.json"
    stopped_at = kill_after_checkpoint(["run", pipeline, "--workers", 2, "--quiet"], state)
    assert 3 <= stopped_at < 12 and not (work / "models" / "dish16").exists()
    capsys.readouterr()
    rerun = ["run", str(pipeline), "--scheduler", cluster.scheduler_address, "--quiet"]
    assert main([*rerun, *(["--force"] if force else [])]) == 0
    err = capsys.readouterr().err
    if force:
        assert "removed the checkpoint" in err and "training starts over" in err
    else:
        assert f"resuming from {work / 'models' / 'dish16.checkpoint'} (after iteration" in err
        assert "step 1 (synth) skipped" in err
    model = json.loads((work / "models" / "dish16" / "model.json").read_text())
    assert model["model_id"] == reference_model_id
    assert not state.parent.exists()


def test_existing_output_the_pipeline_did_not_write_is_refused(tmp_path, capsys):
    pipeline = _pipeline(tmp_path)
    foreign = tmp_path / "work" / "data" / "sift.zarr"
    (foreign / "important").mkdir(parents=True)
    capsys.readouterr()
    assert main(["run", str(pipeline), "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "exists and was not written by this pipeline" in err and (foreign / "important").is_dir()


def test_unknown_pipeline_key_is_refused(tmp_path, capsys):
    file = tmp_path / "p.toml"
    file.write_text(PIPELINE.replace('name = "resume"', 'name = "resume"\nworkers = 4'))
    assert main(["run", str(file), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "unknown key(s) workers in [pipeline]" in err and err.count("\n") == 1
