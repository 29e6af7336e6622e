"""dhash: learn binary hash codes over chunked data on a Dask cluster.

Public API (everything a notebook needs)::

    from pipeline import LSH, PCAH, ITQ, DisH, load_model, open_dataset, connect, knn_search

Names are imported lazily so that ``import pipeline.kernels`` (plain numpy) never pulls
in Dask.
"""
import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "InputError": "pipeline.errors",
    "LSH": "pipeline.hashing", "PCAH": "pipeline.hashing", "ITQ": "pipeline.hashing", "DisH": "pipeline.hashing",
    "load_model": "pipeline.hashing", "make_hasher": "pipeline.hashing",
    "open_dataset": "pipeline.storage.datasets",
    "connect": "pipeline.distributed.cluster", "disconnect": "pipeline.distributed.cluster",
    "knn_search": "pipeline.search.hamming", "radius_search": "pipeline.search.hamming",
}
__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
