"""The one interface of every index (FAISS's names where FAISS has the concept), the kind of
query said by the method called (indexes.queries), never guessed from a dtype:

* ``ntotal``: the rows the index searches; ``code_size``: bytes per packed code; ``d``: the
  features of the query vectors ``search`` takes (the model's ``n_features_in_``, None
  without a model); ``searched_by``: what answered the last search;
* ``search(vectors, k)`` / ``search_codes(codes, k)`` -> (D, I) of the top ``k``;
* ``range_search(vectors, radius)`` / ``range_search_codes(codes, radius)`` -> (lims, D, I)
  of every row within ``radius``, where the index answers range searches (the exact Hamming
  ones); the others refuse it here, in one place;
* ``search_lazy`` / ``search_codes_lazy``: the delayed (D, I), to compute with other work on
  the cluster;
* ``describe()``: a short dict naming the index, ``ntotal``, ``code_size`` and its settings.

A subclass defines ``ntotal``, ``code_size``, ``searched_by`` and ``search_codes_lazy`` (and
``range_search_codes`` with ``range_searchable``), the rest follows.
"""

from __future__ import annotations

from dask_hashcodes.distributed.progress import compute_with_progress
from dask_hashcodes.errors import InputError
from dask_hashcodes.indexes.hamming import lims_of
from dask_hashcodes.indexes.queries import Queries, checked_codes, encoded
from dask_hashcodes.validation import check_k, check_radius

__all__ = ["Index", "HammingIndex"]


class Index:
    """What every index offers: see the module's documentation."""

    model = None  # encodes the query vectors of ``search``
    range_searchable = False  # whether range_search / range_search_codes are answered
    # whether search_codes needs the query vectors beside their codes (Queries): an inverted
    # file finds the lists from them, a re-ranking scores them; a caller holding only codes
    # reads the vectors for these indexes alone
    needs_query_vectors = False
    ntotal: int
    searched_by: str

    @property
    def code_size(self) -> int:  # pragma: no cover - each index defines it
        raise NotImplementedError

    @property
    def d(self) -> int | None:
        """Features of the query vectors ``search`` takes (None: no model to encode them)."""
        d = getattr(self.model, "n_features_in_", None)
        return None if d is None else int(d)

    def encode(self, vectors) -> Queries:
        """``vectors`` checked and encoded by the index's model: Queries holding both."""
        return encoded(vectors, self.model, self.code_size)

    def expect(self, query_rows, *, k: int | None = None, radius: int | None = None) -> None:
        """A hint that the next search's queries are the stored codes at ``query_rows`` (of
        the codes this index searches), at top-``k`` or within ``radius``: an index may start
        work that needs only those (a multi-index its trial) while the caller reads them."""

    def search(self, vectors, k: int, *, progress: bool = False):
        """(D (nq, k), I int64 (nq, k)) of the top ``k`` of ``vectors``, encoded by the model."""
        return self.search_codes(self.encode(vectors), k, progress=progress)

    def search_codes(self, codes, k: int, *, progress: bool = False):
        """(D (nq, k), I int64 (nq, k)) of the top ``k`` of packed ``codes``, or of Queries
        holding the codes and their vectors (which an inverted file and re-ranking need)."""
        return compute_with_progress(self.search_codes_lazy(codes, k), show=progress)

    def search_lazy(self, vectors, k: int):
        """The delayed (D, I) of ``search``, to compute together with other work."""
        return self.search_codes_lazy(self.encode(vectors), k)

    def search_codes_lazy(self, codes, k: int):  # pragma: no cover - each index defines it
        """The delayed (D, I) of ``search_codes``, to compute together with other work."""
        raise NotImplementedError

    def range_search(self, vectors, radius: int):
        """(lims, D, I): every row within Hamming ``radius`` of ``vectors`` encoded by the
        model, sorted by (distance, id) per query; query q's hits are ``I[lims[q]:lims[q+1]]``."""
        if not self.range_searchable:
            raise self._top_k_only()
        return self.range_search_codes(self.encode(vectors), radius)

    def range_search_codes(self, codes, radius: int):
        """(lims, D, I): every row within Hamming ``radius`` of packed ``codes``."""
        raise self._top_k_only()

    def _top_k_only(self) -> InputError:
        return InputError(
            f"{type(self).__name__} answers top-k searches only: call search(vectors, k) or search_codes(queries, "
            "k), or range-search a FlatIndex, MIHIndex or MultiIndex"
        )

    def settings(self) -> dict:
        """The index's own settings, for ``describe`` (nprobe, k_factor, ...)."""
        return {}

    def describe(self) -> dict:
        """The index named with its size and settings: {"index", "ntotal", "code_size", ...}."""
        return {"index": type(self).__name__, "ntotal": int(self.ntotal), "code_size": self.code_size,
                **self.settings()}  # fmt: skip

    def __repr__(self) -> str:
        return f"<{', '.join(f'{key}={value}' for key, value in self.describe().items())}>"

    def reranked_exact(self, queries: Queries, source, candidates: int, k: int):
        """(D, I) of the Hamming top ``candidates`` of ``queries`` re-ranked by exact squared L2
        to the rows of ``source`` in one pass, when this index has such a fused search for
        that source; None otherwise (Rerank then re-ranks the candidates itself)."""
        return None


class HammingIndex(Index):
    """The exact Hamming indexes (linear scan, multi-index hashing): top-k and range searches
    of packed codes, the same answer whichever finds it, ties by the smaller id. A subclass
    gives ``_topk_lazy(codes, k)`` and ``_radius(codes, radius)`` of checked arguments."""

    range_searchable = True

    def search_codes_lazy(self, codes, k: int):
        return self._topk_lazy(checked_codes(codes, self.code_size), check_k(k))

    def range_search_codes(self, codes, radius: int):
        codes = checked_codes(codes, self.code_size)
        query_index, ids, dist = self._radius(codes, check_radius(radius))
        return lims_of(query_index, len(codes)), dist, ids

    def _topk_lazy(self, codes, k: int):  # pragma: no cover - each index defines it
        raise NotImplementedError

    def _radius(self, codes, radius: int):  # pragma: no cover - each index defines it
        raise NotImplementedError
