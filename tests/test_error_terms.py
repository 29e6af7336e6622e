"""The boundary between the library and the command line, in both directions.

* Library errors speak Python: they name the parameter (`` `overwrite=True` ``, ``n_bits``),
  never a command-line flag; the CLI translates the marked parameters into its flags
  through one table (dask_hashcodes.cli.commands.PARAMETER_FLAGS), so its users still read
  ``--overwrite``.
* The CLI runs its checks before work (check_before_work) exactly once per command, also
  for each step of ``dhash run``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

import dask_hashcodes
from dask_hashcodes.cli import commands
from dask_hashcodes.cli.main import main
from dask_hashcodes.errors import PARAMETER, InputError

LIBRARY = Path(dask_hashcodes.__file__).resolve().parent
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# string constants that may name a flag: none. (Docstrings are documentation, not messages:
# they may describe the command line, and are not scanned.)
FLAG_ALLOWED: dict[str, str] = {}
# parameter marks that have no flag on purpose: report metric names, not parameters
UNMAPPED_ALLOWED = {"map", "map_tie"}


def _library_strings():
    """(file:line, text) of every string constant of the library that is not a docstring."""
    for path in sorted(LIBRARY.rglob("*.py")):
        if path.relative_to(LIBRARY).parts[0] == "cli":
            continue  # the command line names its own flags
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                yield f"{path.relative_to(LIBRARY)}:{node.lineno}", node.value


def test_no_library_message_names_a_flag():
    found = [
        f"{where}: {m.group(0)}"
        for where, text in _library_strings()
        for m in FLAG.finditer(text)
        if FLAG_ALLOWED.get(where) != m.group(0)
    ]
    assert not found, "library strings naming CLI flags (name the Python parameter, `name=value`):\n" + "\n".join(found)


def test_every_parameter_a_library_message_marks_has_a_flag():
    """A mark the table cannot translate would reach CLI users in Python spelling."""
    unmapped = sorted(
        f"{where}: `{m.group(1)}`"
        for where, text in _library_strings()
        for m in PARAMETER.finditer(text)
        if m.group(1) not in commands.PARAMETER_FLAGS and m.group(1) not in UNMAPPED_ALLOWED
    )
    assert not unmapped, "add these to RENAMED_PARAMETERS in pipeline/dask_hashcodes/cli/commands.py:\n" + "\n".join(
        unmapped
    )


@pytest.mark.parametrize(
    ("library", "cli"),
    [
        ("output x exists; pass `overwrite=True`", "output x exists; pass --overwrite"),
        ("needs exactly one of `top_k=K` or `top_percent=P`", "needs exactly one of --top-k K or --top-percent P"),
        ("re-rank with exact distances (`rerank='exact'`)", "re-rank with exact distances (--rerank exact)"),
        ("lower kappa (`n_similar`/`n_dissimilar`)", "lower kappa (--kappa-plus/--kappa-minus)"),
        ("use at most 8 bits (`n_bits`)", "use at most 8 bits (--bits)"),
        ("split with `name='default'`", "split with --name default"),
        ('e.g. `storage_options={"anon":true}`', "e.g. --storage-options '{\"anon\":true}'"),
        (
            "The 'dictionary' parameter of DisH must be a node number in [0, 3]. Got 7 instead.",
            "--dictionary must be a node number in [0, 3]. Got 7 instead.",
        ),
        (
            "KSH (supervised) requires y to be passed, but the target y is None (the data has no labels); pass "
            "fit(X, y), evaluate a labelled dataset, or use an unsupervised method",
            "KSH (supervised) needs labels, and the dataset has none; evaluate a labelled dataset, or use an "
            "unsupervised method",
        ),
        (
            "partition='by-label' needs labels: call fit(X, y) or use a dataset with labels",
            "--partition by-label needs labels: use a dataset with labels",
        ),
        ("`n_lists` must lie in [1, 9]", "--lists must lie in [1, 9]"),
        # no flag, or not a parameter: left as written
        ("`max_iter` differs per method; see `dhash train`", "`max_iter` differs per method; see `dhash train`"),
    ],
)
def test_cli_message_shows_flags(library, cli):
    assert commands.cli_message(library) == cli


def test_parameters_of_an_error_are_its_marks():
    exc = InputError("give either `labels=FILE` or `label_column=NAME`, not both")
    assert exc.parameters == ["labels", "label_column"]


def test_python_callers_see_parameters_and_cli_users_flags(tmp_path, capsys):
    """The same refusal: the workflow names its parameters, the command line its flags."""
    from dask_hashcodes import workflows

    src = tmp_path / "x.npy"
    np.save(src, np.zeros((20, 4), dtype=np.float32))
    np.save(tmp_path / "labels.npy", np.zeros(20, dtype=np.int64))
    with pytest.raises(InputError) as raised:
        workflows.ingest(src, tmp_path / "a.zarr", labels=tmp_path / "labels.npy", label_column="label")
    assert "`labels=FILE`" in str(raised.value) and "--" not in str(raised.value)
    assert raised.value.parameters == ["labels", "label_column"]

    argv = ["ingest", str(src), "--out", str(tmp_path / "b.zarr"), "--labels", str(tmp_path / "labels.npy")]
    assert main([*argv, "--label-column", "label", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "give either --labels FILE or --label-column NAME, not both" in err, err
    assert "`" not in err, err


def _count_checks(monkeypatch) -> list:
    calls = []
    real = commands.check_before_work

    def counted(command, values):
        calls.append(command)
        return real(command, values)

    monkeypatch.setattr(commands, "check_before_work", counted)
    return calls


def test_a_command_checks_before_work_once(monkeypatch, cluster, tmp_path):
    calls = _count_checks(monkeypatch)
    out = tmp_path / "ds.zarr"
    argv = ["synth", "sift", "--n", 2000, "--chunk-rows", 1000, "--out", out, "--scheduler", cluster.scheduler_address]
    assert main([str(a) for a in [*argv, "--quiet"]]) == 0
    assert calls == ["synth"]


def test_a_run_step_checks_before_work_once(monkeypatch, tmp_path):
    calls = _count_checks(monkeypatch)
    np.save(tmp_path / "x.npy", np.zeros((20, 4), dtype=np.float32))
    pipe = tmp_path / "p.toml"
    pipe.write_text(
        f'[pipeline]\nname = "once"\nworkdir = "work"\n\n'
        f'[[steps]]\ncommand = "ingest"\nsource = "{tmp_path / "x.npy"}"\nout = "ds.zarr"\n'
    )
    assert main(["run", str(pipe), "--quiet"]) == 0
    assert calls == ["ingest"]
    calls.clear()
    assert main(["run", str(pipe), "--quiet"]) == 0  # up to date: skipped, nothing checked
    assert calls == []
    assert main(["run", str(pipe), "--force", "--quiet"]) == 0  # run again: checked once
    assert calls == ["ingest"]
