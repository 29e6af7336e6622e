"""Method-specific behaviour lives in estimator hooks (``Hasher.evaluation_results``,
``Hasher.evaluation_options``, ``Hasher.training_plot``), never in conditionals of the
generic layers on which method runs.

The source check reads the generic layers (evaluation, workflows, indexes, storage,
distributed and the command line) with ``ast``: no string literal that is a method name (a
registered method or variant), no reference to a specific estimator class (so no
``isinstance(model, DisH)``), and no identifier (a function, class, variable, attribute,
argument, keyword or import alias) with a method name as one of its words (``dish_nodes``,
``itq_rotation``, ``ItqRotation``). Nothing needs an exception: the registry
(``dask_hashcodes.hashing.registry``) is where method names belong, the default method lists
included, and the command line reads them from there.

Words: an identifier splits at underscores, before digits (``dish2_dictionaries`` is
DisH's) and at each capital of camelCase; a method name, split the same way (``agh2``,
``dish_allreduce``), matches whole words only, so ``sh`` flags ``sh_bits`` but never ``shape`` or ``shuffle``. Two variant
names are ordinary English words, MAC's two-step starts ``cut`` and ``quad`` (also the
values of its ``solver``): as identifier words they mean a cut of a block or a quadratic
solve, so identifiers are checked for their method ``mac`` and the compound variants
``maccut`` and ``macquad``, and the bare words only as whole string literals.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dask.array as da
import numpy as np
import pytest

from dask_hashcodes.errors import InputError
from dask_hashcodes.evaluation.evaluate import evaluation_protocol
from dask_hashcodes.evaluation.report import has_training_plot, training_plots
from dask_hashcodes.hashing import HASHERS, ITQ, METHOD_NAMES, DisH
from dask_hashcodes.hashing.base import OBJECTIVE_PLOT, Scored
from dask_hashcodes.views import view_of

REPO = Path(__file__).resolve().parents[1]
GENERIC = (
    "pipeline/dask_hashcodes/evaluation",
    "pipeline/dask_hashcodes/workflows.py",
    "pipeline/dask_hashcodes/indexes",
    "pipeline/dask_hashcodes/storage",
    "pipeline/dask_hashcodes/distributed",
    "pipeline/dask_hashcodes/cli",
)
# method names that are ordinary English words: matched as whole string literals only
ORDINARY_WORDS = {"cut", "quad"}


def _generic_modules() -> list[Path]:
    paths = [REPO / p for p in GENERIC]
    return sorted(q for p in paths for q in ([p] if p.suffix == ".py" else p.rglob("*.py")))


def identifier_words(name: str) -> list[str]:
    """``dish_nodes`` -> [dish, nodes]; ``ItqRotation`` -> [itq, rotation]; ``agh2_layers``
    -> [agh, 2, layers]; ``HTTPServer`` -> [http, server]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])|([A-Z])([A-Z][a-z])", r"\1\3_\2\4", name)
    spaced = re.sub(r"([A-Za-z])([0-9])", r"\1_\2", spaced)
    return [w.lower() for w in spaced.split("_") if w]


def _identifiers(tree):
    """(node, identifier) of every name the source defines or uses."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node, node.id
        elif isinstance(node, ast.Attribute):
            yield node, node.attr
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node, node.name
        elif isinstance(node, ast.arg):
            yield node, node.arg
        elif isinstance(node, ast.keyword) and node.arg:
            yield node, node.arg
        elif isinstance(node, ast.alias):
            yield node, (node.asname or node.name).split(".")[-1]
        if isinstance(node, ast.ImportFrom | ast.Import):  # the modules: hashing.dish_nodes
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for part in {p for m in modules for p in m.split(".") if p}:
                yield node, part


def method_specific(source: str) -> list[str]:
    """Every method name literal, estimator class reference and identifier with a method
    name as a word in ``source``, by position."""
    names = {n.lower() for n in METHOD_NAMES}
    words = {n.replace("-", "_") for n in names - ORDINARY_WORDS}
    word_parts = {w: identifier_words(w) for w in words}  # dish_allreduce -> [dish, allreduce]
    classes = {cls.__name__ for cls in HASHERS.values()}
    hits = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in names:
            hits.add((node.lineno, node.col_offset, f"method name {node.value!r}"))
        elif isinstance(node, ast.ImportFrom) and any(a.name in classes for a in node.names):
            imported = ", ".join(a.name for a in node.names if a.name in classes)
            hits.add((node.lineno, node.col_offset, f"imports estimator class {imported}"))
    for node, name in _identifiers(tree):
        line, column = getattr(node, "lineno", None), getattr(node, "col_offset", 0)
        if line is None:  # an import alias before Python 3.10 has no position
            continue
        if name in classes:
            if not isinstance(node, ast.alias):  # reported as the import above
                hits.add((line, column, f"estimator class {name}"))
            continue
        parts = identifier_words(name)
        found = sorted(
            w for w, wp in word_parts.items() if any(parts[i : i + len(wp)] == wp for i in range(len(parts)))
        )
        if found:
            hits.add((line, column, f"identifier {name} (method {', '.join(found)})"))
    return [f"line {line}: {what}" for line, _, what in sorted(hits)]


def test_generic_layers_name_no_method():
    modules = _generic_modules()
    assert len(modules) > 10  # the layers were found
    found = [f"{p.relative_to(REPO)} {hit}" for p in modules for hit in method_specific(p.read_text())]
    assert found == [], "move method-specific behaviour into an estimator hook:\n" + "\n".join(found)


def test_the_source_check_sees_method_conditionals():
    source = (
        "from dask_hashcodes.hashing import DisH\n"
        "def f(model, method):\n"
        '    return isinstance(model, DisH) or method == "mac" or model.method in ("itq", "cut")\n'
    )
    assert method_specific(source) == [
        "line 1: imports estimator class DisH",
        "line 3: estimator class DisH",
        "line 3: method name 'mac'",
        "line 3: method name 'itq'",
        "line 3: method name 'cut'",
    ]


def test_the_source_check_sees_method_identifiers():
    source = (
        "from dask_hashcodes.hashing.dish_nodes import node_rows as dish_rows\n"
        "class ItqRotation:\n"
        "    def fit(self, sh_bits, agh2_layers=2):\n"
        "        self.dish_allreduce_rounds = run(mac_solver='cut')\n"
        "        return model.itq_rotation, maccut\n"
    )
    assert method_specific(source) == [
        "line 1: identifier dish_nodes (method dish)",
        "line 1: identifier dish_rows (method dish)",
        "line 2: identifier ItqRotation (method itq)",
        "line 3: identifier sh_bits (method sh)",
        "line 3: identifier agh2_layers (method agh, agh2)",
        "line 4: identifier dish_allreduce_rounds (method dish, dish_allreduce)",
        "line 4: identifier mac_solver (method mac)",
        "line 4: method name 'cut'",
        "line 5: identifier itq_rotation (method itq)",
        "line 5: identifier maccut (method maccut)",
    ]


def test_ordinary_words_and_longer_words_are_not_method_names():
    """Whole words only: ``sh`` is not in ``shape``, ``mac`` not in ``machine``, ``dish`` not
    in ``dishes``; ``cut`` and ``quad`` as identifier words are English, not MAC's starts."""
    source = (
        "def cut_block(shape, cutoff, quad_form, machine, dishes, shuffle, bread, sha256, h5py):\n"
        "    return mkdir(shape), ShapeChecker, HTTPServer\n"
    )
    assert method_specific(source) == []
    assert identifier_words("HTTPServer") == ["http", "server"]
    assert identifier_words("agh2_layers") == ["agh", "2", "layers"]


# ---------------------------------------------------------------- evaluation hooks -------


class RecordingScorer:
    """A stand-in for ``dask_hashcodes.evaluation.evaluate.Scorer`` that records what a hook asks for."""

    def __init__(self, features, query, seed=0):
        self.view = view_of(features, query)
        self.seed = seed
        self.calls = []

    def symmetric(self, encoder):
        self.calls.append(("symmetric", encoder))
        return {"map": float(len(self.calls))}, {"encode_seconds": 0.0}

    def asymmetric(self, encoder, database_codes):
        self.calls.append(("asymmetric", encoder))
        return {"map": 0.5}, {}

    def grouped(self, database_codes, groups, encode_queries):
        self.calls.append(("grouped", database_codes.compute(), groups.compute(), encode_queries))
        return {"map": 0.25}, {}

    @staticmethod
    def mean_and_std(runs):
        return {"map": float(np.mean([r["map"] for r in runs]))}, {"map": float(np.std([r["map"] for r in runs]))}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 12)) + rng.normal(size=12) * 3
    return da.from_array(X, chunks=(150, 12)), np.arange(0, 600, 20)


def test_default_hook_scores_the_model_itself(data):
    X, query = data
    model = ITQ(8, n_iter=2).fit(X)
    scorer = RecordingScorer(X, query)
    (row,) = model.evaluation_results(scorer, {})
    assert row == Scored({"map": 1.0}, {"encode_seconds": 0.0}) and scorer.calls == [("symmetric", model)]


def test_dish_gives_dish2_over_chosen_dictionaries_and_dish1(data):
    X, query = data
    model = DisH(8, nodes=3, max_iter=2).fit(X)
    scorer = RecordingScorer(X, query, seed=4)
    dish2, dish1 = model.evaluation_results(scorer, {"dish2_dictionaries": 2})
    symmetric = [c[1] for c in scorer.calls if c[0] == "symmetric"]
    assert [m.dictionary for m in symmetric] == dish2.extras["dictionaries"] and len(symmetric) == 2
    assert dish2.variant == "DisH2" and dish2.extras["per_dictionary_map"] == [1.0, 2.0]
    assert dish2.metrics == {"map": 1.5} and dish2.extras["metrics_std"] == {"map": 0.5}
    assert dish1.variant == "DisH1" and dish1.metrics == {"map": 0.25}
    # DisH1: each database row is encoded by the dictionary of the node holding it
    _, codes, groups, encode_queries = scorer.calls[-1]
    database = scorer.view.features.compute()
    for node in range(3):
        rows = groups == node
        assert rows.any() and np.array_equal(codes[rows], model.with_dictionary(node).encode(database[rows]))
    queries = X[query].compute()
    assert np.array_equal(encode_queries(queries)[1], model.with_dictionary(1).encode(queries))


def test_dish_with_one_shared_dictionary_gives_the_default_row(data):
    X, query = data
    scorer = RecordingScorer(X, query)
    (row,) = DisH(8, consensus="allreduce", max_iter=2).fit(X).evaluation_results(scorer, {})
    assert row.variant is None and [c[0] for c in scorer.calls] == ["symmetric"]


def test_dish2_dictionaries_must_be_positive(data):
    X, query = data
    model = DisH(8, nodes=3, max_iter=1).fit(X)
    with pytest.raises(InputError, match="dish2_dictionaries` must be a positive number of nodes; got 0"):
        model.evaluation_results(RecordingScorer(X, query), {"dish2_dictionaries": 0})


def test_evaluation_options_are_recorded_and_unknown_ones_refused():
    assert evaluation_protocol(None) == {"dish2_dictionaries": "all"}
    assert evaluation_protocol({"dish2_dictionaries": None}) == {"dish2_dictionaries": "all"}
    assert evaluation_protocol({"dish2_dictionaries": 3}) == {"dish2_dictionaries": 3}
    with pytest.raises(InputError, match="unknown evaluation option dish2_dictionary; the evaluation options: dish2"):
        evaluation_protocol({"dish2_dictionary": 3})


# ---------------------------------------------------------------- training plots ---------


def _row(method, training, label=None):
    return {"method": method, "n_bits": 16, "training": training, **({"label": label} if label else {})}


def test_training_plots_come_from_the_estimators():
    dish2 = _row("dish", {"objective": [3.0, 2.0], "consensus_residual": [0.1, 0.01]}, "dish (DisH2)")
    dish1 = _row("dish", dish2["training"], "dish (DisH1)")
    allreduce = _row("dish-allreduce", {"objective": [3.0, 2.0]})
    kmh = _row("kmh", {"objective": [5.0, 4.0]})
    mac = _row("maccut", {"mac_path": [{"loss_h": 1.0}, {"loss_h": 0.5}]})
    cut = _row("cut", {"mac_path": [{"loss_h": 1.0}]})  # the two-step start alone: nothing to plot
    adsh = _row("adsh", {"adsh_path": [{"loss": 1.0, "outer": 1}]})
    itq = _row("itq", {"quantization_loss": [2.0, 1.0]})
    groups = training_plots([itq, dish2, dish1, allreduce, kmh, mac, cut, adsh, _row("not-a-method", {})])
    assert [rows for rows in groups.values()] == [[dish2, allreduce], [kmh], [mac], [adsh]]
    assert [plot.n_axes for plot in groups] == [2, 1, 2, 2] and list(groups)[1] is OBJECTIVE_PLOT
    assert not has_training_plot([itq, cut]) and has_training_plot([kmh])


def test_every_training_plot_draws(tmp_path):
    from dask_hashcodes.evaluation.report import _plot
    from dask_hashcodes.storage.location import resolve

    steps = [
        {"iteration": 0, "loss_h": 2.0, "loss_z": 1.5, "validation_precision": 0.5},
        {"iteration": 1, "loss_h": 1.0, "loss_z": 0.9, "validation_precision": 0.6},
        {"iteration": 2, "loss_h": 1.2, "loss_z": 0.8, "validation_precision": 0.55, "kept": False},
    ]
    results = [
        _row("dish", {"objective": [3.0, 2.0], "consensus_residual": [0.1, 0.01]}, "dish (DisH2)"),
        _row("bre", {"objective": [5.0, 4.0, 3.5]}),
        _row("maccut", {"mac_path": steps}),
        _row("adsh", {"adsh_path": [{"loss": 1.0}, {"loss": 0.5, "outer": 1, "validation_map": 0.7}]}),
    ]
    for r in results:
        r["metrics"] = {"precision@10": 0.5, "pr_curve": {"recall": [0.0, 1.0], "precision": [1.0, 0.5]}}
    assert _plot({"results": results}, resolve(tmp_path)) == ["precision_at_k.png", "pr_curve.png", "training.png"]
    assert (tmp_path / "training.png").stat().st_size > 0


def test_evaluation_passes_a_method_its_options_and_records_them(tmp_path):
    """End to end: the DisH option reaches DisH alone (ITQ gets one row), the report names the
    variants, records the option, and draws DisH's training."""
    from dask_hashcodes import workflows
    from dask_hashcodes.storage.datasets import write_dataset

    rng = np.random.default_rng(1)
    X = (rng.normal(size=(1200, 10)) + rng.normal(size=10) * 3).astype(np.float32)
    ds = write_dataset(tmp_path / "ds.zarr", [X], n=1200, d=10, dtype=np.float32, source="synthetic", chunk_rows=300)
    report = workflows.evaluate(
        ds,
        methods=["itq", "dish"],
        bits=[8],
        queries=100,
        ground_truth="euclidean",
        top_k=20,
        ks=[10],
        params={"nodes": 3, "max_iter": 2},
        evaluation_options={"dish2_dictionaries": 2},
        out=tmp_path / "report",
    )
    rows = {r.get("label", r["method"]): r for r in report["results"]}
    assert list(rows) == ["itq", "dish (DisH2)", "dish (DisH1)"]
    assert len(rows["dish (DisH2)"]["dictionaries"]) == 2 and "dictionaries" not in rows["dish (DisH1)"]
    assert report["protocol"]["dish2_dictionaries"] == 2 and report["protocol"]["has_training_plot"]
    assert "training.png" in report["plots"] and (tmp_path / "report" / "training.png").exists()
    with pytest.raises(InputError, match="unknown evaluation option"):
        workflows.evaluate(ds, methods=["itq"], bits=[8], queries=100, evaluation_options={"dish2": 2})
