"""dhash: learn binary hash codes over chunked data on a Dask cluster.

Public API (everything a notebook needs)::

    from dhash import connect, workflows, ITQ

``workflows`` holds the jobs as functions (ingest, synth, split, groundtruth, train,
encode, search, evaluate, demo, bench); the estimators follow the scikit-learn contract.
Names are imported lazily so that ``import dhash.kernels`` (plain numpy) never pulls
in Dask.
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "InputError": "dhash.errors",
    "LSH": "dhash.hashing",
    "PCAH": "dhash.hashing",
    "ITQ": "dhash.hashing",
    "DisH": "dhash.hashing",
    "SGH": "dhash.hashing",
    "SH": "dhash.hashing",
    "IsoHash": "dhash.hashing",
    "AGH": "dhash.hashing",
    "DGH": "dhash.hashing",
    "KLSH": "dhash.hashing",
    "BRE": "dhash.hashing",
    "KMH": "dhash.hashing",
    "SIKH": "dhash.hashing",
    "SPLH": "dhash.hashing",
    "USPLH": "dhash.hashing",
    "MAC": "dhash.hashing",
    "ADSH": "dhash.hashing",
    "SDH": "dhash.hashing",
    "COSDISH": "dhash.hashing",
    "DPSH": "dhash.hashing",
    "KSH": "dhash.hashing",
    "load_model": "dhash.hashing",
    "make_hasher": "dhash.hashing",
    "METHOD_NAMES": "dhash.hashing",
    "open_dataset": "dhash.storage.datasets",
    "open_codes": "dhash.storage.codes",
    "codes_dask": "dhash.storage.codes",
    "database_view": "dhash.views",
    "connect": "dhash.distributed.cluster",
    "disconnect": "dhash.distributed.cluster",
    "knn_search": "dhash.search.hamming",
    "radius_search": "dhash.search.hamming",
    "score_codes": "dhash.evaluation.evaluate",
    "quality_table": "dhash.evaluation.report",
}
__all__ = [*_EXPORTS, "workflows", "__version__"]


def __getattr__(name):
    if name == "workflows":
        return importlib.import_module("dhash.workflows")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dhash' has no attribute {name!r}")
