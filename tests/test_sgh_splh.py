"""SGH, S3PLH, USPLH and label-adjusted PCAH: kernels against brute-force n x n references,
invariance to chunking and cluster shape, bounded memory, bad parameters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing import SGH, SPLH, USPLH, make_hasher, method_params
from dask_hashcodes.kernels import sgh as sgh_k
from dask_hashcodes.kernels import splh as splh_k
from dask_hashcodes.kernels.label_similarity import pair_labels

# ---------------------------------------------------------------- SGH references -----


def _explicit_P_Q(Xc, rho):
    """P(X), Q(X) of the paper, eq. (3), row per point."""
    norms = (Xc**2).sum(1)
    damp = np.exp(-norms / rho)
    a = math.sqrt(2 * (math.e**2 - 1) / (math.e * rho))
    b = math.sqrt((math.e**2 + 1) / math.e)
    head = np.hstack([a * damp[:, None] * Xc, b * damp[:, None]])
    ones = np.ones((len(Xc), 1))
    return np.hstack([head, ones]), np.hstack([head, -ones])


def _sgh_dense_reference(X, n_bits, bases, bandwidth, rho, gamma, order):
    """Algorithm 1 with the explicit n x n residual R_t = c S~ - sum sgn sgn^T (small n only)."""
    Xc = X - X.mean(0)
    d2 = ((X[:, None, :].astype(np.float64) - bases[None].astype(np.float64)) ** 2).sum(-1)
    phi = np.exp(-d2 / (2 * bandwidth**2)).astype(np.float32).astype(np.float64)  # stored as float32
    K = phi - phi.mean(0)
    P, Q = _explicit_P_Q(Xc, rho)
    S_tilde = P @ Q.T
    R = n_bits * S_tilde
    Z = K.T @ K + gamma * np.eye(K.shape[1])
    W = np.zeros((K.shape[1], n_bits))
    for t in range(n_bits):
        W[:, t] = sgh_k.top_generalized_eigenvector(K.T @ R @ K, Z)
        b = np.where(K @ W[:, t] >= 0, 1.0, -1.0)
        R = R - np.outer(b, b)
    for t in order:
        b_old = np.where(K @ W[:, t] >= 0, 1.0, -1.0)
        R = R + np.outer(b_old, b_old)
        W[:, t] = sgh_k.top_generalized_eigenvector(K.T @ R @ K, Z)
        b = np.where(K @ W[:, t] >= 0, 1.0, -1.0)
        R = R - np.outer(b, b)
    return W, S_tilde


def test_feature_transformation_is_the_papers_chord_approximation():
    """P(x_i)^T Q(x_j) = 2 chord(2 x_i.x_j / rho) e^{-(|x_i|^2 + |x_j|^2) / rho} - 1, where
    chord is the line through e^x at x = -1 and 1 (paper Fig. 1); rho = 2 max ||x||^2 keeps
    2 x_i.x_j / rho in [-1, 1], where the chord exceeds e^x by at most 0.558, so
    |P^T Q - S~| <= 1.116 e^{-(|x_i|^2 + |x_j|^2) / rho}."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 12))
    Xc = X - X.mean(0)
    sq = (Xc**2).sum(1)
    rho = 2 * sq.max()
    P, Q = _explicit_P_Q(Xc, rho)
    inner = 2 * Xc @ Xc.T / rho
    assert np.abs(inner).max() <= 1 + 1e-12
    damp = np.exp(-(sq[:, None] + sq[None, :]) / rho)
    chord = (math.e**2 - 1) / (2 * math.e) * inner + (math.e**2 + 1) / (2 * math.e)
    np.testing.assert_allclose(P @ Q.T, 2 * chord * damp - 1, atol=1e-12)
    exact = 2 * np.exp(-((Xc[:, None] - Xc[None]) ** 2).sum(-1) / rho) - 1
    assert (np.abs(P @ Q.T - exact) <= 2 * 0.5577 * damp + 1e-12).all()
    np.testing.assert_allclose(sgh_k.transformed_head(Xc, rho), P[:, :-1], rtol=1e-12)


def test_sgh_fit_equals_dense_algorithm_1_with_explicit_similarity_matrix(client, tmp_path):
    """The distributed fit (3 chunks) learns the same W as Algorithm 1 run with the n x n
    matrices written out: A_1 = c K^T S~ K, R_t updated with sgn(K w) sgn(K w)^T."""
    import dask.array as da

    rng = np.random.default_rng(3)
    X = rng.standard_normal((600, 10)) + rng.integers(0, 3, (600, 1))
    model = SGH(8, n_bases=40, kernel_cache="memory", random_state=5).fit(da.from_array(X, chunks=(250, 10)))
    W, _ = _sgh_dense_reference(
        X, 8, model.bases_.astype(np.float64), model.bandwidth_, model.rho_, 1e-6, model.training_stats_["refine_order"]
    )
    assert model.training_stats_["passes"] == 3 + 8 + 8
    np.testing.assert_allclose(model.components_, W, rtol=1e-6, atol=1e-8)
    Xc = X - X.mean(0)
    assert model.rho_ == pytest.approx(0.5 * 2 * (Xc**2).sum(1).max())  # default rho_scale 0.5
    # bandwidth = bandwidth_scale (default 0.5) x RMS distance between training points and bases
    d2 = ((X[:, None] - model.bases_[None]) ** 2).sum(-1)
    assert model.bandwidth_ == pytest.approx(0.5 * math.sqrt(d2.mean()))
    codes = model.encode(X)
    ref = np.packbits(
        (np.exp(-d2 / (2 * model.bandwidth_**2)) - model.kernel_mean_) @ W >= 0, axis=1, bitorder="little"
    )
    np.testing.assert_array_equal(codes, ref)
    from dask_hashcodes.hashing import load_model

    loaded = load_model(model.save(tmp_path / "sgh"))
    np.testing.assert_array_equal(loaded.encode(X), codes)
    # recomputing the kernel features in every pass gives the same model
    again = SGH(8, n_bases=40, kernel_cache="recompute", random_state=5).fit(da.from_array(X, chunks=(250, 10)))
    np.testing.assert_allclose(again.components_, model.components_, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- SPLH references ----


def test_splh_kernels_equal_their_definitions():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((300, 6))
    w = rng.standard_normal(6)
    w /= np.linalg.norm(w)
    # deflation = covariance of the residual X - X w w^T
    C = X.T @ X / len(X)
    R = X - np.outer(X @ w, w)
    np.testing.assert_allclose(splh_k.deflate(C, w), R.T @ R / len(X), atol=1e-12)
    # pair labels and the truncated update, entry by entry
    labels = rng.integers(0, 3, 40)
    S = pair_labels(labels)
    p = rng.standard_normal(40)
    new = splh_k.truncated_label_update(S, p, 0.5)
    for i in range(40):
        for j in range(40):
            expected = 1.0 if labels[i] == labels[j] else -1.0  # the diagonal too
            assert S[i, j] == expected
            if S[i, j] * p[i] * p[j] < 0:
                expected -= 0.5 * p[i] * p[j]
            assert new[i, j] == pytest.approx(expected)
    multi = np.array([[1, 0, 1], [0, 1, 1], [1, 0, 0], [0, 1, 0]], dtype=np.uint8)
    np.testing.assert_array_equal(pair_labels(multi), [[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, -1], [-1, 1, -1, 1]])
    # each bit's direction: the top eigenvector of the full decomposition, with its sign
    # fixed, from the partial solver (an indefinite matrix, as C + eta s L can be)
    A = rng.standard_normal((50, 50))
    M = (A + A.T) / 2.0
    values, vectors = np.linalg.eigh(M)
    top = vectors[:, -1] * np.sign(vectors[np.abs(vectors[:, -1]).argmax(), -1])
    direction = splh_k.top_direction(M)
    np.testing.assert_allclose(direction, top, atol=1e-12)
    assert direction[np.abs(direction).argmax()] > 0 and M @ direction == pytest.approx(values[-1] * direction)


def test_pseudo_label_term_equals_explicit_pair_matrix():
    """L from region means == X_MC^T S_MC X_MC with S_MC written out pair by pair."""
    rng = np.random.default_rng(2)
    regions = [rng.standard_normal((n, 5)) + 3 for n in (4, 6, 3, 5)]
    mean = rng.standard_normal(5)
    X = np.vstack(regions) - mean
    sizes = [len(r) for r in regions]
    block = np.repeat(np.arange(4), sizes)
    S = np.zeros((len(X), len(X)))
    must = sizes[0] * sizes[1]
    cannot = sizes[0] * sizes[2] + sizes[1] * sizes[3]
    for i in range(len(X)):
        for j in range(len(X)):
            pair = {block[i], block[j]}
            if pair == {0, 1}:
                S[i, j] = 1 / must
            elif pair in ({0, 2}, {1, 3}):
                S[i, j] = -1 / cannot
    # the explicit form weighs cannot-link pairs by 1/(total cannot pairs); ours by block,
    # which is the same when both blocks have equal size -> compare with equal sizes too
    equal = [rng.standard_normal((4, 5)) for _ in range(4)]
    Xe = np.vstack(equal) - mean
    Se = np.zeros((16, 16))
    be = np.repeat(np.arange(4), 4)
    for i in range(16):
        for j in range(16):
            pair = {be[i], be[j]}
            Se[i, j] = 1 / 16 if pair == {0, 1} else (-1 / 32 if pair in ({0, 2}, {1, 3}) else 0)
    np.testing.assert_allclose(splh_k.pseudo_label_term(equal, mean), Xe.T @ Se @ Xe, atol=1e-12)
    # and block-wise weighting for unequal sizes: each cannot block weighs 1/2 of the cannot term
    Sb = np.zeros_like(S)
    for i in range(len(X)):
        for j in range(len(X)):
            pair = {block[i], block[j]}
            if pair == {0, 1}:
                Sb[i, j] = 1 / must
            elif pair == {0, 2}:
                Sb[i, j] = -0.5 / (sizes[0] * sizes[2])
            elif pair == {1, 3}:
                Sb[i, j] = -0.5 / (sizes[1] * sizes[3])
    np.testing.assert_allclose(splh_k.pseudo_label_term(regions, mean), X.T @ Sb @ X, atol=1e-12)


def test_boundary_regions_merge_equals_a_full_sort():
    rng = np.random.default_rng(4)
    X = rng.integers(0, 4, (500, 3)).astype(np.uint8)  # many equal projections: ties by id
    ids = np.arange(500)
    mean, w = X.mean(0), np.array([1.0, -0.5, 0.25])
    parts = [splh_k.boundary_regions(X[s : s + 130], ids[s : s + 130], mean, w, 20) for s in range(0, 500, 130)]
    merged = parts[0]
    for part in parts[1:]:
        merged = splh_k.merge_regions(merged, part, 20)
    p = (X - mean) @ w
    neg, pos = np.flatnonzero(p < 0), np.flatnonzero(p >= 0)
    expected = [
        neg[np.lexsort((neg, -p[neg]))][:20],
        pos[np.lexsort((pos, p[pos]))][:20],
        neg[np.lexsort((neg, p[neg]))][:20],
        pos[np.lexsort((pos, -p[pos]))][:20],
    ]
    for (_, got_ids, rows), want in zip(merged, expected):
        np.testing.assert_array_equal(got_ids, want)
        np.testing.assert_array_equal(rows, X[want])


def test_splh_fit_equals_sequential_numpy_run(client, tmp_path):
    import dask.array as da

    rng = np.random.default_rng(6)
    X = rng.standard_normal((900, 8)) * np.arange(1, 9)
    y = rng.integers(0, 4, 900)
    X[:, 0] += 2 * y
    model = SPLH(6, n_labeled=120, eta=0.7, random_state=2).fit(da.from_array(X, chunks=(400, 8)), y)
    rows = np.sort(np.random.default_rng(2).choice(900, 120, replace=False))
    mean = X.mean(0)
    Xc = X - mean
    C = Xc.T @ Xc / 900
    Xl = Xc[rows]
    S = pair_labels(y[rows])
    alpha = 1 / (Xl**2).sum(1).max()
    # eta is relative: the label term is scaled to the covariance's top eigenvalue at bit 1
    scale = np.linalg.eigvalsh(C)[-1] / np.abs(np.linalg.eigvalsh(Xl.T @ S @ Xl)).max()
    assert model.training_stats_["label_scale"] == pytest.approx(scale, rel=1e-9)
    for k in range(6):
        w = splh_k.top_direction(C + 0.7 * scale * Xl.T @ S @ Xl)
        np.testing.assert_allclose(model.components_[:, k], w, atol=1e-9)
        S = splh_k.truncated_label_update(S, Xl @ w, alpha)
        R = Xc - np.outer(Xc @ w, w)  # the paper's residual X - w w^T X
        C = R.T @ R / 900
        Xc = R
    from dask_hashcodes.hashing import load_model

    np.testing.assert_array_equal(load_model(model.save(tmp_path / "splh")).encode(X), model.encode(X))
    adjusted = make_hasher("pcah-adjusted", 4, random_state=2, eta=0.7, n_labeled=120).fit(
        da.from_array(X, chunks=(400, 8)), y
    )
    M = X.T @ X / 900 - np.outer(mean, mean) + 0.7 * scale * Xl.T @ pair_labels(y[rows]) @ Xl
    top = np.linalg.eigh(M)[1]
    np.testing.assert_allclose(np.abs(adjusted.components_), np.abs(top[:, ::-1][:, :4]), atol=1e-8)


# ---------------------------------------------------------------- invariance ---------


@pytest.fixture(scope="module")
def small_sift(tmp_path_factory):
    """4 stored chunks (1024 rows, the last 928): the invariance tests compare it with 6
    chunks of 750 rows, whose boundaries fall elsewhere. Every method's sums then combine
    several partial results either way; more rows would add cost, not chunks."""
    from dask_hashcodes.data.synth import write_sift_synth

    path = tmp_path_factory.mktemp("sgh") / "sift.zarr"
    return write_sift_synth(path, 4000, seed=2, chunk_rows=1024)


# Small settings of the methods whose work does not depend on the chunking: BRE's optimisation
# runs on the client on its gathered sample, and KMH's iterations repeat the same distributed
# sums (each one sees every chunk).
INVARIANCE_PARAMS = {
    "n_bases": 100,
    "n_labeled": 300,
    "region_size": 300,
    "bre": {"train_size": 300},
    "kmh": {"n_iter": 10},
}


def _fit_codes(ds, method, chunk_rows, y=None):
    X = ds.features_dask()
    if chunk_rows:
        X = X.rechunk((chunk_rows, X.shape[1]))
    model = make_hasher(method, 16, random_state=0, **method_params(method, INVARIANCE_PARAMS))
    model.fit(X, y) if y is not None else model.fit(X)
    return np.asarray(model.encode(X).compute())


@pytest.mark.parametrize(
    "method", ["sgh", "usplh", "splh", "sh", "sikh", "isohash", "klsh", "bre", "agh", "agh2", "dgh", "kmh"]
)
def test_same_codes_for_1_and_2_workers_and_two_chunkings(small_sift, cluster, one_worker_cluster, method):
    from distributed import Client

    y = (np.arange(small_sift.n) * 7919 % 10) if method == "splh" else None  # synthetic labels
    with Client(cluster):
        reference = _fit_codes(small_sift, method, None, y)
        other_chunks = _fit_codes(small_sift, method, 750, y)
    with Client(one_worker_cluster):
        one_worker = _fit_codes(small_sift, method, None, y)
    np.testing.assert_array_equal(other_chunks, reference)
    np.testing.assert_array_equal(one_worker, reference)


# ---------------------------------------------------------------- memory -------------


def _worker_peak_rss_mb():
    """Peak RSS of this process's own address space (VmHWM). Not getrusage's ru_maxrss: on
    Linux that survives fork and exec, so a worker forked from a big parent reports the
    parent's peak."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


@pytest.mark.slow
def test_200k_point_fits_never_build_an_n_by_n_array(tmp_path):
    """SGH (kernel features recomputed per pass) and USPLH on 200k points: an n x n float
    matrix would be 320 GB; every worker process stays under 1 GB (chunk-sized work only).
    SGH with 100 bases: the kernel features are chunk x bases whatever their number, and
    recomputing them is most of this test's work."""
    from distributed import Client, LocalCluster

    from dask_hashcodes.data.synth import write_sift_synth

    ds = write_sift_synth(tmp_path / "sift.zarr", 200_000, seed=3, chunk_rows=32768)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40) as cl,
        Client(cl) as client,
    ):
        X = ds.features_dask()
        SGH(4, n_bases=100, kernel_cache="recompute", refine=False).fit(X)
        USPLH(4).fit(X)
        peaks = client.run(_worker_peak_rss_mb)
    assert max(peaks.values()) < 1024, peaks


# ---------------------------------------------------------------- bad input ----------


@pytest.mark.parametrize(
    "model, match",
    [
        (SGH(4, n_bases=0), "n_bases"),
        (SGH(4, n_bases=10_000), "n_bases"),
        (SGH(4, bandwidth_scale=-1), "bandwidth_scale"),
        (SGH(4, rho=0.0), "rho"),
        (SGH(4, kernel_cache="disk"), "kernel_cache"),
        (USPLH(4, region_size=0), "region_size"),
        (USPLH(4, region_size=50, decay=1.5), "decay"),
        (USPLH(4, region_size=50, eta=-1), "eta"),
        (SPLH(4, n_labeled=1), "n_labeled"),
        (SPLH(4, eta=0), "eta"),
    ],
)
def test_bad_parameters(model, match):
    X = np.random.default_rng(0).standard_normal((400, 10))
    with pytest.raises(InputError, match=match):
        model.fit(X, np.zeros(400, int)) if isinstance(model, SPLH) else model.fit(X)


def test_splh_without_labels_names_the_fix():
    X = np.random.default_rng(0).standard_normal((400, 10))
    with pytest.raises(InputError, match="requires y to be passed.*usplh"):
        SPLH(4).fit(X)
    with pytest.raises(InputError, match="400 training rows"):
        SPLH(4).fit(X, np.zeros(300, int))
    with pytest.raises(InputError, match="n_bits"):
        make_hasher("pcah-adjusted", 20).fit(X, np.zeros(400, int))
