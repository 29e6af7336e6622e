"""The inverted file's kernels (kernels/ivf.py) against brute force over the probed lists."""

import re

import numpy as np
import pytest

from dask_hashcodes.kernels import ivf as ivf_kernels
from dask_hashcodes.kernels.codes import pack_signs
from dask_hashcodes.kernels.hamming import hamming_distances, hamming_topk
from dask_hashcodes.kernels.ivf import (
    list_layout,
    probed_lists,
    search_lists,
    search_lists_exact,
)
from dask_hashcodes.kernels.knn import cell_partition


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


@pytest.mark.parametrize("schedule", [None, "by-query", "by-list"])
@pytest.mark.parametrize("nprobe, k, bits", [(1, 25, 64), (3, 25, 64), (7, 25, 64), (1, 500, 64), (3, 40, 24)])
def test_ivf_search_equals_brute_force_over_the_probed_lists(nprobe, k, bits, schedule):
    """Ties at the cut-off distance go to the smaller ids (24-bit codes tie often); a query
    whose lists hold fewer than k rows gets them all, then -1; both schedules, and the one
    the batch's shape picks."""
    codes, assignment, centroids, order, offsets, queries, query_codes = _problem(bits=bits)
    probes = probed_lists(queries, centroids, nprobe)
    dist, ids = search_lists(query_codes, probes, codes[order], order, offsets, k=k, schedule=schedule)
    for q in range(len(queries)):
        rows = np.flatnonzero(np.isin(assignment, probes[q]))
        want_d, want_i = _brute_force(query_codes[q], codes, rows, k)
        np.testing.assert_array_equal(ids[q, : len(want_i)], want_i)
        np.testing.assert_array_equal(dist[q, : len(want_d)], want_d)
        assert (ids[q, len(want_i) :] == -1).all()


@pytest.mark.parametrize("nprobe, k, bits", [(1, 25, 64), (3, 25, 64), (7, 10, 128), (1, 500, 64), (4, 40, 24)])
def test_the_batch_schedule_gives_the_per_query_scans_answer(nprobe, k, bits):
    """Grouping queries by list (each list read once per batch) answers exactly as the
    per-query scan, which equals brute force over the probed lists (above): ties by id
    (24-bit codes tie often), -1 beyond the rows there are; the ids may be any numbers."""
    codes, assignment, centroids, order, offsets, queries, query_codes = _problem(bits=bits)
    probes = probed_lists(queries, centroids, nprobe)
    ids = (order * 7 + 3).astype(np.int32)  # not positions: ids in list order
    want = search_lists(query_codes, probes, codes[order], ids, offsets, k=k, schedule="by-query")
    got = search_lists(query_codes, probes, codes[order], ids, offsets, k=k, schedule="by-list")
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    # repeated queries and a list nobody probes change nothing
    twice = search_lists(np.concatenate([query_codes, query_codes]), np.concatenate([probes, probes]),
                         codes[order], ids, offsets, k=k, schedule="by-list")  # fmt: skip
    np.testing.assert_array_equal(twice[1][: len(queries)], want[1])
    np.testing.assert_array_equal(twice[1][len(queries) :], want[1])


@pytest.mark.parametrize("nprobe, candidates, k, bits", [(2, 60, 10, 64), (5, 200, 50, 128), (1, 400, 300, 24)])
def test_exact_reranking_equals_brute_force_over_the_probed_lists(nprobe, candidates, k, bits, tmp_path):
    """The fused serving path: the Hamming top-R of the probed lists (ties by id), re-ranked
    by exact squared L2 (ties by id: the vectors are small integers with repeated rows),
    inf / -1 beyond the rows there are. The vectors are read memory-mapped through
    ``list_rows`` (positions), while the ids are offset: the two must not be confused."""
    codes, assignment, centroids, order, offsets, queries, query_codes = _problem(bits=bits)
    rng = np.random.default_rng(1)
    vectors = rng.integers(0, 4, (len(codes), 8)).astype(np.uint8)
    vectors[1::7] = vectors[::7][: len(vectors[1::7])]  # exact ties in the re-ranked distances
    np.save(tmp_path / "v.npy", vectors)
    mapped = np.load(tmp_path / "v.npy", mmap_mode="r")
    query_vectors = rng.integers(0, 4, (len(queries), 8)).astype(np.float64)
    probes = probed_lists(queries, centroids, nprobe)
    base = 10_000
    dist, ids = search_lists_exact(
        query_codes, query_vectors, probes, codes[order], base + order, offsets, mapped, order, candidates, k
    )
    for q in range(len(queries)):
        rows = np.flatnonzero(np.isin(assignment, probes[q]))
        _, shortlist = _brute_force(query_codes[q], codes, rows, candidates)
        exact = ((vectors[shortlist].astype(np.float64) - query_vectors[q]) ** 2).sum(axis=1)
        ranked = np.lexsort((shortlist, exact))[:k]
        np.testing.assert_array_equal(ids[q, : len(ranked)], base + shortlist[ranked])
        np.testing.assert_array_equal(dist[q, : len(ranked)], exact[ranked])
        assert (ids[q, len(ranked) :] == -1).all() and np.isinf(dist[q, len(ranked) :]).all()
    assert (ids == -1).any() == (k == 300)  # the padding case is exercised
    # vectors in memory give the same answer, through the same compiled kernel: both are
    # passed to it read-only (a view: the caller's array stays writeable)
    in_memory = search_lists_exact(
        query_codes, query_vectors, probes, codes[order], base + order, offsets, vectors, order, candidates, k
    )
    np.testing.assert_array_equal(in_memory[0], dist)
    np.testing.assert_array_equal(in_memory[1], ids)
    assert not any(signature[6].mutable for signature in ivf_kernels._probed_exact_topk.signatures)
    assert vectors.flags.writeable


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


def test_probes_are_the_nearest_centroids_for_any_batch_size():
    """A batch larger than one slab of queries (PROBE_QUERY_ROWS) gets each query's nearest
    centroids in float64's order (integer-valued data: float32 scores them exactly), with
    their squared distances, and the same probes as each query alone."""
    from dask_hashcodes.kernels.ivf import PROBE_QUERY_ROWS, probe_distances

    rng = np.random.default_rng(4)
    centroids = rng.integers(0, 40, (300, 12)).astype(np.uint8)
    queries = rng.integers(0, 40, (PROBE_QUERY_ROWS + 300, 12)).astype(np.float64)
    probes, squared = probe_distances(queries, centroids, 5)
    exact = ((queries[:, None, :] - centroids[None].astype(np.float64)) ** 2).sum(-1)
    order = np.lexsort((np.broadcast_to(np.arange(300), exact.shape), exact), axis=1)[:, :5]
    np.testing.assert_array_equal(probes, order)
    np.testing.assert_array_equal(squared, np.take_along_axis(exact, order, axis=1).astype(np.float32))
    for q in (0, PROBE_QUERY_ROWS - 1, PROBE_QUERY_ROWS, len(queries) - 1):
        np.testing.assert_array_equal(probe_distances(queries[q : q + 1], centroids, 5)[0][0], probes[q])


def test_nprobe_out_of_range_and_bad_list_numbers_are_errors():
    centroids = np.zeros((4, 2))
    for nprobe in (0, 5):
        with pytest.raises(ValueError, match=r"nprobe must lie in \[1, 4\]"):
            probed_lists(np.zeros((1, 2)), centroids, nprobe)
    with pytest.raises(ValueError, match=r"list numbers must lie in \[0, 4\)"):
        list_layout(np.array([0, 4]), 4)
    with pytest.raises(ValueError, match="schedule must be one of"):
        search_lists(np.zeros((1, 8), np.uint8), np.zeros((1, 1)), np.zeros((3, 8), np.uint8), np.arange(3),
                     np.array([0, 3]), 2, schedule="sideways")  # fmt: skip


@pytest.fixture(scope="module")
def stored_ivf(tmp_path_factory):
    """sift-synth rows in 700-row chunks with a split, their ITQ codes and inverted file."""
    import dask

    from dask_hashcodes import workflows
    from dask_hashcodes.indexes.ivf import build_ivf

    d = tmp_path_factory.mktemp("ivf")
    with dask.config.set(scheduler="synchronous"):
        ds = workflows.synth("sift", d / "s.zarr", n=5000, chunk_rows=700)
        split = workflows.split(ds, queries=60)
        model = workflows.train(ds, "itq", d / "m", bits=64, split="default")
        workflows.encode(ds, model, d / "c.zarr")
        build_ivf(d / "c.zarr", ds.features_dask(), d / "i.zarr", n_lists=30)
        # the same lists' quantiser in 16 principal directions of the k-means sample
        build_ivf(d / "c.zarr", ds.features_dask(), d / "i16.zarr", n_lists=30, quantiser_dims=16)
        # lists learned from the codes alone (k-means of the codes made binary), no feature read
        build_ivf(d / "c.zarr", None, d / "ic.zarr", n_lists=30, quantiser="codes")
    return d, ds, split


def _opened(root, ds, index="i.zarr"):
    """(codes handle, stored lists, every code, the features in float64) of the index at root."""
    from dask_hashcodes.storage.codes import open_codes
    from dask_hashcodes.storage.ivf_index import open_ivf

    codes = open_codes(root / "c.zarr")
    return (
        codes,
        open_ivf(root / index, codes),
        codes.reader[...],
        np.asarray(ds.features_dask().compute(), np.float64),
    )


@pytest.mark.parametrize(
    "workers, rows_per_task, index",
    [(1, None, "i.zarr"), (2, 700, "i.zarr"), (2, 2100, "i.zarr"), (2, 700, "i16.zarr")],
)
def test_stored_ivf_search_equals_brute_force_over_the_probed_lists(
    stored_ivf, clusters, workers, rows_per_task, index
):
    """One task per codes chunk (700 rows), per 3 chunks (the last run holds 2 chunks, one of
    them partial) or per every chunk: the same answer; and through a quantiser in a subspace
    (rows and queries projected before they meet the centroids)."""
    import dask
    from distributed import Client

    from dask_hashcodes.indexes.ivf import ivf_knn_lazy

    d, ds, split = stored_ivf
    _, lists, all_codes, features = _opened(d, ds, index)
    assert (lists.projection is None) == (index == "i.zarr")
    queries = split.query
    with Client(clusters[workers]):
        dist, ids = dask.compute(
            ivf_knn_lazy(
                all_codes[queries],
                features[queries],
                lists,
                20,
                4,
                excluded_rows=queries,
                **({} if rows_per_task is None else {"rows_per_task": rows_per_task}),
            )  # fmt: skip
        )[0]
    _assert_probed_brute_force(features, all_codes, lists.centroids, queries, dist, ids, projection=lists.projection)


def test_a_cold_batch_finds_its_probes_in_one_task_that_every_search_task_reads(stored_ivf):
    """The probes are a task of the graph (run on a worker, where the compiled kernels are
    loaded already), not computed by the caller: one ivf-probes task, a dependency of every
    ivf-topk task."""
    from dask_hashcodes.indexes.ivf import ivf_knn_lazy

    d, ds, split = stored_ivf
    _, lists, all_codes, features = _opened(d, ds, "i16.zarr")
    lazy = ivf_knn_lazy(all_codes[:5], features[:5], lists, 10, 4, rows_per_task=1400)
    graph = dict(lazy.__dask_graph__())
    probes = [key for key in graph if str(key).startswith("ivf-probes-")]
    searches = [key for key in graph if str(key).startswith("ivf-topk-") and "merge" not in str(key)]
    assert len(probes) == 1 and len(searches) == 4
    dependencies = lazy.__dask_graph__().get_all_dependencies()
    assert all(probes[0] in dependencies[key] for key in searches)


def _assert_probed_brute_force(features, all_codes, centroids, queries, dist, ids, nprobe=4, k=20, projection=None):
    """(dist, ids) are each query's Hamming top-k over the database rows (the queries left
    out) of its nprobe nearest lists (centroids in the space of ``projection``)."""
    if projection is not None:
        features = (features - projection.mean) @ projection.components
    assignment = np.argmin(((features[:, None, :] - centroids[None]) ** 2).sum(-1), axis=1)
    probes = probed_lists(features[queries], centroids, nprobe)
    database = np.setdiff1d(np.arange(len(all_codes)), queries)
    for q in range(len(queries)):
        rows = database[np.isin(assignment[database], probes[q])]
        want_d, want_i = _brute_force(all_codes[queries[q]], all_codes, rows, k)
        np.testing.assert_array_equal(ids[q], want_i)
        np.testing.assert_array_equal(dist[q], want_d)


@pytest.mark.parametrize("workers", [1, 2])
def test_warm_batches_search_the_lists_held_on_the_workers_without_reading_storage(stored_ivf, tmp_path, workers):
    """The first warm batch reads and merges the lists into blocks the workers keep; the next
    answers the same with the codes store gone (nothing is read); once released, the blocks
    are read again, and a store that is gone is then an error, not an empty answer."""
    import shutil

    import dask
    from distributed import Client, LocalCluster

    from dask_hashcodes.errors import InputError
    from dask_hashcodes.indexes.ivf import ivf_knn_lazy, resident_lists

    d, ds, split = stored_ivf
    shutil.copytree(d / "c.zarr", tmp_path / "c.zarr")
    shutil.copytree(d / "i.zarr", tmp_path / "i.zarr")
    codes, lists, all_codes, features = _opened(tmp_path, ds)
    queries = split.query

    def batch(**how):
        return dask.compute(ivf_knn_lazy(all_codes[queries], features[queries], lists, 20, 4, excluded_rows=queries,
                                         rows_per_task=1400, **how))[0]  # fmt: skip

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as lc:
        with Client(lc):
            cold = batch()
            first = batch(warm=True)
            held = resident_lists(lists, queries, 1400)  # the blocks the warm batch registered
            report = held.by_worker()
            assert sum(w["blocks"] for w in report.values()) == len(held.futures) == 4  # 5000 rows, 1400 per block
            assert sum(w["bytes"] for w in report.values()) >= (len(all_codes) - len(queries)) * (8 + 4)
            shutil.move(tmp_path / "c.zarr", tmp_path / "moved.zarr")
            second = batch(warm=True)
            with pytest.raises(InputError):
                batch()  # the cold path reads the store
            held.release()
            with pytest.raises(InputError):
                batch(warm=True)
    for answer in (cold, first, second):
        _assert_probed_brute_force(features, all_codes, lists.centroids, queries, *answer)


def test_default_warm_blocks_are_one_per_worker_thread_placed_one_per_thread(stored_ivf):
    """Without a block size, the warm lists form one block per worker thread (here 2 workers
    x 1 thread over 8 chunks of 700 rows: 2 blocks of 4 chunks), one on each worker, and the
    answer is still brute force over the probed lists."""
    import dask
    from distributed import Client, LocalCluster

    from dask_hashcodes.indexes.ivf import ivf_knn_lazy, resident_lists

    d, ds, split = stored_ivf
    codes, lists, all_codes, features = _opened(d, ds)
    queries = split.query
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc:
        with Client(lc):
            lazy = ivf_knn_lazy(all_codes[queries], features[queries], lists, 20, 4, excluded_rows=queries, warm=True)
            dist, ids = dask.compute(lazy)[0]
            report = resident_lists(lists, queries, create=False).by_worker()
    assert codes.reader.n_chunks == 8
    assert sorted(w["blocks"] for w in report.values()) == [1, 1]
    _assert_probed_brute_force(features, all_codes, lists.centroids, queries, dist, ids)


def test_resident_block_chunks_give_each_thread_equal_blocks_under_the_row_cap():
    from dask_hashcodes.indexes.ivf import RESIDENT_BLOCK_MAX_ROWS, resident_block_chunks

    assert resident_block_chunks(8, 700, 2) == 4  # 2 blocks
    assert resident_block_chunks(8, 700, 16) == 1  # fewer chunks than threads: a chunk each
    assert resident_block_chunks(9, 700, 2) == 5  # 2 blocks, the last one shorter
    chunk = RESIDENT_BLOCK_MAX_ROWS // 8
    per_block = resident_block_chunks(96, chunk, 2)  # 96 chunks: 2 x 6 blocks of 8 chunks
    assert per_block == 8 and per_block * chunk <= RESIDENT_BLOCK_MAX_ROWS
    assert resident_block_chunks(100, chunk, 2) == 8  # 13 blocks of at most 8 chunks: 7 and 6 per thread


def test_a_stored_ivf_refuses_other_codes_damage_and_bad_nprobe(stored_ivf, tmp_path):
    import shutil

    from dask_hashcodes import workflows
    from dask_hashcodes.errors import InputError
    from dask_hashcodes.indexes.ivf import ivf_knn_lazy
    from dask_hashcodes.storage.codes import open_codes
    from dask_hashcodes.storage.ivf_index import open_ivf

    d, ds, split = stored_ivf
    codes = open_codes(d / "c.zarr")
    lists = open_ivf(d / "i.zarr", codes)
    queries = np.asarray(ds.features_dask()[:3].compute(), dtype=np.float64)
    query_codes = codes.reader[:3]
    for nprobe in (0, 31):
        with pytest.raises(InputError, match=r"`nprobe` must be an int in \[1, 30\]"):
            ivf_knn_lazy(query_codes, queries, lists, 5, nprobe)
    with pytest.raises(InputError, match="query vectors hold NaN"):
        ivf_knn_lazy(
            query_codes, np.where(np.arange(queries.size).reshape(queries.shape) == 5, np.nan, queries), lists, 5, 2
        )
    with pytest.raises(InputError, match="query vectors have 10 features but the inverted file at .* was built on 128"):
        ivf_knn_lazy(query_codes, queries[:, :10], lists, 5, 2)
    workflows.encode(ds, workflows.train(ds, "lsh", tmp_path / "m", bits=64), tmp_path / "c.zarr")
    with pytest.raises(InputError, match="built from other codes"):
        open_ivf(d / "i.zarr", open_codes(tmp_path / "c.zarr"))
    damaged = tmp_path / "i.zarr"
    shutil.copytree(d / "i.zarr", damaged)
    chunk = next(p for p in (damaged / "order").rglob("*") if p.is_file() and p.name != "zarr.json")
    chunk.write_bytes(b"\0" * len(chunk.read_bytes()))
    with pytest.raises(InputError, match="order"):
        ivf_knn_lazy(query_codes, queries, open_ivf(damaged, codes), 5, 2).compute(scheduler="synchronous")


def test_a_projected_quantiser_is_the_top_principal_directions_of_its_sample(stored_ivf, tmp_path):
    """Learned from every row, the projection is the top 16 eigenvectors of the rows'
    covariance (each with PCA's sign) and their mean; an index whose projection is damaged
    or missing is refused; an index written before the quantiser could be projected (schema
    1, no dims) still opens, in the features' space."""
    import json
    import shutil

    import dask

    from dask_hashcodes.errors import InputError
    from dask_hashcodes.indexes.ivf import build_ivf
    from dask_hashcodes.storage.codes import open_codes
    from dask_hashcodes.storage.ivf_index import open_ivf

    d, ds, _ = stored_ivf
    codes = open_codes(d / "c.zarr")
    X = np.asarray(ds.features_dask().compute(), np.float64)
    with dask.config.set(scheduler="synchronous"):
        build_ivf(codes, ds.features_dask(), tmp_path / "all.zarr", n_lists=30, kmeans_rows=len(X), quantiser_dims=16)
    projection = open_ivf(tmp_path / "all.zarr", codes).projection
    values, vectors = np.linalg.eigh(np.cov(X, rowvar=False, bias=True))
    top = vectors[:, ::-1][:, :16]
    top *= np.sign(top[np.abs(top).argmax(axis=0), np.arange(16)])
    np.testing.assert_allclose(projection.mean, X.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(projection.components, top, atol=1e-9)
    assert projection.dims == 16 and projection.d == 128

    damaged = tmp_path / "damaged.zarr"
    shutil.copytree(d / "i16.zarr", damaged)
    chunk = next(p for p in (damaged / "projection").rglob("*") if p.is_file() and p.name != "zarr.json")
    chunk.write_bytes(b"\0" * len(chunk.read_bytes()))
    with pytest.raises(InputError, match=r"projection"):
        open_ivf(damaged, codes)
    shutil.rmtree(damaged / "projection")
    with pytest.raises(InputError, match=r"projection"):
        open_ivf(damaged, codes)

    older = tmp_path / "older.zarr"
    shutil.copytree(d / "i.zarr", older)
    meta = json.loads((older / "zarr.json").read_text())
    meta["attributes"]["schema"] = "dhash.ivf-index/1"
    del meta["attributes"]["dims"]
    (older / "zarr.json").write_text(json.dumps(meta))
    opened = open_ivf(older, codes)
    assert opened.projection is None and opened.d == 128
    np.testing.assert_array_equal(opened.centroids, open_ivf(d / "i.zarr", codes).centroids)


def test_features_holding_nan_build_no_inverted_file(stored_ivf, tmp_path):
    """A NaN in the k-means sample, or in a row outside it, is a one-line error naming the
    problem, and no index is left behind."""
    import dask
    import dask.array as da

    from dask_hashcodes.errors import InputError
    from dask_hashcodes.indexes.ivf import build_ivf
    from dask_hashcodes.storage.codes import open_codes

    d, ds, _ = stored_ivf
    codes = open_codes(d / "c.zarr")
    X = np.asarray(ds.features_dask().compute(), np.float32)
    for bad_row, sampled in ((17, len(X)), (4321, 300)):
        bad = X.copy()
        bad[bad_row, 3] = np.nan
        features = da.from_array(bad, chunks=(700, 128))
        with dask.config.set(scheduler="synchronous"), pytest.raises(InputError, match="NaN"):
            rows = np.sort(np.random.default_rng(0).choice(len(X), sampled, replace=False))
            assert sampled == len(X) or bad_row not in rows  # the second NaN lies outside the sample
            build_ivf(codes, features, tmp_path / "i.zarr", n_lists=30, kmeans_rows=sampled)
        assert not (tmp_path / "i.zarr").exists()


def test_the_default_quantiser_projects_only_where_few_directions_hold_the_variance_and_it_saves_work():
    """Rows near a 3-d subspace of 40 dims: the quantiser keeps the fewest directions holding
    QUANTISER_VARIANCE_SHARE of the variance. Isotropic rows: no few directions do, and the
    features' own space is kept. ``quantiser_dims`` at or above d keeps it too."""
    import dask
    import dask.array as da

    from dask_hashcodes.errors import InputError
    from dask_hashcodes.indexes.ivf import QUANTISER_VARIANCE_SHARE, ivf_quantiser
    from dask_hashcodes.kernels.ivf import principal_dims

    rng = np.random.default_rng(0)
    flat = rng.standard_normal((3000, 40))
    steep = 0.05 * flat + rng.standard_normal((3000, 3)) @ rng.standard_normal((3, 40))
    with dask.config.set(scheduler="synchronous"):
        centroids, projection = ivf_quantiser(da.from_array(steep, chunks=(700, 40)), 50, seed=1)
        assert projection is not None and projection.dims == 3 and centroids.shape == (50, 3)
        centroids, projection = ivf_quantiser(da.from_array(flat, chunks=(700, 40)), 50, seed=1)
        assert projection is None and centroids.shape == (50, 40)
        _, projection = ivf_quantiser(da.from_array(steep, chunks=(700, 40)), 50, dims=40, seed=1)
        assert projection is None
        with pytest.raises(InputError, match="`quantiser_dims` must be a positive int"):
            ivf_quantiser(da.from_array(steep, chunks=(700, 40)), 50, dims=0)
    assert principal_dims(np.array([5.0, 3.0, 1.0, 1.0]), 0.8) == 2
    assert principal_dims(np.array([5.0, 3.0, 1.0, 1.0]), 0.81) == 3
    assert principal_dims(np.array([5.0, 3.0, 1.0, 1.0]), QUANTISER_VARIANCE_SHARE) == 3
    assert principal_dims(np.zeros(4), 0.9) == 1


def test_serving_from_memory_answers_as_the_cluster_path(stored_ivf):
    """ServingIVF (lists regrouped from 8 shards into one layout, the split's queries left
    out) gives the stored index's Hamming answer and, with the vectors (stored, or an
    array), the answer of Rerank("exact") over it on a 2-worker cluster: same probes, same
    top-R, same ties."""
    from distributed import Client, LocalCluster

    from dask_hashcodes.errors import InputError
    from dask_hashcodes.indexes.index import IVFIndex, Queries, Rerank
    from dask_hashcodes.indexes.serving import ServingIVF
    from dask_hashcodes.storage.codes import open_codes
    from dask_hashcodes.storage.ivf_index import open_ivf

    d, ds, split = stored_ivf
    codes = open_codes(d / "c.zarr")
    lists = open_ivf(d / "i.zarr", codes)
    queries = Queries(
        codes=codes.reader[...][split.query], vectors=np.asarray(ds.features_dask()[split.query].compute())
    )
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, Client(lc):
        stored = IVFIndex(lists, 5, exclude=split.query)
        hamming_d, hamming_i = stored.search_codes(queries, 30)
        exact_d, exact_i = Rerank("exact", stored, candidates=120, source=ds).search_codes(queries, 30)
    serving = ServingIVF.load(lists, exclude=split.query, nprobe=5, candidates=120)
    assert serving.ntotal == 5000 - len(split.query) and serving.lists.list_ids.dtype == np.int32
    small = (31 * 8 + 30 * 128 * 4) / serving.ntotal  # offsets, float32 centroids
    assert serving.bytes_per_vector == pytest.approx(8 + 4 + small)  # 64-bit codes, int32 ids
    got_d, got_i = serving.search_codes(queries, 30)
    np.testing.assert_array_equal(got_i, hamming_i)
    np.testing.assert_array_equal(got_d, hamming_d)
    in_memory = np.asarray(ds.features_dask().compute())
    for vectors in (ds, in_memory):  # read where stored, chunk by chunk; or the fused loop over an array
        serving = ServingIVF.load(lists, vectors=vectors, exclude=split.query, nprobe=5, candidates=120)
        got_d, got_i = serving.search_codes(queries, 30)
        np.testing.assert_array_equal(got_i, exact_i)
        np.testing.assert_array_equal(got_d, exact_d)
    # tuning on validation vectors: the fastest setting that reaches the target, its recall
    # that of the exact top-10 over the indexed rows
    tuned = serving.tune_codes(queries, k=10, target=0.8)
    trials = tuned.trials
    chosen = next(t for t in trials if t["recall"] >= 0.8)
    assert tuned.reached and (tuned.nprobe, tuned.k_factor, tuned.candidates, tuned.recall) == tuple(
        chosen[key] for key in ("nprobe", "k_factor", "candidates", "recall")
    )
    assert (serving.nprobe, serving.k_factor, serving.candidates) == (chosen["nprobe"], chosen["k_factor"], None)
    assert [t["queries_per_second"] for t in trials] == sorted((t["queries_per_second"] for t in trials), reverse=True)
    rows = np.setdiff1d(np.arange(5000), split.query)
    vectors = in_memory[rows].astype(np.float64)
    exact = np.array([rows[np.lexsort((rows, ((vectors - v) ** 2).sum(1)))[:10]] for v in queries.vectors])
    _, found = serving.search_codes(queries, 10)
    hits = sum(len(np.intersect1d(f, e)) for f, e in zip(found, exact))
    assert chosen["recall"] == pytest.approx(hits / exact.size)
    # no setting reaches the target: the best recall found is kept and returned, not raised
    with pytest.warns(UserWarning, match=r"no setting reached recall@10 1.0 .*Tuning.reached is False"):
        missed = serving.tune_codes(queries, k=10, target=1.0, nprobes=(1, 2), k_factors=(1,))
    assert not missed.reached and missed.target == 1.0 and len(missed.trials) == 2
    assert missed.recall == max(t["recall"] for t in missed.trials) < 1.0
    assert (serving.nprobe, serving.k_factor) == (missed.nprobe, missed.k_factor)
    serving.candidates = 20
    with pytest.raises(InputError, match="20 candidates is below k = 30"):
        serving.search_codes(queries, 30)
    serving.nprobe = 31
    with pytest.raises(InputError, match=r"`nprobe` must be an int in \[1, 30\]"):
        serving.search_codes(queries, 10)
    with pytest.raises(InputError, match="4999 vectors for the 5000 codes"):
        ServingIVF.load(lists, vectors=np.zeros((4999, 128)))


def _exact_top(query, vectors, rows, k):
    dist = ((vectors[rows] - query) ** 2).sum(axis=1)
    return rows[np.lexsort((rows, dist))[:k]]


def _recall(found, exact):
    return np.mean([len(np.intersect1d(f, e)) / len(e) for f, e in zip(found, exact)])


def test_evaluation_neighbour_recall_equals_brute_force():
    """The evaluation's recall of the true neighbours, for the Hamming order, exact re-ranking
    and the inverted file, recomputed from scratch: brute-force Hamming top-R (ties by id),
    brute-force exact L2 top-k, lists from the same seeded centroids."""
    import dask
    import dask.array as da

    from dask_hashcodes.evaluation.neighbours import NeighbourRecall, NeighbourSearches
    from dask_hashcodes.indexes.ivf import ivf_quantiser
    from dask_hashcodes.kernels.ivf import quantiser_space

    rng = np.random.default_rng(3)
    X = rng.standard_normal((3000, 8)) + 3 * rng.standard_normal((12, 8))[rng.integers(0, 12, 3000)]
    codes = pack_signs(X @ rng.standard_normal((8, 32)))
    query = np.sort(rng.choice(3000, 50, replace=False))
    db = np.setdiff1d(np.arange(3000), query)
    k, searches = (
        10,
        NeighbourSearches(recall_at=10, rerank_candidates=(30, 200), ivf_lists=25, ivf_nprobes=(2, 25)).checked(
            len(db)
        ),
    )
    exact = np.array([_exact_top(X[q], X, db, k) for q in query])
    features = da.from_array(X, chunks=(700, 8))
    with dask.config.set(scheduler="synchronous"):
        measure = NeighbourRecall(searches, exact, seed=5)
        got = measure.measure(
            features, X[query], codes[query], da.from_array(X[db], chunks=(700, 8)),
            da.from_array(codes[db], chunks=(700, 4)), da.from_array(db, chunks=700),
        )  # fmt: skip
        lists = measure._lists
        again = measure.measure(
            features, X[query], codes[query], None, da.from_array(codes[db], chunks=(700, 4)),
            da.from_array(db, chunks=700),
        )  # fmt: skip
        assert measure._lists is lists and again == got  # the lists are learned once
        centroids, projection = ivf_quantiser(da.from_array(X[db], chunks=(700, 8)), 25, seed=5)
    space = quantiser_space(X, projection)
    assignment = np.argmin(((space[:, None, :] - centroids[None]) ** 2).sum(-1), axis=1)

    def reranked(candidate_rows, R):
        return [
            _exact_top(X[q], X, _brute_force(codes[q], codes, rows, R)[1], k) for q, rows in zip(query, candidate_rows)
        ]

    want = [_recall([_brute_force(codes[q], codes, db, k)[1] for q in query], exact)]
    want += [_recall(reranked([db] * len(query), R), exact) for R in (30, 200)]
    for nprobe in (2, 25):
        probes = probed_lists(space[query], centroids, nprobe)
        rows = [db[np.isin(assignment[db], p)] for p in probes]
        want += [_recall(reranked(rows, R), exact) for R in (30, 200)]
    assert got["k"] == k and [s["search"] for s in got["searches"]] == ["hamming"] + ["rerank"] * 2 + ["ivf"] * 4
    np.testing.assert_allclose([s["recall"] for s in got["searches"]], want, rtol=0, atol=1e-12)
    assert got["searches"][2]["recall"] > got["searches"][0]["recall"]  # re-ranking finds more true neighbours
    # probing every list is the re-ranked scan
    assert [s["recall"] for s in got["searches"][5:]] == [s["recall"] for s in got["searches"][1:3]]


def test_evaluation_neighbour_settings_are_checked():
    from dask_hashcodes.errors import InputError
    from dask_hashcodes.evaluation.neighbours import NeighbourSearches

    assert NeighbourSearches(recall_at=10, rerank_candidates=(100,), ivf_lists=0).checked(10_000).ivf_lists == 400
    for bad, words, marks in [
        (
            NeighbourSearches(recall_at=10, rerank_candidates=(5,)),
            "re-ranking candidates must lie in [k=10, 10000] (the recall's k, the database rows); got 5; set "
            "`rerank_candidates` at or above `recall_at`",
            ["rerank_candidates", "recall_at"],
        ),
        (NeighbourSearches(recall_at=0), "`recall_at` must lie in [1, 10000]", ["recall_at"]),
        (
            NeighbourSearches(rerank_candidates=(100,), ivf_lists=20, ivf_nprobes=(4, 30)),
            "lists probed (`ivf_nprobes`) must lie in [1, 20] (the inverted file's lists); got 4, 30",
            ["ivf_nprobes"],
        ),
        (
            NeighbourSearches(rerank_candidates=(100,), ivf_lists=20_000),
            "inverted file lists (`ivf_lists`) must lie in [1, 10000]",
            ["ivf_lists"],
        ),
        (NeighbourSearches(recall_at=True), "must be ints; got True, 100, 1000, 4", None),
    ]:
        with pytest.raises(InputError, match=re.escape(words)) as raised:
            bad.checked(10_000)
        if marks is not None:
            assert raised.value.parameters == marks
    # the evaluation report records the settings under its own keys
    assert NeighbourSearches(recall_at=5, rerank_candidates=(20,), ivf_lists=8, ivf_nprobes=(8,)).protocol() == {
        "k": 5, "candidates": [20], "ivf_lists": 8, "nprobes": [8]
    }  # fmt: skip


@pytest.mark.parametrize("workers, warm", [(1, False), (2, False), (2, True)])
def test_a_code_space_ivf_is_brute_force_over_the_lists_nearest_each_query_code(stored_ivf, clusters, workers, warm):
    """Lists built from the codes alone: every row in the list of its nearest centroid code,
    each query probing the lists whose codes are nearest its own (no vector given), and the
    answer brute force over those lists' rows, cold or warm, from the cluster or from memory."""
    import dask
    from distributed import Client

    from dask_hashcodes.indexes.ivf import InvertedLists, ivf_knn_lazy
    from dask_hashcodes.kernels.ivf import probed_code_lists

    d, ds, split = stored_ivf
    _, lists, all_codes, _ = _opened(d, ds, "ic.zarr")
    assert lists.quantiser == "codes" and lists.centroids.dtype == np.uint8 and lists.d == 0
    queries = split.query
    with Client(clusters[workers]):
        dist, ids = dask.compute(
            ivf_knn_lazy(all_codes[queries], None, lists, 20, 4, excluded_rows=queries, rows_per_task=1400, warm=warm)
        )[0]
        if warm:
            from dask_hashcodes.indexes.ivf import resident_lists

            resident_lists(lists, queries, 1400, create=False).release()
    assignment = hamming_distances(all_codes, lists.centroids).argmin(axis=1)
    probes = probed_code_lists(all_codes[queries], lists.centroids, 4)
    np.testing.assert_array_equal(probes, hamming_topk(lists.centroids, np.arange(30), queries=all_codes[queries],
                                                       k=4)[1])  # fmt: skip
    database = np.setdiff1d(np.arange(len(all_codes)), queries)
    for q in range(len(queries)):
        rows = database[np.isin(assignment[database], probes[q])]
        want_d, want_i = _brute_force(all_codes[queries[q]], all_codes, rows, 20)
        np.testing.assert_array_equal(ids[q], want_i)
        np.testing.assert_array_equal(dist[q], want_d)
    memory = InvertedLists.load(lists, exclude=queries)
    np.testing.assert_array_equal(memory.search(all_codes[queries], None, 20, 4)[1], ids)


def test_a_code_space_quantiser_is_the_same_bits_whatever_the_chunking(stored_ivf):
    """Sums of +-1 are whole numbers, so the codes in 700-row or 1900-row chunks give the same
    centroid codes; its options are checked in one line."""
    import dask

    from dask_hashcodes.errors import InputError
    from dask_hashcodes.indexes.ivf import build_ivf, code_quantiser
    from dask_hashcodes.storage.codes import open_codes

    d, ds, _ = stored_ivf
    codes = open_codes(d / "c.zarr").dask()
    with dask.config.set(scheduler="synchronous"):
        one = code_quantiser(codes, 30, kmeans_rows=2000, seed=3)
        other = code_quantiser(codes.rechunk((1900, codes.shape[1])), 30, kmeans_rows=2000, seed=3)
    np.testing.assert_array_equal(one, other)
    with pytest.raises(InputError, match="`quantiser_dims`.*does not apply"):
        build_ivf(d / "c.zarr", None, d / "x.zarr", n_lists=30, quantiser="codes", quantiser_dims=8)
    with pytest.raises(InputError, match="`quantiser` must be one of features, codes"):
        build_ivf(d / "c.zarr", None, d / "x.zarr", n_lists=30, quantiser="pixels")
    with pytest.raises(InputError, match="quantiser='codes'"):
        build_ivf(d / "c.zarr", None, d / "x.zarr", n_lists=30)  # features needed, and how to do without
    assert not (d / "x.zarr").exists()
