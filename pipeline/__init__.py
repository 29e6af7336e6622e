"""dhash: learn binary hash codes over chunked data on a Dask cluster.

Public API (everything a notebook needs; ``__all__`` lists it)::

    import dhash
    dhash.connect()
    ds = dhash.synth("sift", "data/s.zarr", n=100_000)
    dhash.split(ds, queries=1000)
    model = dhash.train(ds, "itq", "models/itq32", bits=32, split="default")
    dhash.encode(ds, model, "codes/itq32.zarr")
    found = dhash.search(ds, model, "codes/itq32.zarr", k=10)   # found.results: (D, I)

* the jobs as functions (dhash.workflows): ingest, synth, head, split, groundtruth, train,
  encode, index, search, evaluate, demo;
* the estimators (LSH, ITQ, ...), which follow the scikit-learn contract;
* handles, each a location opened and verified once and passed down instead of the
  location: Dataset and Split (``open_dataset``), Model (``load_model``), Codes
  (``open_codes``), the stored multi-index (``open_index``) and inverted file (``open_ivf``);
* the Index objects, FAISS's (D, I) and (lims, D, I), the query kind said by the method:
  ``search(vectors, k)`` encodes vectors with the index's model, ``search_codes(codes, k)``
  takes packed codes or ``Queries`` (codes and vectors); ``range_search`` and
  ``range_search_codes`` likewise. FlatIndex, MIHIndex, IVFIndex, MultiIndex, Rerank, and
  ServingIVF (an inverted file loaded in memory, searched on the calling thread);
* Storage, the fsspec options URLs are opened with (the workflows' ``storage=``);
* cluster helpers (``connect``, ``disconnect``) and InputError, the one error of bad input.

Names are imported lazily so that ``import dhash.kernels`` (plain numpy) never pulls in
Dask. ``dhash.search`` is both the search workflow (callable) and the package of the
search modules.
"""

import importlib

__version__ = "0.1.0"

_ESTIMATORS = (
    "LSH", "PCAH", "ITQ", "DisH", "SGH", "SH", "IsoHash", "AGH", "DGH", "KLSH", "BRE", "KMH", "SIKH",
    "SPLH", "USPLH", "MAC", "ADSH", "SDH", "COSDISH", "DPSH", "KSH",
)  # fmt: skip
_WORKFLOWS = (
    "dataset", "ingest", "synth", "head", "split", "groundtruth", "train", "encode", "index", "evaluate", "demo",
    "Encoded", "Indexed", "Searched",
)  # fmt: skip

_EXPORTS = {
    **dict.fromkeys(_ESTIMATORS, "dhash.hashing"),
    **dict.fromkeys(_WORKFLOWS, "dhash.workflows"),
    "InputError": "dhash.errors",
    "Model": "dhash.hashing",
    "load_model": "dhash.hashing",
    "make_hasher": "dhash.hashing",
    "METHOD_NAMES": "dhash.hashing",
    "Dataset": "dhash.storage.datasets",
    "Split": "dhash.storage.datasets",
    "open_dataset": "dhash.storage.datasets",
    "Codes": "dhash.storage.codes",
    "open_codes": "dhash.storage.codes",
    "codes_dask": "dhash.storage.codes",
    "StoredTables": "dhash.storage.mih_index",
    "open_index": "dhash.storage.mih_index",
    "StoredLists": "dhash.storage.ivf_index",
    "open_ivf": "dhash.storage.ivf_index",
    "Storage": "dhash.storage.location",
    "Index": "dhash.search.index",
    "FlatIndex": "dhash.search.index",
    "MIHIndex": "dhash.search.index",
    "IVFIndex": "dhash.search.index",
    "Rerank": "dhash.search.index",
    "ServingIVF": "dhash.search.serving",
    "Queries": "dhash.search.queries",
    "MultiIndex": "dhash.search.mih",
    "database_view": "dhash.views",
    "connect": "dhash.distributed.cluster",
    "disconnect": "dhash.distributed.cluster",
    "knn_search": "dhash.search.hamming",
    "radius_search": "dhash.search.hamming",
    "score_codes": "dhash.evaluation.evaluate",
    "quality_table": "dhash.evaluation.report",
}
# names defined elsewhere under another name
_ALIASES = {"Model": "Hasher"}

__all__ = [*_EXPORTS, "search", "workflows", "__version__"]


def __getattr__(name):
    if name == "workflows":
        return importlib.import_module("dhash.workflows")
    if name == "search":  # the package, callable as the search workflow (dhash/search/__init__.py)
        return importlib.import_module("dhash.search")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), _ALIASES.get(name, name))
    raise AttributeError(f"module 'dhash' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__})
