"""Numeric kernels against brute-force references (plain numpy, no Dask)."""

import numpy as np
import pytest

from dask_hashcodes.kernels import codes, hamming, ranking, stats
from tests import reference as ref


def random_codes(rng, n, n_bits):
    return codes.pack_signs(rng.standard_normal((n, n_bits)))


@pytest.mark.parametrize("n_bits", [8, 12, 32, 64, 100])
def test_hamming_distances_match_bit_counting(n_bits):
    rng = np.random.default_rng(n_bits)
    q, c = random_codes(rng, 7, n_bits), random_codes(rng, 50, n_bits)
    np.testing.assert_array_equal(hamming.hamming_distances(q, c), ref.popcount_distances(q, c))


def test_padding_bits_are_zero_and_never_count():
    proj = np.ones((3, 12))
    packed = codes.pack_signs(proj)
    assert packed.shape == (3, 2)
    assert packed[0, 1] == 0b1111  # bits 8..11 set, 4 padding bits clear
    np.testing.assert_array_equal(codes.unpack_bits(packed, 12), np.ones((3, 12), np.uint8))


def test_sign_of_zero_is_plus_one():
    assert codes.pack_signs(np.zeros((1, 8)))[0, 0] == 255
    assert codes.pack_signs(np.array([[0.0, -0.0, -1, 2, 0, 0, 0, 0]]))[0, 0] == 0b11111011  # -0.0 >= 0 too


@pytest.mark.parametrize("k", [1, 5, 40, 60])
def test_topk_and_merge_equal_bruteforce_with_ties_by_id(k):
    rng = np.random.default_rng(k)
    q, c = random_codes(rng, 9, 8), random_codes(rng, 50, 8)  # 8 bits: many ties
    ids = np.arange(50) * 3 + 7
    want_d, want_i = ref.topk_bruteforce(ref.popcount_distances(q, c), ids, min(k, 50))
    got_d, got_i = hamming.hamming_topk(c, ids, queries=q, k=k)
    np.testing.assert_array_equal(got_d[:, : min(k, 50)], want_d)
    np.testing.assert_array_equal(got_i[:, : min(k, 50)], want_i)
    if k > 50:
        assert (got_i[:, 50:] == -1).all() and (got_d[:, 50:] == -1).all()
    # shard then merge, shards in scrambled order, gives the same answer
    parts = [hamming.hamming_topk(c[s], ids[s], queries=q, k=k) for s in (slice(30, 50), slice(0, 13), slice(13, 30))]
    md, mi = hamming.merge_topk(parts, k)
    np.testing.assert_array_equal(md, got_d)
    np.testing.assert_array_equal(mi, got_i)


@pytest.mark.parametrize("bits", [8, 32, 64, 96, 128, 256])
def test_the_tiled_scan_is_brute_force_at_every_width_across_tiles(bits):
    """One-word and two-word codes (tested as their distances are computed, never stored) and
    wider ones (distances stored per tile), over 9,000 codes (three tiles, the last partial):
    the brute-force top-k, ties by id. Few distinct bits make many ties at the cut."""
    rng = np.random.default_rng(bits)
    c = random_codes(rng, 9000, bits) & random_codes(rng, 9000, bits)  # sparse bits: many equal distances
    q = random_codes(rng, 7, bits)
    ids = np.arange(9000) * 2 + 1
    want_d, want_i = ref.topk_bruteforce(ref.popcount_distances(q, c), ids, 25)
    got_d, got_i = hamming.hamming_topk(c, ids, queries=q, k=25)
    np.testing.assert_array_equal(got_d, want_d)
    np.testing.assert_array_equal(got_i, want_i)


def test_radius_search_equals_bruteforce():
    rng = np.random.default_rng(3)
    q, c = random_codes(rng, 5, 16), random_codes(rng, 200, 16)
    ids = np.arange(200)
    qi, ii, dd = hamming.hamming_radius(q, c, ids, 5)
    dist = ref.popcount_distances(q, c)
    want = sorted((a, int(dist[a, b]), b) for a, b in zip(*np.nonzero(dist <= 5)))
    assert list(zip(qi.tolist(), dd.tolist(), ii.tolist())) == want


def test_moments_combine_in_any_order_equals_numpy_cov():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 6)) * 5 + 1000  # large offset: naive sums lose digits
    parts = [stats.chunk_moments(X[a:b]) for a, b in ((0, 17), (17, 200), (200, 300))]
    m = stats.combine_moments(parts[2], stats.combine_moments(parts[0], parts[1]))
    mean, cov = stats.covariance(m)
    np.testing.assert_allclose(mean, X.mean(0), rtol=1e-12)
    np.testing.assert_allclose(cov, np.cov(X.T, bias=True), rtol=1e-9)


def _random_ranking_problem(seed, m=6, n=40, n_bits=6, n_classes=3):
    rng = np.random.default_rng(seed)
    q, c = random_codes(rng, m, n_bits), random_codes(rng, n, n_bits)
    dist = hamming.hamming_distances(q, c)
    rel = ranking.relevance_from_labels(rng.integers(0, n_classes, m), rng.integers(0, n_classes, n))
    return dist, rel, n_bits


@pytest.mark.parametrize("seed", range(4))
def test_map_ties_by_id_from_chunk_histograms_equals_bruteforce(seed):
    dist, rel, n_bits = _random_ranking_problem(seed)
    ids = np.arange(dist.shape[1])
    bounds = [(0, 7), (7, 8), (8, 30), (30, 40)]  # uneven chunks in id order
    hists = [ranking.distance_histograms(dist[:, a:b], rel[:, a:b], n_bits) for a, b in bounds]
    offsets = ranking.rank_offsets(hists)
    sums = sum(ranking.ap_precision_sums(dist[:, a:b], rel[:, a:b], *off) for (a, b), off in zip(bounds, offsets))
    got = ranking.mean_ap(sums, rel.sum(1)).mean()
    assert got == pytest.approx(ref.map_full(dist, rel, ids), abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_tie_aware_ap_equals_enumeration_over_orderings(seed):
    dist, rel, n_bits = _random_ranking_problem(seed, m=3, n=9, n_bits=3)
    total, relh = ranking.distance_histograms(dist, rel, n_bits)
    got = ranking.tie_aware_ap(total, relh)
    want = [ref.tie_aware_ap_enumerated(dist[q], rel[q]) for q in range(3)]
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_radius_precision_recall_equals_bruteforce():
    dist, rel, n_bits = _random_ranking_problem(7, m=20, n=30, n_bits=8)
    total, relh = ranking.distance_histograms(dist, rel, n_bits)
    p, r, f = ranking.radius_precision_recall(total, relh)
    for radius in range(n_bits + 1):
        wp, wr, wf = ref.precision_recall_at_radius(dist, rel, radius)
        assert (p[radius], r[radius], f[radius]) == pytest.approx((wp, wr, wf), abs=1e-12)
    assert f[0] > 0  # the case of failed queries is exercised


def test_topk_metrics_equal_bruteforce():
    dist, rel, n_bits = _random_ranking_problem(11, m=8, n=60, n_bits=5)
    ids = np.arange(60)
    order = np.array([ref.full_ranking(dist[q], ids) for q in range(8)])
    rel_ranked = np.take_along_axis(rel, order, axis=1)
    got = ranking.topk_metrics(rel_ranked[:, :20], rel.sum(1), [1, 5, 20])
    for k in (1, 5, 20):
        assert got[f"precision@{k}"] == pytest.approx(rel_ranked[:, :k].mean(), abs=1e-12)
        assert got[f"recall@{k}"] == pytest.approx((rel_ranked[:, :k].sum(1) / rel.sum(1)).mean(), abs=1e-12)
        assert got[f"map@{k}"] == pytest.approx(ref.map_at_k(dist, rel, ids, k), abs=1e-12)


def test_relevance_from_neighbours_and_multilabel():
    nb = np.array([[3, 8, -1], [1, 2, 9]])
    ids = np.array([1, 3, 5, 8])
    np.testing.assert_array_equal(ranking.relevance_from_neighbours(nb, ids), [[0, 1, 0, 1], [1, 0, 0, 0]])
    ql = np.array([[1, 0, 1], [0, 1, 0]], np.uint8)
    dl = np.array([[0, 0, 1], [1, 1, 0], [0, 0, 0]], np.uint8)
    np.testing.assert_array_equal(ranking.relevance_from_labels(ql, dl), [[1, 1, 0], [0, 1, 0]])


def test_l2_topk_and_merge_equal_bruteforce_with_ties():
    from dask_hashcodes.kernels import l2

    rng = np.random.default_rng(5)
    X = rng.integers(0, 3, (120, 4)).astype(np.uint8)  # tiny integer grid: many exact ties
    Q = rng.integers(0, 3, (6, 4)).astype(np.uint8)
    ids = np.arange(120)
    want_d, want_i = ref.l2_topk_bruteforce(Q, X, ids, 25)
    got_d, got_i = l2.l2_topk(X, ids, queries=Q, k=25)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_d, want_d)
    a = l2.l2_topk(X[70:], ids[70:], queries=Q, k=25)
    b = l2.l2_topk(X[:70], ids[:70], queries=Q, k=25)
    md, mi = l2.merge_l2_topk(a, b, 25)
    np.testing.assert_array_equal(mi, want_i)


@pytest.mark.parametrize("kind", ["labels", "euclidean"])
def test_fused_metric_passes_equal_generic_passes(kind):
    """The fused distance+relevance kernels give the same histograms and precision sums as
    the generic (matrix) path, over chunks longer than a tile and with ties."""
    from dask_hashcodes.evaluation.chunk_metrics import chunk_histograms, chunk_precision_sums
    from dask_hashcodes.evaluation.truth import Truth

    rng = np.random.default_rng(8)
    n, m, n_bits = 9000, 7, 12  # 12 bits: many ties; 9000 > 2 tiles
    q, c = random_codes(rng, m, n_bits), random_codes(rng, n, n_bits)
    ids = np.arange(n) * 3 + 5  # ascending, not row numbers
    labels = rng.integers(0, 4, n)
    if kind == "labels":
        truth = Truth("labels", query_labels=rng.integers(0, 4, m))
    else:
        nb = np.stack([np.sort(rng.choice(ids, 50, replace=False)) for _ in range(m)])
        nb[:, -3:] = -1  # padded lists
        truth = Truth("euclidean", neighbours=rng.permuted(nb, axis=1))
    dist = hamming.hamming_distances(q, c)
    rel = truth.chunk_relevance(ids, labels)
    bounds = [(0, 4100), (4100, 4101), (4101, n)]
    want_h = [ranking.distance_histograms(dist[:, a:b], rel[:, a:b], n_bits) for a, b in bounds]
    got_h = [
        chunk_histograms(c[a:b], ids[a:b], labels[a:b], None, queries=q, truth=truth, n_bits=n_bits) for a, b in bounds
    ]
    for g, w in zip(got_h, want_h):
        np.testing.assert_array_equal(g[0], w[0])
        np.testing.assert_array_equal(g[1], w[1])
    offsets = ranking.rank_offsets(want_h)
    for (a, b), off in zip(bounds, offsets):
        want = ranking.ap_precision_sums(dist[:, a:b], rel[:, a:b], *off)
        got = chunk_precision_sums(c[a:b], ids[a:b], labels[a:b], None, *off, queries=q, truth=truth)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert rel.sum() > 0


INTEGER_EXTREMES = [
    (np.int8, -128, 127),
    (np.uint8, 0, 255),
    (np.int16, -32768, 32767),
    (np.uint16, 0, 65535),
    (np.int32, -(2**31), 2**31 - 1),
    (np.uint32, 0, 2**32 - 1),
    (np.int64, -(2**62), 2**62),
    (np.uint64, 0, 2**64 - 1),
    (np.int64, 10_000_000, 400_000_000),
]


@pytest.mark.parametrize("dtype, low, high", INTEGER_EXTREMES)
def test_gram_of_integer_features_is_exact_at_the_dtype_extremes(dtype, low, high):
    """Integer Gram terms equal the float64 computation on the same values: no int32
    accumulator overflows, whatever the dtype and value range (6000 rows: several slabs)."""
    from dask_hashcodes.kernels.gram import gram_chunk

    rng = np.random.default_rng(3)
    X = rng.integers(low, high, (6000, 12), dtype=dtype, endpoint=True)
    X[:50] = high
    X[50:100] = low  # rows at both extremes, in the same accumulation run
    mean = X.astype(np.float64).mean(axis=0)
    C = np.linalg.qr(rng.standard_normal((12, 16)))[0]
    got = gram_chunk(X, mean, C)
    want = gram_chunk(X.astype(np.float64), mean, C)  # float64 accumulation, same signs
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())


@pytest.mark.parametrize("rows", [1, 300, 4095])
def test_small_uint8_blocks_give_the_byte_table_gram_bit_for_bit(rows, monkeypatch):
    """Below SMALL_BLOCK_ROWS a uint8 block's Gram comes from a float32 GEMM: the same bits as
    the byte-value tables (so a model does not depend on how small its node pieces are), at
    the largest value in every cell (the GEMM's partial sums are largest then)."""
    from dask_hashcodes.kernels import gram

    rng = np.random.default_rng(rows)
    X = rng.integers(0, 256, (rows, 40), dtype=np.uint8)
    X[: rows // 3] = 255
    mean = X.astype(np.float64).mean(axis=0) + 0.25
    C = np.linalg.qr(rng.standard_normal((40, 24)))[0]
    assert rows < gram.SMALL_BLOCK_ROWS
    small = gram.gram_chunk(X, mean, C)
    monkeypatch.setattr(gram, "SMALL_BLOCK_ROWS", 0)
    np.testing.assert_array_equal(small, gram.gram_chunk(X, mean, C))


def test_itq_codes_of_int64_features_equal_those_of_the_float64_copy():
    from dask_hashcodes.hashing import ITQ

    X = np.random.default_rng(4).integers(10_000_000, 400_000_000, (5000, 20), dtype=np.int64)
    as_int = ITQ(16, n_iter=10, random_state=0).fit(X)
    as_float = ITQ(16, n_iter=10, random_state=0).fit(X.astype(np.float64))
    np.testing.assert_array_equal(as_int.encode(X), as_float.encode(X.astype(np.float64)))
