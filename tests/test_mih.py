"""Multi-index hashing gives the linear scan's results exactly: the same distances and ids
(ties by id) for kNN, the same (query, id, distance) lists for radius search."""

from __future__ import annotations

import numpy as np
import pytest

from dask_hashcodes.errors import InputError
from dask_hashcodes.indexes.mih import checked_substrings
from dask_hashcodes.kernels.hamming import hamming_radius, hamming_topk
from dask_hashcodes.kernels.mih import build_tables, default_substrings, mih_radius, mih_topk, substring_starts


def clustered_codes(rng, n, n_bits, n_centres=50, flip=0.08):
    """Codes around random centres (as learned codes are), some exact duplicates (ties)."""
    centres = rng.integers(0, 256, (n_centres, n_bits // 8), dtype=np.uint8)
    codes = centres[rng.integers(0, n_centres, n)] ^ np.packbits(rng.random((n, n_bits)) < flip, axis=1)
    codes[: n // 100] = codes[n // 100 : 2 * (n // 100)]
    return codes


def assert_same_as_linear_scan(codes, ids, queries, n_bits, m, ks=(1, 10, 100), radii=(0, 3)):
    tables = build_tables(codes, n_bits, m)
    for k in ks:
        got = mih_topk(codes, ids, tables, queries=queries, k=k, n_bits=n_bits)
        want = hamming_topk(codes, ids, queries=queries, k=k)
        np.testing.assert_array_equal(got[0], want[0], err_msg=f"{n_bits} bits, m={m}, k={k}: distances")
        np.testing.assert_array_equal(got[1], want[1], err_msg=f"{n_bits} bits, m={m}, k={k}: ids")
    for radius in radii:
        got = mih_radius(codes, ids, tables, queries=queries, radius=radius, n_bits=n_bits)
        want = hamming_radius(queries, codes, ids, radius)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w, err_msg=f"{n_bits} bits, m={m}, radius {radius}")


@pytest.mark.parametrize("n_bits", [32, 64, 128])
def test_knn_and_radius_equal_the_linear_scan_for_every_substring_count(n_bits):
    rng = np.random.default_rng(n_bits)
    codes = clustered_codes(rng, 20_000, n_bits)
    queries = codes[rng.integers(0, len(codes), 25)] ^ np.packbits(rng.random((25, n_bits)) < 0.05, axis=1)
    ids = np.arange(len(codes), dtype=np.int64) * 3 + 7  # global ids of a block that is not the first
    fewest = -(-n_bits // 26)
    for m in sorted({default_substrings(n_bits, len(codes)), fewest, n_bits // 4, min(n_bits, 64)}):
        assert_same_as_linear_scan(codes, ids, queries, n_bits, m, radii=(0, 3, n_bits // 8, n_bits // 4))


def test_one_million_64_bit_codes_give_the_linear_scans_neighbours():
    rng = np.random.default_rng(1)
    codes = clustered_codes(rng, 1_000_000, 64, n_centres=1000, flip=0.1)
    queries = codes[rng.integers(0, len(codes), 40)] ^ np.packbits(rng.random((40, 64)) < 0.05, axis=1)
    ids = np.arange(len(codes), dtype=np.int64)
    assert default_substrings(64, len(codes)) == 3
    assert_same_as_linear_scan(codes, ids, queries, 64, 3, ks=(100,), radii=(8,))


def test_fewer_codes_than_k_odd_lengths_and_far_queries():
    rng = np.random.default_rng(2)
    codes = np.packbits(rng.random((37, 40)) < 0.5, axis=1)  # 40 bits in 5 bytes, m = 3: 14 + 13 + 13
    queries = np.packbits(rng.random((6, 40)) < 0.5, axis=1)
    queries[0] = ~codes[5]  # at distance 40 from one code
    assert_same_as_linear_scan(
        codes, np.arange(37, dtype=np.int64), queries, 40, 3, ks=(1, 36, 37, 50), radii=(0, 17, 40)
    )


def test_bad_substring_counts_and_mismatched_indexes_give_one_line_errors():
    with pytest.raises(InputError, match="at least 3 substrings"):
        checked_substrings(64, 2)
    with pytest.raises(InputError, match="between 1 and the code's 64 bits"):
        checked_substrings(64, 65)
    codes = np.zeros((10, 8), np.uint8)
    tables = build_tables(codes, 64, 4)
    with pytest.raises(ValueError, match="rebuild the index"):
        mih_topk(codes[:5], np.arange(5), tables, queries=codes[:1], k=1, n_bits=64)
    assert list(substring_starts(10, 3)) == [0, 4, 7, 10]


def test_the_index_on_the_cluster_equals_the_linear_scan_whatever_the_chunking(client):
    import dask.array as da

    from dask_hashcodes.indexes.hamming import flat_hits, knn_search, radius_search
    from dask_hashcodes.indexes.mih import MultiIndex

    rng = np.random.default_rng(3)
    codes = clustered_codes(rng, 30_000, 64)
    queries = codes[rng.integers(0, len(codes), 20)] ^ np.packbits(rng.random((20, 64)) < 0.05, axis=1)
    want = knn_search(queries, codes, 50)
    want_radius = radius_search(queries, codes, 6)
    for rows in (30_000, 7_001):
        index = MultiIndex(da.from_array(codes, chunks=(rows, 8)))
        got = index.search_codes(queries, 50)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        lims, dist, ids = index.range_search_codes(queries, 6)
        for g, w in zip((flat_hits(lims), ids, dist), want_radius, strict=True):
            np.testing.assert_array_equal(g, w)
    with pytest.raises(InputError, match=r"query codes are 4 bytes \(32 bits\) wide but the index holds 8-byte"):
        index.search_codes(queries[:, :4], 5)
