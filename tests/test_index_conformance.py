"""One conformance test for every index class: the same searches on the same small data, each
equal to brute force over the same rows (numpy Hamming or squared L2, ties by the smaller id),
and the same members (ntotal, code_size, d, searched_by, describe()).

The approximate indexes are made exact so that brute force is their answer too: an inverted
file probes every list, and a re-ranking re-ranks every row (candidates = ntotal).
"""

from __future__ import annotations

import dask
import numpy as np
import pytest

import dask_hashcodes
from dask_hashcodes import workflows
from dask_hashcodes.errors import InputError
from dask_hashcodes.indexes.base import Index
from dask_hashcodes.indexes.index import FlatIndex, IVFIndex, MIHIndex, Queries, Rerank
from dask_hashcodes.indexes.ivf import InvertedLists
from dask_hashcodes.indexes.mih import MultiIndex
from dask_hashcodes.indexes.serving import ServingIVF

N, LISTS, K, RADIUS = 1200, 6, 7, 6
QUERIES = np.array([0, 5, 399, 400, 401, 777, 1199])  # database rows searched as queries


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """1200 sift-synth rows in 400-row chunks, 32-bit ITQ codes, a stored multi-index and a
    stored inverted file of 6 lists."""
    d = tmp_path_factory.mktemp("conformance")
    with dask.config.set(scheduler="synchronous"):
        workflows.synth("sift", d / "s.zarr", n=N, chunk_rows=400)
        workflows.train(d / "s.zarr", "itq", d / "m", bits=32)
        workflows.encode(d / "s.zarr", d / "m", d / "c.zarr")
        workflows.index(d / "c.zarr", d / "i.zarr")
        workflows.index(d / "c.zarr", d / "v.zarr", kind="ivf", dataset=d / "s.zarr", lists=LISTS)
    ds, model = dask_hashcodes.open_dataset(d / "s.zarr"), dask_hashcodes.load_model(d / "m")
    codes = dask_hashcodes.open_codes(d / "c.zarr", model, ds)
    rows = np.asarray(ds.features_dask().compute())
    return {"dir": d, "ds": ds, "model": model, "codes": codes, "rows": rows, "db": codes.reader.read_all()}


def _index(data, kind) -> Index:
    d, ds, model, codes, rows = data["dir"], data["ds"], data["model"], data["codes"], data["rows"]
    lists = dask_hashcodes.open_ivf(d / "v.zarr", codes)
    return {
        "flat": lambda: FlatIndex(codes, model=model),
        "mih": lambda: MIHIndex(dask_hashcodes.open_index(d / "i.zarr", codes), model=model),
        "multi": lambda: MultiIndex(codes.dask(), model=model),
        "ivf": lambda: IVFIndex(lists, LISTS, model=model),
        "ivf-in-memory": lambda: IVFIndex(InvertedLists.load(lists), LISTS, model=model),
        "rerank": lambda: Rerank("exact", FlatIndex(codes, model=model), candidates=N, source=ds),
        "serving": lambda: ServingIVF.load(lists, model=model, nprobe=LISTS),
        "serving-rerank": lambda: ServingIVF.load(lists, vectors=rows, model=model, nprobe=LISTS, candidates=N),
        "serving-rerank-stored": lambda: ServingIVF.load(lists, vectors=ds, model=model, nprobe=LISTS, candidates=N),
    }[kind]()


KINDS = ("flat", "mih", "multi", "ivf", "ivf-in-memory", "rerank", "serving", "serving-rerank", "serving-rerank-stored")
EUCLIDEAN = ("rerank", "serving-rerank", "serving-rerank-stored")  # re-ranked: squared L2 distances
RANGE = ("flat", "mih", "multi")  # the exact Hamming indexes answer range searches


def _hamming(query_codes, db) -> np.ndarray:
    return np.unpackbits(query_codes[:, None, :] ^ db[None, :, :], axis=2).sum(axis=2)


def _brute_topk(dist: np.ndarray, k: int):
    """(D, I) of the k smallest distances per row, ties by the smaller id."""
    ids = np.arange(dist.shape[1])
    order = np.array([np.lexsort((ids, row))[:k] for row in dist])
    return np.take_along_axis(dist, order, axis=1), order


@pytest.mark.parametrize("kind", KINDS)
def test_every_index_answers_as_brute_force_with_the_same_members(data, cluster, kind):
    from distributed import Client

    rows, model, db = data["rows"], data["model"], data["db"]
    vectors = rows[QUERIES]
    query_codes = np.asarray(model.encode(vectors))
    if kind in EUCLIDEAN:
        exact = rows.astype(np.float64)
        want_d, want_i = _brute_topk(((vectors[:, None, :] - exact[None]) ** 2).sum(axis=2), K)
    else:
        want_d, want_i = _brute_topk(_hamming(query_codes, db), K)
    with Client(cluster):
        index = _index(data, kind)
        found = {
            "search": index.search(vectors, K),
            "search_codes": index.search_codes(Queries(codes=query_codes, vectors=vectors), K),
            "search_lazy": dask.compute(index.search_lazy(vectors, K))[0],
            "search_codes_lazy": dask.compute(index.search_codes_lazy(Queries(query_codes, vectors), K))[0],
        }
        if index.needs_query_vectors:  # a caller holding only codes is told to bring the vectors
            with pytest.raises(InputError, match="needs the query vectors as well as their codes"):
                index.search_codes(query_codes, K)
        else:  # codes alone are a whole query: the workflows then read no query vectors
            found["search_codes without vectors"] = index.search_codes(query_codes, K)
        for how, (got_d, got_i) in found.items():
            np.testing.assert_array_equal(got_i, want_i, err_msg=how)
            np.testing.assert_allclose(got_d, want_d, rtol=1e-6, err_msg=how)
            assert got_i.dtype == np.int64, how
        if kind in RANGE:
            hamming = _hamming(query_codes, db)
            for lims, got_d, got_i in (
                index.range_search(vectors, RADIUS),
                index.range_search_codes(query_codes, RADIUS),
            ):
                for q in range(len(QUERIES)):
                    hits = np.flatnonzero(hamming[q] <= RADIUS)
                    hits = hits[np.lexsort((hits, hamming[q, hits]))]
                    np.testing.assert_array_equal(got_i[lims[q] : lims[q + 1]], hits)
                    np.testing.assert_array_equal(got_d[lims[q] : lims[q + 1]], hamming[q, hits])
        else:
            for call in (lambda: index.range_search(vectors, RADIUS), lambda: index.range_search_codes(query_codes, 1)):
                with pytest.raises(InputError, match=f"^{type(index).__name__} answers top-k searches only"):
                    call()
    assert isinstance(index, Index)
    assert index.ntotal == N and index.code_size == 4 and index.d == 128
    assert isinstance(index.searched_by, str) and index.searched_by
    described = index.describe()
    assert described["index"] == type(index).__name__
    assert (described["ntotal"], described["code_size"]) == (N, 4)
    if isinstance(index, IVFIndex):
        assert (described["nprobe"], described["n_lists"]) == (LISTS, LISTS)
    if isinstance(index, Rerank):
        assert described["base"]["ntotal"] == N and described["candidates"] == N


def test_bad_k_and_radius_are_one_line_refusals_everywhere(data):
    flat = _index(data, "flat")
    codes = data["db"][:2]
    with dask.config.set(scheduler="synchronous"):
        for k in (0, -1, 2.5, True):
            with pytest.raises(InputError, match=r"^k must be a positive int; got"):
                flat.search_codes(codes, k)
        for radius in (-1, 1.5):
            with pytest.raises(InputError, match=r"^radius must be a non-negative int; got"):
                flat.range_search_codes(codes, radius)
    with pytest.raises(InputError, match="The 'k_factor' parameter of Rerank must be an int in the range"):
        Rerank("exact", flat, source=data["ds"], k_factor=0)
