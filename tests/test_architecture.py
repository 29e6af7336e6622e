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


# The layers, lowest first (docs/code-layout.md draws them): a module imports from its own
# folder and from the layers before it, never from a later layer or a sibling on the same
# line. errors, config, validation and the package root serve every layer.
LAYERS = (
    ("kernels", "deep"),
    ("storage",),
    ("distributed",),
    ("views",),
    ("hashing", "indexes", "data"),
    ("evaluation",),
    ("workflows",),
    ("cli",),
)
SHARED = ("errors", "config", "validation")


def _layer(module: str) -> tuple[int, str] | None:
    """(rank, folder) of one of our modules; None for the shared modules and the package root."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in SHARED:
        return None
    rank = next((rank for rank, names in enumerate(LAYERS) if parts[1] in names), None)
    assert rank is not None, f"{module} belongs to no layer: add its folder to LAYERS and to docs/code-layout.md"
    return rank, parts[1]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """The imports of ``graph`` that point to a later layer, to a sibling, or (from a shared
    module) to any layer."""
    wrong = []
    for name, deps in graph.items():
        here = _layer(name)
        for dep in sorted(d for d in deps if d.split(".")[0] == "dask_hashcodes"):
            there = _layer(dep)
            if there is None or (here is not None and there[1] == here[1]):
                continue
            if here is None or there[0] >= here[0]:
                wrong.append(f"{name} -> {dep}")
    return wrong


def test_each_layer_imports_only_the_layers_before_it():
    assert layer_violations(import_graph()) == []


def test_the_layer_check_finds_upward_and_sideways_imports():
    planted = {
        "dask_hashcodes.kernels.a": {"dask_hashcodes.storage.b", "dask_hashcodes.errors"},
        "dask_hashcodes.hashing.c": {"dask_hashcodes.indexes.d", "dask_hashcodes.hashing.e"},
        "dask_hashcodes.validation": {"dask_hashcodes.kernels.f"},
        "dask_hashcodes.cli.g": {"dask_hashcodes.kernels.h", "dask_hashcodes.workflows"},
    }
    assert layer_violations(planted) == [
        "dask_hashcodes.kernels.a -> dask_hashcodes.storage.b",
        "dask_hashcodes.hashing.c -> dask_hashcodes.indexes.d",
        "dask_hashcodes.validation -> dask_hashcodes.kernels.f",
    ]


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


def _private(name: str) -> bool:
    """A leading underscore marks a name as its module's own; dunders (``__version__``) are not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _absolute(module: str, node: ast.ImportFrom) -> str | None:
    """The absolute module of ``from ... import``, relative imports resolved from ``module``."""
    if node.level == 0:
        return node.module
    package = module.split(".")[: len(module.split(".")) - node.level]
    return ".".join([*package, *([node.module] if node.module else [])]) or None


def _dotted(node) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, None for anything else (a call, a subscript)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def private_name_uses(module: str, path: Path, modules) -> list[str]:
    """Where ``module`` reaches a private name of another of our modules: ``from M import _x``
    (multi-line and relative imports included), or ``alias._x`` / ``dask_hashcodes.m._x`` with
    ``alias`` bound to one of our modules by an import."""
    tree = ast.parse(path.read_text())
    aliases, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "dask_hashcodes":
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            if not source or source.split(".")[0] != "dask_hashcodes":
                continue
            for a in node.names:
                if _private(a.name) and source != module:
                    found.append(f"{module}:{node.lineno}: from {source} import {a.name}")
                if f"{source}.{a.name}" in modules:
                    aliases[a.asname or a.name] = f"{source}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = _dotted(node.value)
            if owner is None or owner.split(".")[0] not in aliases:
                continue
            root, _, rest = owner.partition(".")
            target = ".".join(filter(None, [aliases[root], rest]))
            if target in modules and target != module:
                found.append(f"{module}:{node.lineno}: {owner}.{node.attr} ({target})")
    return found


def test_no_module_imports_another_modules_private_name():
    """A name with a leading underscore is its module's own: another module that needs it gets
    a public name (or the code moves to where it is used), so a module's private helpers can
    change without breaking a distant caller."""
    modules = _modules()
    found = [use for name, path in modules.items() for use in private_name_uses(name, path, modules)]
    assert found == []


def test_the_private_name_check_finds_imports_and_attribute_access(tmp_path):
    """The check above is not vacuous: each form of reaching a private name is found, a
    dunder and a module's own private names are not."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from dask_hashcodes.kernels.hamming import (\n    as_words,\n    _hidden,\n)\n"
        "from dask_hashcodes.kernels import l2\nimport dask_hashcodes.kernels.codes as codes\n"
        "import dask_hashcodes.kernels.stats\nfrom dask_hashcodes import __version__\n"
        "from dask_hashcodes.planted import _own\n"
        "l2._secret(codes._other, dask_hashcodes.kernels.stats._third, l2.__name__)\n"
    )
    modules = _modules()
    found = private_name_uses("dask_hashcodes.planted", planted, modules)
    assert [f.split(": ", 1)[1] for f in found] == [
        "from dask_hashcodes.kernels.hamming import _hidden",
        "l2._secret (dask_hashcodes.kernels.l2)",
        "codes._other (dask_hashcodes.kernels.codes)",
        "dask_hashcodes.kernels.stats._third (dask_hashcodes.kernels.stats)",
    ]


GENERIC_LAYERS = ("distributed", "storage", "evaluation", "indexes")


def test_no_method_name_in_generic_module_names():
    """The generic layers serve every hashing method: a module named after one (``dish_*.py``
    in distributed/) is method code in the wrong place, and belongs next to the method's
    estimator or kernel."""
    from dask_hashcodes.hashing.registry import HASHERS

    methods = {name.replace("-", "_") for name in HASHERS}
    named = [
        f"{layer}/{path.name}"
        for layer in GENERIC_LAYERS
        for path in sorted((SOURCE / "dask_hashcodes" / layer).glob("*.py"))
        if methods & set(path.stem.split("_"))
    ]
    assert [layer for layer in GENERIC_LAYERS if (SOURCE / "dask_hashcodes" / layer).is_dir()] == list(GENERIC_LAYERS)
    assert named == []
