"""Bad options, config values and pipeline steps: each is one line `error: ...`, exit 2,
before any cluster starts or any output is made (a matrix: command, expected fragment)."""

from __future__ import annotations

import json

import pytest

from dask_hashcodes.cli.main import main

CLI_CASES = [
    (
        [
            "search",
            "--dataset",
            "d.zarr",
            "--model",
            "m",
            "--codes",
            "c.zarr",
            "--out",
            "r.parquet",
            "--k",
            "10",
            "--radius",
            "3",
        ],
        "give either --k (top-k search) or --radius",
    ),
    (
        ["train", "--dataset", "d.zarr", "--method", "itq", "--bits", "0", "--out", "m"],
        "--bits: expected a positive integer, got 0",
    ),
    (
        ["train", "--dataset", "d.zarr", "--method", "itq", "--bits", "12.7", "--out", "m"],
        "expected a positive integer, got '12.7'",
    ),
    (["synth", "sift", "--n", "100", "--out", "s.zarr", "--workers", "0"], "--workers: expected a positive integer"),
    (
        ["synth", "sift", "--n", "100", "--out", "s.zarr", "--chunk-rows", "0"],
        "--chunk-rows: expected a positive integer",
    ),
    (["synth", "sift", "--n", "-5", "--out", "s.zarr"], "--n: expected a positive integer"),
    (["synth", "sift", "--n", "100", "--out", "s.zarr", "--threads", "-1"], "--threads: expected a positive integer"),
    (
        ["evaluate", "--dataset", "d.zarr", "--ks", "0,-5", "--out", "rep"],
        "--ks: expected a comma-separated list of positive",
    ),
    (["evaluate", "--dataset", "d.zarr", "--bits", "", "--out", "rep"], "--bits: expected a comma-separated list"),
    (["split", "--dataset", "d.zarr", "--queries", "0"], "--queries: expected a positive integer"),
    (
        ["train", "--dataset", "d.zarr", "--method", "dish", "--rho", "-1", "--out", "m"],
        "--rho: expected a positive number",
    ),
    (
        ["train", "--dataset", "d.zarr", "--method", "itq", "--out", "m", "--storage-options", "[1]"],
        "--storage-options: expected a JSON object",
    ),
    (["train", "--dataset", "d.zarr", "--method", "itq", "--out", "m", "--bogus"], "unrecognized arguments: --bogus"),
    (["train", "--dataset", "d.zarr", "--out", "m"], "--method is required"),
    # method options: ranges and choices read from the estimators' _parameter_constraints
    (
        ["train", "--dataset", "d.zarr", "--method", "usplh", "--decay", "1.5", "--out", "m"],
        "--decay: expected a number in (0, 1], got '1.5'",
    ),
    (
        ["train", "--dataset", "d.zarr", "--method", "kmh", "--kmh-bits-per-subspace", "9", "--out", "m"],
        "--kmh-bits-per-subspace: expected an integer from 1 to 8, got 9",
    ),
    (
        ["train", "--dataset", "d.zarr", "--method", "mac", "--mu-factor", "1", "--out", "m"],
        "--mu-factor: expected a number > 1, got '1'",
    ),
    (
        ["train", "--dataset", "d.zarr", "--method", "splh", "--labeled", "1", "--out", "m"],
        "--labeled: expected an integer >= 2, got 1",
    ),
    (
        ["train", "--dataset", "d.zarr", "--method", "sgh", "--sgh-refine", "no", "--out", "m"],
        "--sgh-refine: expected true or false, got 'no'",
    ),
    (
        ["train", "--dataset", "d.zarr", "--method", "dish", "--topology", "mesh", "--out", "m"],
        "--topology: expected one of complete, random, ring, star",
    ),
    (
        ["train", "--dataset", "d.zarr", "--method", "dish", "--partition", "even", "--out", "m"],
        "--partition: invalid choice: 'even'",
    ),
]

CONFIG_CASES = [
    (
        '[train]\ndataset = "d.zarr"\nmethod = "itq"\nout = "m"\noverwrite = "false"\n',
        "overwrite must be true or false, got 'false'",
    ),
    (
        '[train]\ndataset = "d.zarr"\nmethod = "itq"\nout = "m"\nbits = 12.7\n',
        "[train]: bits must be an integer, got 12.7; write bits = 12",
    ),
    ('[train]\ndataset = "d.zarr"\nmethod = "itq"\nout = "m"\nbits = "12"\n', "bits must be an integer, got '12'"),
    (
        '[train]\ndataset = "d.zarr"\nmethod = "itq"\nout = "m"\nworkers = 0\n',
        "bad value for workers (expected a positive integer, got 0)",
    ),
    ('[trian]\ndataset = "d.zarr"\n', "unknown table(s) [trian]"),
    ('[train]\ndataset = "d.zarr"\nmethod = "itq"\nout = "m"\nbitz = 3\n', "unknown key 'bitz'"),
    (
        '[train]\ndataset = "d.zarr"\nmethod = "itq"\nout = "m"\nkernel-cache = "disk"\n',
        "kernel-cache must be one of auto, memory",
    ),
    (
        '[train]\ndataset = "d.zarr"\nmethod = "dpsh"\nout = "m"\ndpsh-balance = "false"\n',
        "dpsh-balance must be true or false, got 'false'",
    ),
    (
        '[train]\ndataset = "d.zarr"\nmethod = "dish"\nout = "m"\ntopology = [[0, 1, 2]]\n',
        "bad value for topology (expected a name or a list of [i, j] node pairs",
    ),
    ('[train]\ndataset = "d.zarr"\nmethod = "dish"\nout = "m"\nnodes = 2.5\n', "nodes must be an integer"),
    (
        'storage-options = 5\n[train]\ndataset = "d.zarr"\nmethod = "itq"\nout = "m"\n',
        "storage-options must be a table or a string",
    ),
]

PIPELINE_CASES = [
    (
        'command = "train"\ndataset = "d.zarr"\nmethod = "itq"\nout = "m"\nbits = 12.7\n',
        "step 1 (train): bits must be an integer",
    ),
    (
        'command = "train"\ndataset = "d.zarr"\nmethod = "itq"\nout = "m"\noverwrite = "false"\n',
        "step 1 (train): overwrite must be true or false",
    ),
    (
        'command = "search"\ndataset = "d.zarr"\nmodel = "m"\ncodes = "c"\nout = "r"\nk = 0\n',
        "step 1 (search): bad value for k",
    ),
]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("argv, fragment", CLI_CASES)
def test_bad_flags(tmp_path, monkeypatch, capsys, argv, fragment):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert fragment in _one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text, fragment", CONFIG_CASES)
def test_bad_config_values(tmp_path, monkeypatch, capsys, text, fragment):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text(text)
    assert main(["train", "--config", "c.toml"]) == 2
    err = _one_line_error(capsys)
    assert fragment in err and "config file c.toml" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]


@pytest.mark.parametrize("step, fragment", PIPELINE_CASES)
def test_bad_pipeline_steps(tmp_path, capsys, step, fragment):
    (tmp_path / "p.toml").write_text(f'[pipeline]\nname = "p"\n\n[[steps]]\n{step}')
    assert main(["run", str(tmp_path / "p.toml")]) == 2
    assert fragment in _one_line_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.toml"]


def test_good_config_values_are_typed(tmp_path):
    from dask_hashcodes.cli.main import parse_args

    (tmp_path / "c.toml").write_text(
        '[evaluate]\ndataset = "d.zarr"\nbits = [16, 32]\nks = "1,10"\nquiet = true\n'
        "[storage-options]\nanon = true\n[train]\nbits = 99\n"
    )
    command, values = parse_args(["evaluate", "--config", str(tmp_path / "c.toml"), "--out", "rep"])
    assert command == "evaluate"
    assert values["bits"] == [16, 32] and values["ks"] == [1, 10] and values["quiet"] is True
    assert values["storage_options"] == {"anon": True}
    assert json.dumps(values["storage_options"]) == '{"anon": true}'
