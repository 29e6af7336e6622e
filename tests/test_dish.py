"""DisH: kernels against direct computation, topologies, the exact all-reduce variant
against a single-machine numpy run, node pinning (no feature chunk moves), and
communication independent of n."""

import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_hashcodes import InputError
from dask_hashcodes.hashing import DisH
from dask_hashcodes.hashing.dish_topology import build_topology, edges
from dask_hashcodes.kernels import dish as K
from dask_hashcodes.kernels.codes import project_linear
from dask_hashcodes.kernels.gram import centred_sq_norm, gram_chunk, row_sums
from tests.reference import signs


def test_orthonormal_maximiser_beats_random_orthonormal_matrices():
    rng = np.random.default_rng(0)
    S = rng.standard_normal((6, 20))
    C = K.orthonormal_maximiser(S)
    np.testing.assert_allclose(C.T @ C, np.eye(6), atol=1e-12)
    best = np.trace(S @ C)
    for _ in range(200):
        assert np.trace(S @ K.random_orthonormal(20, 6, rng)) <= best + 1e-9


def test_node_objective_equals_direct_reconstruction_error():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((300, 12))
    C = K.random_orthonormal(12, 5, rng)
    gram = gram_chunk(X, np.zeros(12), C)
    n, col_sum, sq_sum = row_sums(X)
    sq = centred_sq_norm(n, col_sum, sq_sum, np.zeros(12))
    B = signs(project_linear(X, np.zeros(12), C))  # the encoder's float32 projection
    np.testing.assert_allclose(gram, B.T @ X)
    assert K.node_objective(sq, gram, C, n) == pytest.approx(((X - B @ C.T) ** 2).sum(), rel=1e-12)


@pytest.mark.parametrize(
    "dtype,n,d,r",
    [(np.uint8, 9000, 128, 32), (np.uint8, 70000, 3, 8), (np.uint16, 70000, 5, 13), (np.float32, 5000, 20, 64)],
)
def test_byte_grouped_gram_equals_second_gemm(dtype, n, d, r):
    """The byte-grouped B^T (X - mean) equals the plain GEMM, for uint8 (SIFT), for uint16
    (int32 accumulators restarted across 4096-row slabs) and for float data, at code
    lengths that are and are not whole bytes."""
    rng = np.random.default_rng(3)
    X = (rng.integers(0, np.iinfo(dtype).max, (n, d)) if dtype != np.float32 else rng.standard_normal((n, d))).astype(
        dtype
    )
    mean = X.mean(axis=0, dtype=np.float64)
    C = K.random_orthonormal(d, r, rng)
    B = signs(project_linear(X, mean, C)).astype(np.float64)
    np.testing.assert_allclose(gram_chunk(X, mean, C), B.T @ (X.astype(np.float64) - mean), rtol=1e-9, atol=1e-9)


def test_topologies():
    assert build_topology("ring", 4) == [[1, 3], [0, 2], [1, 3], [0, 2]]
    assert build_topology("star", 4)[0] == [1, 2, 3]
    assert len(edges(build_topology("complete", 5))) == 10
    random10 = build_topology("random", 10, seed=0)
    assert random10 == build_topology("random", 10, seed=0) and len(edges(random10)) >= 9
    assert build_topology([[0, 1], [1, 2]], 3) == [[1], [0, 2], [1]]
    with pytest.raises(InputError, match="disconnected"):
        build_topology([[0, 1], [2, 3]], 4)
    with pytest.raises(InputError, match="unknown topology"):
        build_topology("mesh", 4)


def _allreduce_reference(X, n_bits, n_iter, seed):
    """Single-machine numpy run of the centralised iterations (the same init)."""
    rng = np.random.default_rng(seed)
    Xc = X - X.mean(axis=0)
    C = K.random_orthonormal(X.shape[1], n_bits, rng)
    for _ in range(n_iter):
        C = K.orthonormal_maximiser(signs(Xc @ C).T @ Xc)
    return C


def test_allreduce_matches_single_machine_numpy_run(client):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((5000, 30)) @ rng.standard_normal((30, 30))
    want = _allreduce_reference(X, 8, 12, seed=5)
    model = DisH(8, consensus="allreduce", max_iter=12, tol=0, random_state=5).fit(da.from_array(X, chunks=(700, 30)))
    assert model.training_stats_["iterations"] == 12
    np.testing.assert_allclose(model.components_, want, atol=1e-6)


def _admm_reference(X, y, n_bits, outer, inner, nodes, topology, partition, seed, rho_scale):
    """Algorithm 1 of the DisH paper in one process: the nodes are plain arrays of rows, the
    same topology, partition and initial dictionary as the distributed run; everything else
    (centring, rho, eq. 13, the SVD solution 18, the multiplier step, the codes) written out
    here from the paper's equations."""
    from dask_hashcodes.hashing.dish_nodes import partition_rows

    neighbours = build_topology(topology, nodes, seed=seed)
    rows = partition_rows(X, nodes, partition, seed, y)
    Xc = X - X.mean(axis=0)
    Xs = [Xc[r] for r in rows]
    n = len(X)
    rho = rho_scale * (n / nodes) * np.sqrt((Xc**2).sum() / n)
    C = [K.random_orthonormal(X.shape[1], n_bits, np.random.default_rng(seed))] * nodes
    Lam = [np.zeros_like(C[0])] * nodes
    objectives = []
    for _ in range(outer):
        B = [np.where(Xi @ Ci > 0, 1.0, -1.0) for Xi, Ci in zip(Xs, C)]  # B_i = sgn(C_i^T X_i)
        objectives.append(sum(((Xi - Bi @ Ci.T) ** 2).sum() for Xi, Bi, Ci in zip(Xs, B, C)))
        for _ in range(inner):
            new = []
            for i in range(nodes):
                S = 2 * B[i].T @ Xs[i] - Lam[i].T + rho * sum((C[i] + C[j]).T for j in neighbours[i])
                G, _, Ht = np.linalg.svd(S, full_matrices=False)
                new.append(Ht.T @ G.T)  # eq. 18: C_i = H_i G_i^T
            Lam = [Lam[i] + rho * sum(new[i] - new[j] for j in neighbours[i]) for i in range(nodes)]
            C = new
    return np.stack(C), objectives


@pytest.mark.parametrize("partition", ["random", "by-label"])
def test_admm_equals_single_process_algorithm_1(client, partition):
    rng = np.random.default_rng(3)
    y = rng.integers(0, 6, 6000)
    X = rng.standard_normal((6000, 24)) @ rng.standard_normal((24, 24)) + 3 * np.eye(24)[y]
    params = {"nodes": 6, "topology": "random", "partition": partition, "rho_scale": 0.3}
    want, objectives = _admm_reference(X, y, 8, 5, 5, seed=4, **params)
    model = DisH(8, **params, inner_steps=5, max_iter=5, tol=0, consensus_tol=0, random_state=4)
    model.fit(da.from_array(X, chunks=(1100, 24)), y)
    assert model.training_stats_["iterations"] == 5
    np.testing.assert_allclose(model.dictionaries_, want, atol=1e-6)
    np.testing.assert_allclose(model.training_stats_["objective"], objectives, rtol=1e-9)


@pytest.fixture(scope="module")
def sift_dataset(tmp_path_factory):
    from dask_hashcodes.data.synth import write_sift_synth

    return write_sift_synth(tmp_path_factory.mktemp("dish") / "sift.zarr", 80_000, seed=1, chunk_rows=8192)


def test_training_moves_no_feature_chunk_between_workers(sift_dataset):
    """4 worker processes, 4 nodes: every node reads, keeps and processes its rows on its own
    worker. Dictionaries travel between neighbours (the positive control)."""
    with (
        LocalCluster(
            n_workers=4, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        ) as cluster,
        Client(cluster) as client,
    ):
        model = DisH(16, nodes=4, topology="ring", max_iter=3, random_state=0).fit(sift_dataset.features_dask())
        assert model.training_stats_["pinned"] and len(set(model.training_stats_["placement"])) == 4
        logs = client.run(lambda dask_worker: [str(k) for e in dask_worker.transfer_incoming_log for k in e["keys"]])
    moved = [k for keys in logs.values() for k in keys]
    feature_keys = [k for k in moved if any(part in k for part in ("features-", "take-rows", "dish-gram", "node-rows"))]
    assert feature_keys == []
    assert any("dish-admm" in k for k in moved)  # dictionaries do move between neighbours


def test_objective_decreases_and_communication_is_independent_of_n(client, sift_dataset):
    X = sift_dataset.features_dask()
    small = DisH(16, nodes=4, topology="random", max_iter=6, tol=0, random_state=0).fit(X[:40_000])
    large = DisH(16, nodes=4, topology="random", max_iter=6, tol=0, random_state=0).fit(X)
    for model in (small, large):
        obj = model.training_stats_["objective"]
        assert all(b <= a * (1 + 1e-12) for a, b in zip(obj, obj[1:])), obj
    assert small.training_stats_["bytes_exchanged_per_node"] == large.training_stats_["bytes_exchanged_per_node"]
    per_node = large.training_stats_["bytes_exchanged_per_node"][0]
    neighbours = build_topology("random", 4, seed=0)
    assert per_node == [5 * len(neighbours[i]) * 128 * 16 * 8 for i in range(4)]


def test_same_dictionaries_whatever_chunking(client, sift_dataset):
    X = sift_dataset.features_dask()
    a = DisH(16, nodes=3, max_iter=3, random_state=0).fit(X)
    b = DisH(16, nodes=3, max_iter=3, random_state=0).fit(X.rechunk((20000, 128)))
    np.testing.assert_allclose(a.dictionaries_, b.dictionaries_, atol=1e-9)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"consensus": "gossip"}, "consensus"),
        ({"nodes": 0}, "nodes"),
        ({"rho": -1.0}, "rho"),
        ({"partition": "by-label"}, "needs labels"),
        ({"partition": "hash"}, "partition"),
        ({"init": "kmeans"}, "init"),
        ({"topology": [[0, 1]]}, "disconnected"),
    ],
)
def test_bad_parameters(params, match):
    X = np.random.default_rng(0).standard_normal((400, 10))
    with pytest.raises(InputError, match=match):
        DisH(4, **{"nodes": 3, **params}).fit(X)


@pytest.mark.parametrize("partition", ["contiguous", "random", "by-label"])
def test_node_rows_travel_as_runs_and_select_the_same_rows(partition):
    """Node pieces and DisH1 groups carry a node's rows as [start, stop) runs (not 8 bytes a
    row in every task), and select exactly the rows the partition gives."""
    import pickle

    from dask_hashcodes.distributed.graph import InlineRead, take_rows
    from dask_hashcodes.hashing.dish_nodes import node_groups, node_pieces, partition_rows

    n = 300_007
    X = da.arange(n, chunks=70_001).reshape(n, 1)
    y = np.random.default_rng(1).integers(0, 10, n) if partition == "by-label" else None
    node_rows = partition_rows(X, 4, partition, 2, y)
    groups = node_groups(node_rows, X.chunks[0])
    want = np.empty(n, np.int64)
    for node, rows in enumerate(node_rows):
        want[rows] = node
    np.testing.assert_array_equal(groups.compute(), want)
    block = np.arange(n)
    for node, pieces in enumerate(node_pieces(X, node_rows)):
        got = np.concatenate([p.compute() if not isinstance(p, InlineRead) else p.load() for p in pieces])
        np.testing.assert_array_equal(got.ravel(), node_rows[node])
    if partition != "by-label":
        assert len(pickle.dumps(dict(groups.dask))) < 10_000
    assert take_rows(block, None) is block


@pytest.mark.parametrize("n, nodes", [(69_000, 10), (10, 10), (1_000_003, 3)])
def test_random_partition_spreads_any_n_over_the_nodes(n, nodes):
    """Random blocks shrink for small data (never below 8 per node): every row on exactly one
    node, node sizes within two blocks of each other, the same rows whatever the chunking."""
    from dask_hashcodes.hashing.dish_nodes import partition_rows, random_block_rows

    X = da.zeros((n, 2), chunks=(max(1, n // 3), 2))
    node_rows = partition_rows(X, nodes, "random", 5)
    np.testing.assert_array_equal(np.sort(np.concatenate(node_rows)), np.arange(n))
    sizes = [len(r) for r in node_rows]
    assert max(sizes) - min(sizes) <= 2 * random_block_rows(n, nodes) and min(sizes) > 0  # + the short last block
    rechunked = partition_rows(X.rechunk(max(1, n // 7)), nodes, "random", 5)
    assert all(np.array_equal(a, b) for a, b in zip(node_rows, rechunked))
    assert partition_rows(X, nodes, "random", 6)[0].tolist() != node_rows[0].tolist()
