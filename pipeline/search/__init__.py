"""Hamming search: the linear scan (hamming), multi-index hashing (mih), re-ranking
(rerank), and the Index objects that compose them (index: FlatIndex, MIHIndex, Rerank).

``dhash.search`` is also the search workflow itself: ``dhash.search(dataset, model, codes,
out, k=...)`` calls ``dhash.workflows.search``. The package module is made callable so
that the public function and this package can share the name ``dhash.search`` (importing
a submodule such as ``dhash.search.index`` binds the package to that name).
"""

import sys
import types


class _CallableSearch(types.ModuleType):
    def __call__(self, *args, **kwargs):
        """``dhash.workflows.search``: see its documentation."""
        from dhash.workflows import search

        return search(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableSearch
