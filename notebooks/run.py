"""Execute quickstart.ipynb with its default parameters and save it with its outputs:
``python notebooks/run.py`` (needs the test extra: nbclient, ipykernel). Run it after
changing the notebook, so the committed copy shows what a reader will get. Outputs of the
run itself (dataset subset, models, codes, report) go to a temporary directory."""

import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parent / "quickstart.ipynb"

if __name__ == "__main__":
    nb = nbformat.read(NOTEBOOK, as_version=4)
    with tempfile.TemporaryDirectory() as work:
        NotebookClient(nb, kernel_name="python3", timeout=1800, resources={"metadata": {"path": work}}).execute()
    nbformat.write(nb, NOTEBOOK)
    print(f"executed and saved {NOTEBOOK}", file=sys.stderr)
