"""Large-K Euclidean ground truth (relevance bits from exact K-th-neighbour thresholds)
against brute force and against the neighbour-list form, on real zarr datasets."""

from __future__ import annotations

import numpy as np
import pytest

from dask_hashcodes.data.synth import write_sift_synth
from dask_hashcodes.evaluation import truth as T
from dask_hashcodes.kernels.l2 import relevant_positions, unpack_relevance
from dask_hashcodes.storage.datasets import write_dataset


def brute_force_topk(ds, split, k):
    """(m, n) bool: the k nearest database rows of each query by squared L2, ties by row."""
    X = ds.features[...].astype(np.float64)
    Q = X[split.query]
    dist = ((Q[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
    dist[:, split.query] = np.inf
    order = np.lexsort((np.broadcast_to(np.arange(ds.n), dist.shape), dist), axis=1)[:, :k]
    want = np.zeros(dist.shape, bool)
    np.put_along_axis(want, order, True, axis=1)
    return want


def stored_bits(ds, split, k):
    relevance, thresholds, attrs = T.relevance_groundtruth(ds, split, top_k=k)
    return unpack_relevance(relevance[...], split.n_query), thresholds, attrs


@pytest.fixture(scope="module")
def sift(tmp_path_factory):
    ds = write_sift_synth(tmp_path_factory.mktemp("truth") / "sift.zarr", 6000, seed=4, chunk_rows=1500)
    return ds, ds.make_split(21, 3)


@pytest.mark.parametrize("k", [1, 120, 2000, 5979])
def test_relevance_bits_equal_brute_force(sift, k):
    ds, split = sift
    bits, thresholds, attrs = stored_bits(ds, split, k)
    want = brute_force_topk(ds, split, k)
    np.testing.assert_array_equal(bits, want)
    assert attrs["form"] == "relevance bits" and attrs["k"] == k
    # the stored threshold is the k-th neighbour itself
    X = ds.features[...].astype(np.float64)
    kth = thresholds["threshold_id"]
    assert want[np.arange(split.n_query), kth].all()
    np.testing.assert_array_equal(thresholds["threshold_distance"], ((X[split.query] - X[kth]) ** 2).sum(axis=1))


def test_bad_sample_and_ties_take_more_passes_and_stay_exact(tmp_path, monkeypatch):
    """Heavy ties (4 distinct values per entry) and a sample that places every window
    badly: the counting passes narrow down until the answer is exact anyway."""
    rng = np.random.default_rng(0)
    X = rng.integers(0, 4, (5000, 6)).astype(np.uint8)
    ds = write_dataset(tmp_path / "ties.zarr", [X], n=len(X), d=6, dtype=np.uint8, source="test", chunk_rows=1200)
    split = ds.make_split(9, 1)
    monkeypatch.setattr(T, "SAMPLE_ROWS", 7)
    monkeypatch.setattr(T, "WINDOW_BINS", 3)
    monkeypatch.setattr(T, "MAX_WINDOW_MEMBERS", 2)
    for k in (1, 37, 2500):
        bits, _, attrs = stored_bits(ds, split, k)
        np.testing.assert_array_equal(bits, brute_force_topk(ds, split, k))
        assert attrs["counting_passes"] >= 2


def test_evaluation_is_the_same_with_lists_and_bits(sift, monkeypatch):
    """Every metric of an evaluation is identical whichever form holds the ground truth."""
    from dask_hashcodes import workflows

    ds, _ = sift
    args = {
        "methods": ["lsh"],
        "bits": [16],
        "queries": 30,
        "seed": 2,
        "ground_truth": "euclidean",
        "top_k": 300,
        "ks": [1, 50, 300, 1000],
    }
    as_lists = workflows.evaluate(ds, **args)
    monkeypatch.setattr(T, "MAX_LISTED_NEIGHBOURS", 100)
    as_bits = workflows.evaluate(ds, **args)
    assert as_lists["ground_truth"]["form"] == "neighbour lists" and as_bits["ground_truth"]["form"] == "relevance bits"
    assert as_lists["results"][0]["metrics"] == as_bits["results"][0]["metrics"]


def test_positions_from_bits_match_unpacked_bits():
    rng = np.random.default_rng(5)
    for m in (1, 8, 13):
        rel = rng.random((m, 300)) < 0.1
        rel[0] = False  # a query with nothing relevant
        bits = np.packbits(rel.T, axis=1, bitorder="little")
        np.testing.assert_array_equal(unpack_relevance(bits, m), rel)
        pos = relevant_positions(bits, m)
        for q in range(m):
            got = pos[q][pos[q] < 300]
            np.testing.assert_array_equal(got, np.flatnonzero(rel[q]))
            assert (pos[q][len(got) :] == 300).all()


def test_unpacking_a_query_slice_reads_only_its_bytes():
    rng = np.random.default_rng(6)
    m = 21
    rel = rng.random((m, 50)) < 0.3
    bits = np.packbits(rel.T, axis=1, bitorder="little")
    for qs in (slice(None), slice(0, 8), slice(3, 4), slice(5, 19), slice(16, 21), slice(1, 20, 3)):
        np.testing.assert_array_equal(unpack_relevance(bits, m, qs), rel[qs])


def test_stored_neighbour_lists_stay_out_of_the_evaluation_graphs(client, tmp_path):
    """1300 queries x 1000 listed neighbours (10.4 MB of ids) are read by the metric tasks
    from the stored ground truth, not embedded in each graph: no "Sending large graph"
    warning, and the metrics equal those computed with the lists in memory."""
    import warnings

    from dask_hashcodes import workflows

    ds = write_sift_synth(tmp_path / "sift.zarr", 8000, seed=6, chunk_rows=2000)
    args = {
        "methods": ["lsh"],
        "bits": [64],
        "queries": 1300,
        "seed": 1,
        "ground_truth": "euclidean",
        "top_k": 1000,
        "ks": [10, 1000],
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stored = workflows.evaluate(ds, **args)
    assert not [w for w in caught if "large graph" in str(w.message)], [str(w.message)[:80] for w in caught]
    split = ds.get_split("q1300-s1")
    truth = T.build_truth(ds, split, ground_truth="euclidean", top_k=1000)
    assert truth.stored is not None and truth.for_chunks().neighbours is None
    in_memory = T.Truth("euclidean", neighbours=truth.neighbours)
    assert np.array_equal(in_memory.for_chunks().neighbour_lists(), truth.for_chunks().neighbour_lists())
    assert stored["results"][0]["metrics"]["map"] > 0
