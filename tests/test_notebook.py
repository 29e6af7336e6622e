"""notebooks/quickstart.ipynb executed end to end in a real Jupyter kernel (this venv's
python), with papermill-style parameters: a 2-worker local cluster started by the notebook,
20k Fashion-MNIST rows, ITQ / DisH / LSH at 32 bits. It is executed as an in-memory copy,
never written back: the committed notebook keeps the outputs of the run that produced it
(python notebooks/run.py), and uses only the public API."""

from __future__ import annotations

import ast
import base64
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest

from tests.conftest import require_fashion_mnist

pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "quickstart.ipynb"

PARAMETERS = """\
SCHEDULER = None
WORKERS, THREADS = 2, 1
DATASET = "fashion-mnist"
N_ROWS = 20_000
CHUNK_ROWS = 5_000
N_QUERIES = 500
BITS = 32
ITQ_ITER = 20
DISH_NODES = 4
DISH_MAX_ITER = 8
SHOW_QUERIES = 2
SEED = 0
OUT = {out!r}
"""

# appended to the in-memory copy only: which interpreter ran the notebook
PROBE = "import sys, json\nprint(json.dumps({'executable': sys.executable, 'prefix': sys.prefix}))"


def _outputs(cell, output_type=None):
    return [o for o in cell.get("outputs", []) if output_type is None or o["output_type"] == output_type]


def _stdout(cell) -> str:
    return "".join(o["text"] for o in _outputs(cell, "stream") if o["name"] == "stdout")


@pytest.fixture(scope="module")
def executed(tmp_path_factory, data_dir):
    """(executed notebook, OUT directory, bytes of the committed notebook before the run)."""
    require_fashion_mnist()
    from nbclient import NotebookClient

    committed = NOTEBOOK.read_bytes()
    nb = nbformat.reads(committed.decode(), as_version=4)
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and nb.cells.index(params[0]) == 1, "the first code cell holds the parameters"
    tmp = tmp_path_factory.mktemp("notebook")
    out = tmp / "out"
    params[0].source = PARAMETERS.format(out=str(out))
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    env["DHASH_DATA_DIR"] = str(data_dir)  # Fashion-MNIST ingested into the session's data directory
    client = NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp)}})
    client.execute(env=env)
    return nb, out, committed


def test_kernel_is_this_venv(executed):
    nb, _, _ = executed
    probe = json.loads(_stdout(nb.cells[-1]))
    assert probe["prefix"] == sys.prefix and probe["executable"] == sys.executable


def _maps(report) -> dict:
    return {r.get("label", r["method"]): r["metrics"]["map"] for r in report["results"]}


def test_learned_codes_beat_lsh_on_fashion_mnist(executed):
    nb, out, _ = executed
    from tests.schemas import validate

    report = json.loads((out / "report" / "report.json").read_text())
    validate(report, "report.schema.json")
    assert report["dataset"]["source"] == "fashion-mnist" and report["ground_truth"]["kind"] == "labels"
    assert report["dataset"]["n"] == 20000 and report["split"]["n_query"] == 500
    m = _maps(report)
    assert set(m) == {"lsh", "itq", "dish (DisH2)", "dish (DisH1)"}
    assert m["itq"] > m["lsh"] + 0.05 and m["dish (DisH2)"] > m["lsh"] + 0.05, m
    for name in ("report.md", "precision_at_k.png", "pr_curve.png"):
        assert (out / "report" / name).stat().st_size > 0


def test_models_codes_and_outputs_left_by_the_notebook(executed):
    nb, out, _ = executed
    from dask_hashcodes import load_model, open_codes

    for method in ("lsh", "itq", "dish"):
        model = load_model(out / "models" / f"{method}32")
        codes = open_codes(out / "codes" / f"{method}32.zarr", model)
        assert (codes.n, codes.code_size, codes.n_bits) == (20000, 4, 32)
    _check_outputs(nb)
    assert _stdout(nb.cells[-2]).strip() == "closed"


def _check_outputs(nb) -> None:
    """What a reader sees: the dashboard link, the search table, the quality table, a plot."""
    markdown = [
        o["data"]["text/markdown"]
        for c in nb.cells
        for o in _outputs(c, "display_data")
        if "text/markdown" in o["data"]
    ]
    assert any("Dask dashboard: [http://127.0.0.1:" in t and "/status" in t for t in markdown), markdown
    pngs = [o["data"]["image/png"] for c in nb.cells for o in _outputs(c) if "image/png" in o.get("data", {})]
    assert pngs and base64.b64decode(pngs[0]).startswith(b"\x89PNG"), "no inline plot in the outputs"
    assert any("| itq |" in t and "| dish (DisH2) |" in t for t in markdown), markdown  # the quality table
    assert any("| itq | " in t and "Hamming" in t for t in markdown)  # the search results
    assert not [o for c in nb.cells for o in _outputs(c, "error")]


def test_committed_notebook_shows_a_real_run_and_imports_only_the_public_api(executed):
    _, _, committed = executed
    assert NOTEBOOK.read_bytes() == committed  # executed in memory, nothing written back
    nb = nbformat.reads(committed.decode(), as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "commit the notebook with the outputs of a run"
    _check_outputs(nb)
    check_public_names(code)


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _trees(code):
    """The code cells parsed (IPython's %magic lines left out)."""
    return [ast.parse("\n".join(line for line in c.source.splitlines() if not line.startswith("%"))) for c in code]


def check_public_names(code) -> None:
    """Only public names of dask_hashcodes: ``import dask_hashcodes`` / ``from dask_hashcodes import NAME`` with NAME in
    ``dask_hashcodes.__all__``, ``dask_hashcodes.NAME`` likewise, never a submodule
    (``dask_hashcodes.x.y``)."""
    import types

    import dask_hashcodes

    def public(name: str) -> bool:
        value = getattr(dask_hashcodes, name, None)
        # a module is not a public name
        return name in dask_hashcodes.__all__ and not isinstance(value, types.ModuleType)

    nodes = [node for tree in _trees(code) for node in ast.walk(tree)]
    imports = [n for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert len(imports) <= 4, [ast.unparse(i) for i in imports]
    for node in imports:
        if isinstance(node, ast.ImportFrom):
            assert node.module.split(".")[0] != "dask_hashcodes" or node.module == "dask_hashcodes", ast.unparse(node)
            if node.module == "dask_hashcodes":
                assert all(public(a.name) for a in node.names), ast.unparse(node)
        else:
            names = [a.name for a in node.names if a.name.split(".")[0] == "dask_hashcodes"]
            assert names in ([], ["dask_hashcodes"]), ast.unparse(node)
    used = [
        n
        for n in nodes
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "dask_hashcodes"
    ]
    assert used, "the notebook calls the top-level functions (dask_hashcodes.train, dask_hashcodes.search, ...)"
    assert all(public(n.attr) for n in used), sorted({n.attr for n in used if not public(n.attr)})


def test_notebook_uses_only_public_dhash_names():
    """Checked on the source, without running the notebook."""
    nb = nbformat.reads(NOTEBOOK.read_text(), as_version=4)
    check_public_names(_code_cells(nb))
