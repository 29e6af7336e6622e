"""notebooks/quickstart.ipynb executed end to end in a real Jupyter kernel (this venv's
python), with papermill-style parameters: a 2-worker local cluster started by the notebook,
20k Fashion-MNIST rows, ITQ / DisH / LSH at 32 bits. The committed notebook stays clean:
it is executed as an in-memory copy and never written back."""
from __future__ import annotations

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
    env = {k: v for k, v in os.environ.items() if k not in ("DHASH_SCHEDULER", "DASK_SCHEDULER_ADDRESS")}
    env["DHASH_DATA_DIR"] = str(data_dir)   # Fashion-MNIST ingested into the session's data directory
    client = NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp)}})
    client.execute(env=env)
    return nb, out, committed


def test_kernel_is_this_venv(executed):
    nb, _, _ = executed
    probe = json.loads(_stdout(nb.cells[-1]))
    assert probe["prefix"] == sys.prefix and probe["executable"] == sys.executable


def test_learned_codes_beat_lsh_on_fashion_mnist(executed):
    nb, out, _ = executed
    printed = [json.loads(line) for c in nb.cells if c.cell_type == "code"
               for line in _stdout(c).splitlines() if line.startswith('{"dataset"')]
    assert len(printed) == 1
    results = json.loads((out / "results.json").read_text())
    assert printed[0] == results
    assert results["dataset"] == "fashion-mnist" and results["ground_truth"] == "labels"
    assert results["n"] == 20000 and results["n_queries"] == 500 and results["bits"] == 32
    m = results["map"]
    assert set(m) == {"lsh", "itq", "dish"}
    assert m["itq"] > m["lsh"] + 0.05 and m["dish"] > m["lsh"] + 0.05, m
    # the package's report of the same run: schema-valid, same numbers, plots on disk
    from tests.schemas import validate
    report = json.loads((out / "report" / "report.json").read_text())
    validate(report, "report.schema.json")
    assert {r["method"]: round(r["metrics"]["map"], 4) for r in report["results"]} == m
    for name in ("report.md", "precision_at_k.png", "pr_curve.png"):
        assert (out / "report" / name).stat().st_size > 0


def test_models_codes_and_outputs_left_by_the_notebook(executed):
    nb, out, _ = executed
    from pipeline import load_model
    from pipeline.storage.codes import open_codes
    for method in ("lsh", "itq", "dish"):
        model = load_model(out / "models" / f"{method}32")
        arr, attrs = open_codes(out / "codes" / f"{method}32.zarr", model)
        assert arr.shape == (20000, 4) and attrs["n_bits"] == 32
    html = [o["data"]["text/html"] for c in nb.cells for o in _outputs(c, "display_data") if "text/html" in o["data"]]
    assert any('href="http://127.0.0.1:' in h and "/status" in h for h in html), html   # clickable dashboard link
    pngs = [o["data"]["image/png"] for c in nb.cells for o in _outputs(c) if "image/png" in o.get("data", {})]
    assert pngs and base64.b64decode(pngs[0]).startswith(b"\x89PNG"), "no inline plot in the outputs"
    tables = [o["data"]["text/markdown"] for c in nb.cells for o in _outputs(c, "display_data")
              if "text/markdown" in o["data"]]
    assert any("| itq |" in t and "| dish (DisH2) |" in t for t in tables), tables   # the quality table
    assert any("| itq | " in t and "Hamming" in t for t in tables)                  # the search results
    assert not [o for c in nb.cells for o in _outputs(c, "error")]
    assert _stdout(nb.cells[-2]).strip() == "closed"


def test_committed_notebook_is_clean_and_untouched(executed):
    _, _, committed = executed
    assert NOTEBOOK.read_bytes() == committed          # executed in memory, nothing written back
    nb = nbformat.reads(committed.decode(), as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
