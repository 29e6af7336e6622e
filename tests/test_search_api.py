"""Every index says by its method what it searches, never by the queries' dtype:
``search(vectors, k)`` encodes vectors with the index's model, ``search_codes(codes, k)``
takes packed codes (or Queries holding the codes and the vectors).

The case that motivated it: 1024-bit codes are 128 bytes wide, as wide as a 128-d uint8
SIFT row, so a uint8 query vector looks like a packed code. Here each index over 1024-bit LSH
codes of sift-synth rows (uint8) must find a database row first when searched with that row
as a vector, whatever its element type; a width that does not fit is one line naming both.
"""

from __future__ import annotations

import dask
import numpy as np
import pytest

import dask_hashcodes
from dask_hashcodes import workflows
from dask_hashcodes.errors import InputError
from dask_hashcodes.indexes.index import FlatIndex, IVFIndex, MIHIndex, Queries, Rerank
from dask_hashcodes.indexes.mih import MultiIndex
from dask_hashcodes.indexes.serving import ServingIVF

BITS = 1024
QUERIES = np.array([0, 1, 2, 3, 4, 777, 1500, 2999])  # rows searched as queries (whole database: no split)
K = 5
VECTOR_TYPES = (np.uint8, np.float16, np.float32, np.float64)  # sift rows are bytes: each holds them exactly


@pytest.fixture(scope="module")
def sift_1024(tmp_path_factory):
    """3000 sift-synth rows (uint8, 128-d) in 1000-row chunks, a 1024-bit LSH model (128-byte
    codes: as wide as a row), its codes, a stored multi-index and a stored inverted file."""
    d = tmp_path_factory.mktemp("search-api")
    with dask.config.set(scheduler="synchronous"):
        ds = workflows.synth("sift", d / "s.zarr", n=3000, chunk_rows=1000)
        model = workflows.train(ds, "lsh", d / "m", bits=BITS)
        codes = workflows.encode(ds, model, d / "c.zarr")
        workflows.index(d / "c.zarr", d / "i.zarr")
        workflows.index(d / "c.zarr", d / "v.zarr", kind="ivf", dataset=d / "s.zarr", lists=8)
    ds, model = dask_hashcodes.open_dataset(d / "s.zarr"), dask_hashcodes.load_model(d / "m")
    codes = dask_hashcodes.open_codes(codes.path, model, ds)
    rows = np.asarray(ds.features_dask().compute())
    assert rows.dtype == np.uint8 and rows.shape[1] == 128 and codes.reader.shape[1] == 128
    assert len(np.unique(rows, axis=0)) == len(rows)  # every row is its own nearest neighbour
    return {"dir": d, "ds": ds, "model": model, "codes": codes, "rows": rows}


def _index(data, kind):
    """An index of class ``kind`` over the codes, holding the model."""
    d, ds, model, codes = data["dir"], data["ds"], data["model"], data["codes"]
    if kind == "flat":
        return FlatIndex(codes, model=model)
    if kind == "mih":
        return MIHIndex(dask_hashcodes.open_index(d / "i.zarr", codes), model=model, choose=False)
    if kind == "multi":
        return MultiIndex(codes.dask(), model=model)
    if kind == "ivf":
        return IVFIndex(dask_hashcodes.open_ivf(d / "v.zarr", codes), 8, model=model)
    if kind == "rerank":
        return Rerank("exact", FlatIndex(codes, model=model), candidates=50, source=ds)
    return ServingIVF.load(dask_hashcodes.open_ivf(d / "v.zarr", codes), model=model, nprobe=8)


KINDS = ("flat", "mih", "multi", "ivf", "rerank", "serving")


@pytest.fixture(scope="module")
def indexes(sift_1024, cluster):
    """kind -> its index, each built once, searched on the 2-worker cluster."""
    from distributed import Client

    built = {}

    class Indexes:
        def __getitem__(self, kind):
            if kind not in built:
                built[kind] = _index(sift_1024, kind)
            return built[kind]

    with Client(cluster):
        yield Indexes()


@pytest.mark.parametrize("kind", KINDS)
def test_uint8_vectors_find_their_own_row_first_as_every_float_type_does(sift_1024, indexes, kind):
    index, rows = indexes[kind], sift_1024["rows"]
    dist, ids = index.search(rows[QUERIES], K)
    np.testing.assert_array_equal(ids[:, 0], QUERIES)  # a vector is searched as a vector, not as a code
    np.testing.assert_array_equal(dist[:, 0], 0)
    for vector_type in VECTOR_TYPES[1:]:
        same_dist, same_ids = index.search(rows[QUERIES].astype(vector_type), K)
        np.testing.assert_array_equal(same_ids, ids)
        np.testing.assert_array_equal(same_dist, dist)
    # the codes the model gives are searched by search_codes, to the same answer
    query_codes = sift_1024["model"].encode(rows[QUERIES])
    queries = Queries(codes=query_codes, vectors=rows[QUERIES]) if kind in ("ivf", "rerank", "serving") else query_codes
    by_codes = index.search_codes(queries, K)
    np.testing.assert_array_equal(by_codes[1], ids)
    np.testing.assert_array_equal(by_codes[0], dist)


@pytest.mark.parametrize("kind", KINDS)
def test_codes_of_another_width_are_one_line_naming_both_widths(sift_1024, indexes, kind):
    index, rows = indexes[kind], sift_1024["rows"]
    narrow = sift_1024["model"].encode(rows[QUERIES])[:, :4]
    for queries in (narrow, Queries(codes=narrow, vectors=rows[QUERIES])):
        with pytest.raises(InputError) as raised:
            index.search_codes(queries, K)
        message = str(raised.value)
        assert message.startswith(
            "query codes are 4 bytes (32 bits) wide but the index holds 128-byte (1024-bit) codes;"
        ), message
        assert "call search(vectors, k)" in message and "\n" not in message


@pytest.mark.parametrize("kind", KINDS)
def test_vectors_of_another_dimension_are_one_line_naming_both(sift_1024, indexes, kind):
    index, rows = indexes[kind], sift_1024["rows"]
    with pytest.raises(InputError) as raised:
        index.search(rows[QUERIES, :64], K)
    message = str(raised.value)
    assert message.startswith("query vectors have 64 features but the index's model was trained on 128;"), message
    assert "call search_codes(codes, k)" in message and "(8," not in message


@pytest.mark.parametrize("kind", ("flat", "mih", "multi"))
def test_range_search_takes_vectors_and_range_search_codes_codes(sift_1024, indexes, kind):
    index, rows = indexes[kind], sift_1024["rows"]
    lims, dist, ids = index.range_search(rows[QUERIES], 0)
    for q, row in enumerate(QUERIES):  # each vector lies at distance 0 from its own row's code
        assert row in ids[lims[q] : lims[q + 1]] and (dist[lims[q] : lims[q + 1]] == 0).all()
    by_codes = index.range_search_codes(sift_1024["model"].encode(rows[QUERIES]), 0)
    for got, want in zip(by_codes, (lims, dist, ids), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(InputError, match=r"query codes are 4 bytes \(32 bits\) wide but the index holds 128-byte"):
        index.range_search_codes(sift_1024["model"].encode(rows[:2])[:, :4], 0)


@pytest.mark.parametrize("kind", ("ivf", "rerank", "serving"))
def test_top_k_only_indexes_refuse_range_search_and_codes_alone_in_one_line(sift_1024, indexes, kind):
    index, rows = indexes[kind], sift_1024["rows"]
    for call in (lambda: index.range_search(rows[:2], 3), lambda: index.range_search_codes(rows[:2], 3)):
        with pytest.raises(InputError) as raised:
            call()
        assert "answers top-k searches only: call search(vectors, k) or search_codes(queries, k)" in str(raised.value)
    with pytest.raises(InputError) as raised:
        index.search_codes(sift_1024["model"].encode(rows[:2]), K)  # codes without their vectors
    message = str(raised.value)
    assert "pass Queries(codes=..., vectors=...) to search_codes, or to search vectors call search(vectors, k)" in (
        message
    ), message


def test_an_index_without_a_model_and_arrays_of_the_wrong_kind_are_refused(sift_1024):
    rows, codes = sift_1024["rows"], sift_1024["codes"]
    flat = FlatIndex(codes)  # no model: vectors cannot be encoded
    with pytest.raises(InputError, match=r"this index has no `model` to encode query vectors; .*call search_codes"):
        flat.search(rows[:2], K)
    with dask.config.set(scheduler="synchronous"):
        with pytest.raises(InputError, match="query codes must be a 2-D uint8 array of packed codes, 128 bytes per"):
            flat.search_codes(rows[:2].astype(np.float32), K)
        with pytest.raises(InputError, match="got uint8 of 128 values"):
            flat.search_codes(codes.take([0])[0], K)  # one code without its row axis
        with pytest.raises(InputError, match=r"search takes the query vectors; .* call search_codes\(queries, k\)"):
            FlatIndex(codes, model=sift_1024["model"]).search(Queries(codes=codes.take([0]), vectors=rows[:1]), K)
        with pytest.raises(InputError, match="query vectors must be a 2-D array of uint8, float16, float32 or float64"):
            FlatIndex(codes, model=sift_1024["model"]).search(rows[:2].astype(np.int64), K)


def test_a_model_of_another_width_is_named_with_both_widths(sift_1024):
    rows = sift_1024["rows"]
    narrow = dask_hashcodes.make_hasher("lsh", 32).fit(rows.astype(np.float32))
    with pytest.raises(InputError) as raised:
        FlatIndex(sift_1024["codes"], model=narrow).search(rows[:2], K)
    assert str(raised.value).startswith(
        "the index's `model` encodes 4-byte (32-bit) codes but the index holds 128-byte (1024-bit) codes;"
    )


def test_serving_tune_takes_vectors_and_tune_codes_queries(sift_1024):
    d, model, codes, rows = sift_1024["dir"], sift_1024["model"], sift_1024["codes"], sift_1024["rows"]
    serving = ServingIVF.load(dask_hashcodes.open_ivf(d / "v.zarr", codes), vectors=rows, model=model)
    # each query's own row is one of its exact top 5 and found first: recall at least 1/5
    grid = {"k": K, "target": 0.2, "nprobes": (8,), "k_factors": (10,)}
    by_vectors = serving.tune(rows[QUERIES], **grid)
    assert by_vectors.reached and by_vectors.recall >= 0.2 and len(by_vectors.trials) == 1
    by_codes = serving.tune_codes(Queries(codes=model.encode(rows[QUERIES]), vectors=rows[QUERIES]), **grid)
    assert by_codes.recall == by_vectors.recall
    with pytest.raises(InputError, match=r"pass Queries\(codes=\.\.\., vectors=\.\.\.\) to search_codes"):
        serving.tune_codes(model.encode(rows[QUERIES]), **grid)
