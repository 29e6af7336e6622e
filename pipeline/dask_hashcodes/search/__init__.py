"""Hamming search: the linear scan (hamming), multi-index hashing (mih), inverted files (ivf,
and serving: one loaded in memory), re-ranking (rerank), and the Index objects that compose
them (index: FlatIndex, MIHIndex, IVFIndex, Rerank). Every index takes query vectors in
``search(vectors, k)`` (encoded with its model) and packed codes, or ``Queries`` holding codes
and vectors, in ``search_codes(codes, k)`` (queries: what each is, checked, never guessed).

``dask_hashcodes.search`` is also the search workflow itself: ``dask_hashcodes.search(dataset, model, codes,
out, k=...)`` calls ``dask_hashcodes.workflows.search``. The package module is made callable so
that the public function and this package can share the name ``dask_hashcodes.search`` (importing
a submodule such as ``dask_hashcodes.search.index`` binds the package to that name).
"""

import sys
import types


class _CallableSearch(types.ModuleType):
    def __call__(self, *args, **kwargs):
        """``dask_hashcodes.workflows.search``: see its documentation."""
        from dask_hashcodes.workflows import search

        return search(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableSearch
