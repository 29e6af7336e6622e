"""The inverted file's kernels (kernels/ivf.py) against brute force over the probed lists."""

import numpy as np
import pytest

from dhash.kernels.codes import pack_signs
from dhash.kernels.hamming import hamming_distances, hamming_topk
from dhash.kernels.ivf import list_layout, probed_lists, search_lists
from dhash.kernels.knn import cell_partition


def _problem(n=3000, d=8, bits=64, n_lists=20, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    codes = pack_signs(X @ rng.standard_normal((d, bits)) + 0.3 * rng.standard_normal((n, bits)))
    centroids, assignment = cell_partition(X, n_lists, rng)
    order, offsets = list_layout(assignment, n_lists)
    queries = rng.standard_normal((50, d))
    query_codes = pack_signs(queries @ rng.standard_normal((d, bits)))
    return codes, assignment, centroids, order, offsets, queries, query_codes


def _brute_force(query_codes, codes, rows, k):
    dist = hamming_distances(query_codes[None], codes[rows])[0]
    ranked = np.lexsort((rows, dist))[:k]
    return dist[ranked], rows[ranked]


@pytest.mark.parametrize("nprobe", [1, 3, 7])
def test_ivf_search_equals_brute_force_over_the_probed_lists(nprobe):
    codes, assignment, centroids, order, offsets, queries, query_codes = _problem()
    probes = probed_lists(queries, centroids, nprobe)
    dist, ids = search_lists(query_codes, probes, codes[order], order, offsets, k=25)
    for q in range(len(queries)):
        rows = np.flatnonzero(np.isin(assignment, probes[q]))
        want_d, want_i = _brute_force(query_codes[q], codes, rows, 25)
        np.testing.assert_array_equal(ids[q, : len(want_i)], want_i)
        np.testing.assert_array_equal(dist[q, : len(want_d)], want_d)
        assert (ids[q, len(want_i) :] == -1).all()


def test_probing_every_list_is_the_linear_scan():
    codes, _, centroids, order, offsets, queries, query_codes = _problem()
    dist, ids = search_lists(query_codes, probed_lists(queries, centroids, 20), codes[order], order, offsets, k=40)
    want_d, want_i = hamming_topk(codes, np.arange(len(codes)), queries=query_codes, k=40)
    np.testing.assert_array_equal(ids, want_i)
    np.testing.assert_array_equal(dist, want_d)


def test_lists_hold_every_row_once_ascending_inside():
    _, assignment, _, order, offsets, _, _ = _problem()
    np.testing.assert_array_equal(np.sort(order), np.arange(len(assignment)))
    for lst in range(20):
        members = order[offsets[lst] : offsets[lst + 1]]
        assert (assignment[members] == lst).all() and (np.diff(members) > 0).all()


def test_nprobe_out_of_range_and_bad_list_numbers_are_errors():
    centroids = np.zeros((4, 2))
    for nprobe in (0, 5):
        with pytest.raises(ValueError, match=r"nprobe must lie in \[1, 4\]"):
            probed_lists(np.zeros((1, 2)), centroids, nprobe)
    with pytest.raises(ValueError, match=r"list numbers must lie in \[0, 4\)"):
        list_layout(np.array([0, 4]), 4)
