"""The layers, checked on the source: no import cycles, kernels import nothing of ours,
storage runs no Dask computation, the command line (``dask_hashcodes.cli``) only parses and
prints and nothing imports it,
and the library never imports ``benchmarks/`` or ``tests/``.

Imports are read with ``ast`` from every module under ``pipeline/`` (the folders are the import
names: ``pipeline/dask_hashcodes/cli/main.py`` is ``dask_hashcodes.cli.main``), those inside
functions included (a deferred import still is a dependency).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "pipeline"  # the folder whose sub-folders are the import names
JOBS = "dask_hashcodes.cli"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(SOURCE.rglob("*.py"))}


def _is_jobs(name: str) -> bool:
    return name == JOBS or name.startswith(JOBS + ".")


def _imports(path: Path, modules) -> set[str]:
    """Our modules that ``path`` imports (``from a import b`` counts a.b when b is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names
            ]
        else:
            continue
        found.update(n for n in names if n.split(".")[0] in ("dask_hashcodes", "benchmarks", "tests"))
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles(import_graph()) == []


def test_kernels_import_nothing_of_ours():
    for name, deps in import_graph().items():
        if name.startswith("dask_hashcodes.kernels"):
            assert {d for d in deps if not d.startswith("dask_hashcodes.kernels")} == set(), name


def test_nothing_in_the_library_imports_the_jobs():
    for name, deps in import_graph().items():
        if not _is_jobs(name):
            assert not any(_is_jobs(d) for d in deps), name


def test_the_library_never_imports_the_benchmarks_or_tests():
    """Nothing under pipeline/, the command line included, imports ``benchmarks`` or ``tests``,
    at the top of a module or inside a function: the benchmarks run as ``python -m benchmarks``
    from a checkout and import the library, never the reverse (loading them by name, or
    editing sys.path to reach them, is refused by tests/test_boundaries.py)."""
    users = {name for name, deps in import_graph().items() if any(d.startswith(("benchmarks", "tests")) for d in deps)}
    assert users == set()


def _calls(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return names


def _third_party(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_storage_runs_no_dask_computation():
    for name, path in _modules().items():
        if name.startswith("dask_hashcodes.storage"):
            assert not _calls(path) & {"compute", "persist", "store", "submit", "gather"}, name
            assert "distributed" not in _third_party(path), name
            assert not any(
                d.startswith(
                    (
                        "dask_hashcodes.distributed",
                        "dask_hashcodes.hashing",
                        "dask_hashcodes.evaluation",
                        "dask_hashcodes.workflows",
                    )
                )
                for d in import_graph()[name]
            ), name


def test_jobs_only_parse_and_print():
    for name, path in _modules().items():
        if _is_jobs(name):
            assert not _third_party(path) & {"numpy", "dask", "distributed", "zarr", "scipy"}, name
            assert not _calls(path) & {"compute", "persist", "submit", "gather"}, name


def _our_imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names imported from it) of every ``dask_hashcodes`` import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "dask_hashcodes"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "dask_hashcodes":
                found.append((node.module, [a.name for a in node.names]))
    return found


def test_every_import_resolves_to_its_file_by_the_folder_names():
    """A static reader (an editor, a type checker, a grep for the dotted path) finds every
    imported module at ``pipeline/<dotted path>``: no setuptools package-dir mapping exists to
    learn first. ``from M import N`` names a module file or a name of M."""
    assert "package-dir" not in (REPO / "pyproject.toml").read_text()
    modules = _modules()
    sources = [p for folder in ("pipeline", "tests", "benchmarks") for p in sorted((REPO / folder).rglob("*.py"))]
    checked = 0
    for path in sources:
        for module, names in _our_imports(path):
            assert module in modules, f"{path.relative_to(REPO)}: {module} has no file under pipeline/"
            file = SOURCE.joinpath(*module.split("."))
            assert modules[module] in (file.with_suffix(".py"), file / "__init__.py"), module
            text = modules[module].read_text()
            for name in names:
                found = f"{module}.{name}" in modules or re.search(rf"\b{re.escape(name)}\b", text)
                assert found, f"{path.relative_to(REPO)}: {name} is neither a module nor a name of {module}"
                checked += 1
    assert checked > 500
