"""dask_hashcodes: learn binary hash codes over chunked data on a Dask cluster.

Public API (everything a notebook needs; ``__all__`` lists it)::

    import dask_hashcodes
    dask_hashcodes.connect()
    ds = dask_hashcodes.synth("sift", "data/s.zarr", n=100_000)
    dask_hashcodes.split(ds, queries=1000)
    model = dask_hashcodes.train(ds, "itq", "models/itq32", bits=32, split="default")
    dask_hashcodes.encode(ds, model, "codes/itq32.zarr")
    found = dask_hashcodes.search(ds, model, "codes/itq32.zarr", k=10)   # found.results: (D, I)

* the jobs as functions (dask_hashcodes.workflows): ingest, synth, head, split, groundtruth, train,
  encode, index, search, evaluate, demo, residual_index and search_vectors (the residual index of
  a split's rows, and the Euclidean search through it); and load_dataset, which opens what their ``dataset``
  argument takes (a handle, a path or URL, a built-in source's name);
* the estimators (LSH, ITQ, ...), which follow the scikit-learn contract;
* handles, each a location opened and verified once and passed down instead of the
  location: Dataset and Split (``open_dataset``), Model (``load_model``), Codes
  (``open_codes``), the stored multi-index (``open_index``) and inverted file (``open_ivf``);
* the index objects (``dask_hashcodes.indexes``), every one an ``Index`` with FAISS's members:
  ``ntotal``, ``code_size``, ``d``, ``searched_by``, ``describe()``, and (D, I) or
  (lims, D, I), the query kind said by the method: ``search(vectors, k)`` encodes vectors
  with the index's model, ``search_codes(codes, k)`` takes packed codes or ``Queries`` (codes
  and vectors); ``range_search`` and ``range_search_codes`` likewise. FlatIndex, MIHIndex,
  IVFIndex, MultiIndex, Rerank (wraps any index; ``k_factor``), ServingIVF (an IVFIndex
  whose lists are in memory, searched on the calling thread), and ResidualIVF (built from the
  vectors: binary codes of residuals, re-ranked, in memory or with its vectors on disk);
* Storage, the fsspec options URLs are opened with (the workflows' ``storage=``);
* cluster helpers (``connect``, ``disconnect``; ``resident_report`` and ``release_resident``: what
  the workers keep between warm searches, and freeing it) and InputError, the one error of bad input.

Names are imported lazily so that ``import dask_hashcodes.kernels`` (plain numpy) never pulls in
Dask. The index objects live in the package ``dask_hashcodes.indexes``; ``dask_hashcodes.search``
is the search workflow.
"""

import importlib

__version__ = "0.1.0"

_ESTIMATORS = (
    "LSH", "PCAH", "ITQ", "DisH", "SGH", "SH", "IsoHash", "AGH", "DGH", "KLSH", "BRE", "KMH", "SIKH",
    "SPLH", "USPLH", "MAC", "ADSH", "SDH", "COSDISH", "DPSH", "KSH",
)  # fmt: skip
_WORKFLOWS = (
    "load_dataset", "ingest", "synth", "head", "split", "groundtruth", "train", "encode", "index", "evaluate", "demo",
    "search", "residual_index", "search_vectors", "Encoded", "Indexed", "ResidualIndexed", "Searched",
)  # fmt: skip

_EXPORTS = {
    **dict.fromkeys(_ESTIMATORS, "dask_hashcodes.hashing"),
    **dict.fromkeys(_WORKFLOWS, "dask_hashcodes.workflows"),
    "InputError": "dask_hashcodes.errors",
    "Model": "dask_hashcodes.hashing",
    "load_model": "dask_hashcodes.hashing",
    "make_hasher": "dask_hashcodes.hashing",
    "METHOD_NAMES": "dask_hashcodes.hashing",
    "Dataset": "dask_hashcodes.storage.datasets",
    "Split": "dask_hashcodes.storage.datasets",
    "open_dataset": "dask_hashcodes.storage.datasets",
    "Codes": "dask_hashcodes.storage.codes",
    "open_codes": "dask_hashcodes.storage.codes",
    "codes_dask": "dask_hashcodes.storage.codes",
    "StoredTables": "dask_hashcodes.storage.mih_index",
    "open_index": "dask_hashcodes.storage.mih_index",
    "StoredLists": "dask_hashcodes.storage.ivf_index",
    "open_ivf": "dask_hashcodes.storage.ivf_index",
    "Storage": "dask_hashcodes.storage.location",
    "Index": "dask_hashcodes.indexes.base",
    "FlatIndex": "dask_hashcodes.indexes.index",
    "MIHIndex": "dask_hashcodes.indexes.index",
    "IVFIndex": "dask_hashcodes.indexes.index",
    "Rerank": "dask_hashcodes.indexes.index",
    "ServingIVF": "dask_hashcodes.indexes.serving",
    "ResidualIVF": "dask_hashcodes.indexes.residual",
    "Queries": "dask_hashcodes.indexes.queries",
    "MultiIndex": "dask_hashcodes.indexes.mih",
    "database_view": "dask_hashcodes.views",
    "connect": "dask_hashcodes.distributed.cluster",
    "resident_report": "dask_hashcodes.distributed.resident",
    "release_resident": "dask_hashcodes.distributed.resident",
    "disconnect": "dask_hashcodes.distributed.cluster",
    "knn_search": "dask_hashcodes.indexes.hamming",
    "radius_search": "dask_hashcodes.indexes.hamming",
    "score_codes": "dask_hashcodes.evaluation.evaluate",
    "quality_table": "dask_hashcodes.evaluation.report",
}
# names defined elsewhere under another name
_ALIASES = {"Model": "Hasher"}

__all__ = [*_EXPORTS, "workflows", "__version__"]


def __getattr__(name):
    if name == "workflows":
        return importlib.import_module("dask_hashcodes.workflows")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), _ALIASES.get(name, name))
    raise AttributeError(f"module 'dask_hashcodes' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__})
