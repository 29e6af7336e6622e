"""Search on a real cluster vs brute force and FAISS; estimators numpy vs dask; models on disk."""

import dask.array as da
import faiss
import numpy as np
import pytest

from dask_hashcodes import ITQ, LSH, PCAH, InputError, knn_search, load_model, radius_search
from dask_hashcodes.kernels.codes import pack_signs
from tests import reference as ref


@pytest.fixture(scope="module")
def codes_10k():
    rng = np.random.default_rng(0)
    # low-rank projections: codes cluster, so many equal distances (ties) occur
    proj = rng.standard_normal((10_000, 6)) @ rng.standard_normal((6, 32))
    return pack_signs(proj), pack_signs(rng.standard_normal((50, 6)) @ rng.standard_normal((6, 32)))


@pytest.mark.parametrize("task_bytes", [None, 1], ids=["merged-chunks", "one-task-per-chunk"])
def test_knn_on_cluster_equals_bruteforce_ties_by_id(client, codes_10k, task_bytes, monkeypatch):
    from dask_hashcodes.indexes import hamming

    if task_bytes is not None:  # every 1700-row chunk its own task: top-k lists merged across tasks
        monkeypatch.setattr(hamming, "SCAN_TASK_BYTES", task_bytes)
    db, q = codes_10k
    dist, ids = knn_search(q, da.from_array(db, chunks=1700), 100)
    want_d, want_i = ref.topk_bruteforce(ref.popcount_distances(q, db), np.arange(len(db)), 100)
    np.testing.assert_array_equal(dist, want_d)
    np.testing.assert_array_equal(ids, want_i)
    assert dist.dtype == np.int32 and ids.dtype == np.int64


def test_scan_tasks_take_whole_runs_of_stored_chunks():
    from dask_hashcodes.distributed.graph import merged_row_chunks

    x = da.zeros((9_700, 4), dtype=np.uint8, chunks=(1_700, 4))  # 5 chunks of 1,700 rows and one of 1,200
    assert merged_row_chunks(x, 3 * 1_700 * 4).chunks[0] == (5_100, 4_600)
    assert merged_row_chunks(x, 1_700 * 4).chunks[0] == x.chunks[0]  # already that large: kept
    assert merged_row_chunks(x, 1 << 30).chunks[0] == (9_700,)


def test_faiss_binary_flat_agrees_on_our_codes(client, codes_10k):
    db, q = codes_10k
    index = faiss.IndexBinaryFlat(db.shape[1] * 8)
    index.add(db)
    f_dist, f_ids = index.search(q, 100)
    dist, ids = knn_search(q, da.from_array(db, chunks=3000), 100)
    np.testing.assert_array_equal(dist, f_dist)  # identical distance lists
    full = ref.popcount_distances(q, db)
    for row in range(len(q)):
        # the same neighbours up to ties: every id FAISS returns is at the distance it claims,
        # and strictly-closer sets agree exactly
        assert (full[row, f_ids[row]] == f_dist[row]).all()
        kth = dist[row, -1]
        assert set(ids[row][dist[row] < kth]) == set(f_ids[row][f_dist[row] < kth])


def test_radius_search_on_cluster_equals_bruteforce(client, codes_10k):
    db, q = codes_10k
    qi, ids, dd = radius_search(q, da.from_array(db, chunks=2500), 3)
    full = ref.popcount_distances(q, db)
    want = sorted((a, int(full[a, b]), b) for a, b in zip(*np.nonzero(full <= 3)))
    assert list(zip(qi.tolist(), dd.tolist(), ids.tolist())) == want


@pytest.mark.parametrize("cls", [LSH, PCAH, ITQ])
def test_fit_numpy_equals_fit_dask_and_roundtrip(client, cls, tmp_path):
    rng = np.random.default_rng(1)
    X = (rng.standard_normal((6000, 40)) @ rng.standard_normal((40, 40))).astype(np.float32)
    a = cls(n_bits=16).fit(X)
    b = cls(n_bits=16).fit(da.from_array(X, chunks=(1000, 40)))
    np.testing.assert_allclose(a.components_, b.components_, atol=1e-8)
    codes_np = a.encode(X)
    np.testing.assert_array_equal(codes_np, b.encode(da.from_array(X, chunks=(777, 40))).compute())
    a.save(tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert loaded.model_id == a.model_id
    np.testing.assert_array_equal(loaded.encode(X), codes_np)
    # arrays are a plain npz: loads with allow_pickle=False
    with np.load(tmp_path / "m" / "arrays.npz", allow_pickle=False) as npz:
        assert "components_" in npz.files


def test_itq_loss_decreases_and_beats_pca_quantisation():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((4000, 30)) @ rng.standard_normal((30, 30))
    m = ITQ(n_bits=8, n_iter=30).fit(X)
    loss = m.training_stats_["quantization_loss"]
    assert all(b <= a + 1e-6 for a, b in zip(loss, loss[1:]))
    assert loss[-1] < loss[0]


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.array([[1.0, np.nan], [0.0, 1.0]] * 10), "row 0 contains NaN"),
        (np.array([[1.0, 2.0], [np.inf, 1.0]] * 10), "row 1 contains NaN or Inf"),
        (np.array([["a", "b"]] * 5), "not numeric"),
        (np.zeros((0, 5)), "0 sample"),
        (np.zeros(5), "Expected 2D array"),
    ],
)
def test_bad_training_data_gives_one_line_errors(bad, match):
    with pytest.raises(InputError, match=match) as info:
        LSH(n_bits=4).fit(bad)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "cls, n_bits, match",
    [
        (PCAH, 0, "must be an int in the range"),
        (ITQ, 11, "at most the number of features"),
        (ITQ, -3, "range"),
        (LSH, 0, "range"),
        (PCAH, 2.5, "must be an int"),
    ],
)
def test_bad_n_bits(cls, n_bits, match):
    with pytest.raises(InputError, match=match):
        cls(n_bits=n_bits).fit(np.random.default_rng(0).standard_normal((50, 10)))


def test_encode_rejects_other_dimensionality_and_unfitted():
    X = np.random.default_rng(0).standard_normal((100, 10))
    with pytest.raises(InputError, match="not fitted"):
        PCAH(n_bits=4).encode(X)
    m = PCAH(n_bits=4).fit(X)
    with pytest.raises(InputError, match="X has 12 features, but .* is expecting 10 features"):
        m.encode(np.zeros((3, 12)))
    with pytest.raises(InputError, match="row 1 contains NaN"):
        m.encode(np.array([[0.0] * 10, [np.nan] * 10]))


def test_search_rejects_non_uint8_and_mismatched_codes():
    db = np.zeros((10, 4), np.uint8)
    with pytest.raises(InputError, match="packed uint8"):
        knn_search(np.zeros((1, 4), np.int64), db, 3)
    with pytest.raises(InputError, match=r"query codes are 8 bytes \(64 bits\) wide but the database holds 4-byte"):
        knn_search(np.zeros((1, 8), np.uint8), db, 3)


def test_encode_to_zarr_equals_encode_for_regular_and_irregular_chunks(client, tmp_path):
    """`dhash encode`'s one-task-per-chunk writer gives the same codes as model.encode, and
    irregular row chunks (where two tasks could share a codes chunk) are re-cut to the array's chunks first."""
    from dask_hashcodes.distributed.encode import encode_to_zarr
    from dask_hashcodes.distributed.graph import drop_rows
    from dask_hashcodes.storage.codes import open_codes

    X = da.from_array(np.random.default_rng(4).integers(0, 256, (5000, 30)).astype(np.uint8), chunks=(1200, 30))
    model = ITQ(24, n_iter=3).fit(X)
    for name, data in (("regular", X), ("irregular", drop_rows(X, np.array([5, 1300, 2401])))):
        encode_to_zarr(tmp_path / name, data, model)
        codes = open_codes(tmp_path / name, model)
        np.testing.assert_array_equal(codes.reader[:], model.encode(data).compute())
        assert codes.attrs["n_bits"] == 24
