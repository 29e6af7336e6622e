"""dhash: learn binary hash codes over chunked data on a Dask cluster.

Public API (everything a notebook needs)::

    from pipeline import connect, workflows, ITQ

``workflows`` holds the jobs as functions (ingest, synth, split, groundtruth, train,
encode, search, evaluate, demo, bench); the estimators follow the scikit-learn contract.
Names are imported lazily so that ``import pipeline.kernels`` (plain numpy) never pulls
in Dask.
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "InputError": "pipeline.errors",
    "LSH": "pipeline.hashing",
    "PCAH": "pipeline.hashing",
    "ITQ": "pipeline.hashing",
    "DisH": "pipeline.hashing",
    "SGH": "pipeline.hashing",
    "SH": "pipeline.hashing",
    "IsoHash": "pipeline.hashing",
    "AGH": "pipeline.hashing",
    "DGH": "pipeline.hashing",
    "KLSH": "pipeline.hashing",
    "BRE": "pipeline.hashing",
    "KMH": "pipeline.hashing",
    "SIKH": "pipeline.hashing",
    "SPLH": "pipeline.hashing",
    "USPLH": "pipeline.hashing",
    "MAC": "pipeline.hashing",
    "ADSH": "pipeline.hashing",
    "SDH": "pipeline.hashing",
    "COSDISH": "pipeline.hashing",
    "DPSH": "pipeline.hashing",
    "KSH": "pipeline.hashing",
    "load_model": "pipeline.hashing",
    "make_hasher": "pipeline.hashing",
    "METHOD_NAMES": "pipeline.hashing",
    "open_dataset": "pipeline.storage.datasets",
    "open_codes": "pipeline.storage.codes",
    "codes_dask": "pipeline.storage.codes",
    "database_view": "pipeline.views",
    "connect": "pipeline.distributed.cluster",
    "disconnect": "pipeline.distributed.cluster",
    "knn_search": "pipeline.search.hamming",
    "radius_search": "pipeline.search.hamming",
    "score_codes": "pipeline.evaluation.evaluate",
    "quality_table": "pipeline.evaluation.report",
}
__all__ = [*_EXPORTS, "workflows", "__version__"]


def __getattr__(name):
    if name == "workflows":
        return importlib.import_module("pipeline.workflows")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
