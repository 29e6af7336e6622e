"""The method lists and search defaults the command line shows come from the code that
uses them: --method and --methods name every registered method, and a re-ranking search
takes the inverted file's measured candidates default."""

import contextlib
import io

import pytest

from dask_hashcodes.cli.main import build_parser
from dask_hashcodes.cli.options import options_of
from dask_hashcodes.evaluation.evaluate import DEFAULT_KS
from dask_hashcodes.hashing.registry import BASELINE_METHODS, DEMO_METHODS, METHOD_NAMES
from dask_hashcodes.indexes.rerank import K_FACTOR, check_rerank


def _help(argv, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "2000")  # one line per option: no wrapping inside a name
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    return out.getvalue()


def _option_line(text: str, flag: str) -> str:
    return next(line for line in text.splitlines() if line.strip().startswith(f"{flag} "))


@pytest.mark.parametrize("command, flag", [("train", "--method"), ("evaluate", "--methods"), ("demo", "--methods")])
def test_method_help_names_every_registered_method(command, flag, monkeypatch):
    line = _option_line(_help([command, "--help"], monkeypatch), flag)
    words = set(line.replace(",", " ").replace("(", " ").replace(")", " ").replace(";", " ").split())
    missing = [name for name in METHOD_NAMES if name not in words]
    assert not missing, (flag, missing)


def test_method_list_defaults_come_from_the_registry_and_the_evaluation():
    assert options_of("evaluate")["methods"].default_for("evaluate") == list(BASELINE_METHODS)
    assert options_of("demo")["methods"].default_for("demo") == list(DEMO_METHODS)
    assert options_of("evaluate")["ks"].default_for("evaluate") == list(DEFAULT_KS)


@pytest.mark.parametrize("rerank", ["exact", "asymmetric"])
@pytest.mark.parametrize("k", [None, 1, 10, 37])
def test_rerank_default_candidates_is_the_inverted_files(rerank, k):
    assert check_rerank(rerank, None, k) == K_FACTOR * (100 if k is None else k)
    assert check_rerank(rerank, 5, 5) == 5  # a given count is kept


def test_candidates_help_shows_the_default_in_use(monkeypatch):
    text = " ".join(_help(["search", "--help"], monkeypatch).split())
    assert (
        f"--candidates CANDIDATES Hamming candidates per query that --rerank re-ranks (default {K_FACTOR} x k)" in text
    )
