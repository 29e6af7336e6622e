"""The library stands apart from the repository around it.

* Its comments and docstrings cite no ``benchmarks/`` path: measurements live in the
  benchmark results and the documentation, which say which machine and which run made them;
  code says why in words.
* It never reaches into the checkout: no ``sys.path`` or ``PYTHONPATH`` edits, and no module
  of ``benchmarks`` or ``tests`` loaded by name (``importlib.import_module("benchmarks...")``,
  ``__import__``), beyond the import statements ``tests/test_architecture.py`` checks.

Read with ``ast`` and ``tokenize`` from every module under ``pipeline/``.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIBRARY = REPO / "pipeline"
BENCHMARK_PATH = re.compile(r"\bbenchmarks/")
CHECKOUT_PACKAGES = ("benchmarks", "tests")
LOADERS = {"import_module", "__import__", "spec_from_file_location", "run_module", "run_path"}


def _library() -> list[Path]:
    modules = sorted(LIBRARY.rglob("*.py"))
    assert len(modules) > 50, "the library's modules were not found"
    return modules


def commentary(source: str):
    """(line, text) of every docstring and comment of ``source``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def benchmark_citations(source: str) -> list[str]:
    return [f"line {line}: {m.group(0)}..." for line, text in commentary(source) for m in BENCHMARK_PATH.finditer(text)]


def _dotted(node) -> str:
    """``sys.path`` for an Attribute chain of Names, '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def checkout_reaches(source: str) -> list[str]:
    """Every use of ``sys.path``, every ``PYTHONPATH`` string, and every call of a module
    loader (importlib, runpy, ``__import__``) naming a module of the checkout."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _dotted(node) == "sys.path":
            found.append((node.lineno, "uses sys.path"))
        elif isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name == "path" for a in node.names):
            found.append((node.lineno, "imports sys.path"))
        elif isinstance(node, ast.Constant) and node.value == "PYTHONPATH":
            found.append((node.lineno, "names PYTHONPATH"))
        elif isinstance(node, ast.Call) and _dotted(node.func).split(".")[-1] in LOADERS:
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if any(n.split(".")[0].split("/")[0] in CHECKOUT_PACKAGES for n in names):
                found.append((node.lineno, f"loads {names[0]!r} by name"))
    return [f"line {line}: {what}" for line, what in sorted(found)]


def test_library_comments_and_docstrings_cite_no_benchmark_paths():
    found = [f"{p.relative_to(REPO)} {hit}" for p in _library() for hit in benchmark_citations(p.read_text())]
    assert found == [], "say why in words; the numbers belong in docs/ and the benchmark results:\n" + "\n".join(found)


def test_the_library_never_reaches_into_the_checkout():
    found = [f"{p.relative_to(REPO)} {hit}" for p in _library() for hit in checkout_reaches(p.read_text())]
    assert found == [], "the library must not depend on the repository around it:\n" + "\n".join(found)


def test_the_scans_see_what_they_look_for():
    source = (
        '"""Speeds in benchmarks/results/search_64b.md."""\n'
        "import importlib, os, sys\n"
        "from sys import path\n"
        "# timings: benchmarks/results/x.md\n"
        "def f():\n"
        "    sys.path.insert(0, '/checkout')\n"
        "    os.environ['PYTHONPATH'] = '/checkout'\n"
        "    return importlib.import_module('benchmarks.harness.runs'), __import__('tests.schemas')\n"
        "def g():\n"
        "    return importlib.import_module('dask_hashcodes.kernels'), 'results/ of a search'\n"
    )
    assert benchmark_citations(source) == ["line 1: benchmarks/...", "line 4: benchmarks/..."]
    assert checkout_reaches(source) == [
        "line 3: imports sys.path",
        "line 6: uses sys.path",
        "line 7: names PYTHONPATH",
        "line 8: loads 'benchmarks.harness.runs' by name",
        "line 8: loads 'tests.schemas' by name",
    ]
