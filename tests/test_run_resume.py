"""`dhash run` as a scheduled job that is killed: the next run resumes the train step from
its checkpoint (or, with --force, restarts it) and ends with the model an uninterrupted run
gives; an output the pipeline did not write is never replaced."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.cli import main

REPO = Path(__file__).resolve().parents[1]
PIPELINE = """
[pipeline]
name = "resume"
workdir = "work"

[[steps]]
command = "synth"
kind = "sift"
n = 60000
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


def _run_and_kill(pipeline: Path, state: Path) -> int:
    """Start `dhash run` in its own process group; SIGKILL the group once the train step's
    checkpoint holds iteration 3 or later. Returns the iteration it stopped at."""
    proc = subprocess.Popen([sys.executable, "-m", "jobs", "run", str(pipeline), "--workers", "2", "--quiet"],
                            cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stopped_at = None
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        try:
            stopped_at = json.loads(state.read_text())["iteration"]
        except (OSError, ValueError, KeyError):
            stopped_at = None
        if stopped_at is not None and stopped_at >= 3:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.01)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be stopped"
    return stopped_at


@pytest.fixture(scope="module")
def reference_model_id(tmp_path_factory):
    """The model of an uninterrupted run of the same pipeline."""
    tmp = tmp_path_factory.mktemp("reference")
    assert main(["run", str(_pipeline(tmp)), "--workers", "2", "--quiet"]) == 0
    return json.loads((tmp / "work" / "models" / "dish16" / "model.json").read_text())["model_id"]


@pytest.mark.slow
@pytest.mark.parametrize("force", [False, True])
def test_killed_run_then_rerun_gives_the_uninterrupted_model(reference_model_id, tmp_path, capsys, force):
    pipeline = _pipeline(tmp_path)
    work = tmp_path / "work"
    state = work / "models" / "dish16.checkpoint" / "state.json"
    stopped_at = _run_and_kill(pipeline, state)
    assert 3 <= stopped_at < 12 and not (work / "models" / "dish16").exists()
    capsys.readouterr()
    assert main(["run", str(pipeline), "--workers", "2", "--quiet", *(["--force"] if force else [])]) == 0
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
