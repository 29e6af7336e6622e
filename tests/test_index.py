"""The Index objects (dask_hashcodes.indexes.index) against the search functions they wrap and against
brute-force numpy Hamming; handles opened once per search; the storage context."""

from __future__ import annotations

import collections
import dataclasses
import pickle
from contextlib import ExitStack
from unittest import mock

import dask
import dask.array as da
import numpy as np
import pyarrow.parquet as pq
import pytest
from distributed import Client, get_task_stream

import dask_hashcodes
from dask_hashcodes import workflows
from dask_hashcodes.errors import InputError
from dask_hashcodes.indexes.hamming import flat_hits, knn_search, radius_search
from dask_hashcodes.indexes.index import FlatIndex, Index, MIHIndex, Queries, Rerank
from dask_hashcodes.indexes.mih import MultiIndex
from dask_hashcodes.indexes.plan import (
    CALIBRATED_K,
    EARLY_MARGIN,
    MIH,
    SCAN,
    TRIAL_QUERIES,
    _mih_seconds,
    calibrated_choice,
    early_sample_rows,
    faster_exact_search,
    start_early_trial,
)
from dask_hashcodes.kernels.codes import pack_signs
from dask_hashcodes.storage.location import Storage, resolve
from tests import reference as ref


def brute_force(queries, codes, k, ids=None):
    ids = np.arange(len(codes), dtype=np.int64) if ids is None else ids
    dist, nn = ref.topk_bruteforce(ref.popcount_distances(queries, codes), ids, min(k, len(codes)))
    if k > len(codes):  # FAISS pads with -1 ids (and the largest distance)
        pad = k - len(codes)
        dist = np.hstack([dist, np.full((len(dist), pad), np.iinfo(np.int32).max, dist.dtype)])
        nn = np.hstack([nn, np.full((len(nn), pad), -1, np.int64)])
    return dist, nn


def brute_force_range(queries, codes, radius, ids):
    dist = ref.popcount_distances(queries, codes)
    lims, dists, hits_ids = [0], [], []
    for q in range(len(queries)):
        hits = np.nonzero(dist[q] <= radius)[0]
        order = np.lexsort((ids[hits], dist[q][hits]))
        dists.append(dist[q][hits][order])
        hits_ids.append(ids[hits][order])
        lims.append(lims[-1] + len(hits))
    return np.array(lims), np.concatenate(dists), np.concatenate(hits_ids)


@pytest.fixture(scope="module")
def codes_5k():
    rng = np.random.default_rng(4)
    proj = rng.standard_normal((5000, 6)) @ rng.standard_normal((6, 32))  # clustered: many ties
    return pack_signs(proj), pack_signs(rng.standard_normal((30, 6)) @ rng.standard_normal((6, 32)))


def test_index_objects_equal_the_search_functions_and_brute_force(codes_5k):
    db, q = codes_5k
    exclude = np.arange(0, len(db), 7)
    keep = np.setdiff1d(np.arange(len(db)), exclude)
    with dask.config.set(scheduler="synchronous"):
        chunked = da.from_array(db, chunks=900)
        flat, flat_excl = FlatIndex(chunked), FlatIndex(chunked, exclude=exclude)
        multi = MultiIndex(chunked)
        for index in (flat, multi):
            assert isinstance(index, Index)
        for k in (1, 10, 100):
            want = brute_force(q, db, k)
            for got in (flat.search_codes(q, k), multi.search_codes(q, k), knn_search(q, chunked, k)):
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_array_equal(got[1], want[1])
            want = brute_force(q, db[keep], k, ids=keep)
            got = flat_excl.search_codes(q, k)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
        for radius in (0, 4, 9):
            want = brute_force_range(q, db, radius, np.arange(len(db)))
            for got in (flat.range_search_codes(q, radius), multi.range_search_codes(q, radius)):
                for g, w in zip(got, want, strict=True):
                    np.testing.assert_array_equal(g, w)
            query_index, ids, dist = radius_search(q, chunked, radius)
            lims, dist_r, ids_r = flat.range_search_codes(q, radius)
            np.testing.assert_array_equal(flat_hits(lims), query_index)
            np.testing.assert_array_equal(ids_r, ids)
            np.testing.assert_array_equal(dist_r, dist)
        # fewer rows than k: -1 ids as FAISS
        small = FlatIndex(db[:5])
        dist, nn = small.search_codes(q[:3], 8)
        np.testing.assert_array_equal(nn[:, 5:], -1)
        np.testing.assert_array_equal(nn, brute_force(q[:3], db[:5], 8)[1])
        with pytest.raises(InputError, match="k must be a positive int"):
            flat.search_codes(q, 0)


def test_vector_queries_are_encoded_by_the_index_model():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((2000, 40)).astype(np.float32)
    model = dask_hashcodes.ITQ(n_bits=32, random_state=0).fit(X)
    codes = model.encode(X)
    with dask.config.set(scheduler="synchronous"):
        index = FlatIndex(codes, model=model)
        by_vectors = index.search(X[:20], 10)
        by_codes = index.search_codes(codes[:20], 10)
        np.testing.assert_array_equal(by_vectors[1], by_codes[1])
        exact = Rerank("exact", index, candidates=50, source=da.from_array(X, chunks=500), model=model)
        dist_x, ids_x = exact.search(X[:20], 10)
        want_d, want_i = zip(
            *(
                ref.l2_topk_bruteforce(X[i : i + 1], X[c[c >= 0]], c[c >= 0], 10)
                for i, c in enumerate(index.search(X[:20], 50)[1])
            )
        )
        np.testing.assert_array_equal(ids_x, np.vstack(want_i))
        np.testing.assert_allclose(dist_x, np.vstack(want_d), rtol=1e-5)
        with pytest.raises(InputError, match=r"needs the query vectors as well as their codes: pass Queries\("):
            exact.search_codes(codes[:2], 5)
        with pytest.raises(InputError, match="answers top-k searches only"):
            exact.range_search(X[:2], 3)
    with pytest.raises(InputError, match="has no `model` to encode query vectors.* call search_codes"):
        FlatIndex(codes).search(X[:2], 3)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A small dataset with a split, an ITQ model, its codes, a stored multi-index and an
    inverted file."""
    d = tmp_path_factory.mktemp("index")
    with dask.config.set(scheduler="synchronous"):
        ds = workflows.synth("sift", d / "s.zarr", n=4000, chunk_rows=1000)
        workflows.split(ds, queries=40)
        model = workflows.train(ds, "itq", d / "m", bits=32, split="default")
        workflows.encode(ds, model, d / "c.zarr")
        workflows.index(d / "c.zarr", d / "i.zarr")
        workflows.index(d / "c.zarr", d / "v.zarr", kind="ivf", dataset=d / "s.zarr", lists=8)
    return d


def _counted(fn):
    """Run fn with the readers of commit records, array metadata and attributes counted per
    artifact path (in this process: where artifacts are opened)."""
    import dask_hashcodes.storage.atomic as atomic
    import dask_hashcodes.storage.chunkread as chunkread

    counts = {"commit": collections.Counter(), "metadata": collections.Counter(), "attrs": collections.Counter()}

    def counting(kind, real, key):
        def wrapper(loc, *args):
            counts[kind][key(loc)] += 1
            return real(loc, *args)

        return wrapper

    patches = [
        ("commit", atomic, "read_commit", atomic.read_commit, lambda loc: loc.url),
        ("metadata", chunkread, "_metadata", chunkread._metadata, lambda loc: loc.url),
        ("attrs", chunkread, "read_attrs", chunkread.read_attrs, lambda loc: loc.url),
    ]
    modules = [m for m in map(__import__("importlib").import_module, _READERS)]
    with ExitStack() as stack:
        for kind, module, name, real, key in patches:
            wrapper = counting(kind, real, key)
            stack.enter_context(mock.patch.object(module, name, wrapper))
            for other in modules:  # modules that imported the function by name
                if getattr(other, name, None) is real:
                    stack.enter_context(mock.patch.object(other, name, wrapper))
        fn()
    return counts


_READERS = (
    "dask_hashcodes.storage.datasets",
    "dask_hashcodes.storage.codes",
    "dask_hashcodes.storage.mih_index",
    "dask_hashcodes.storage.ivf_index",
    "dask_hashcodes.hashing.registry",
    "dask_hashcodes.hashing.base",
)


@pytest.mark.parametrize("how", ["scan", "index", "ivf", "rerank"])
def test_one_search_reads_each_commit_record_and_metadata_once(stored, tmp_path, how):
    d = stored
    options = {
        "scan": {},
        "index": {"index": d / "i.zarr"},
        "ivf": {"index": d / "v.zarr"},
        "rerank": {"rerank": "exact"},
    }[how]

    def run():
        with dask.config.set(scheduler="synchronous"):
            workflows.search(d / "s.zarr", d / "m", d / "c.zarr", tmp_path / "r.parquet", k=10, **options)

    counts = _counted(run)
    artifacts = {str(d / n) for n in ("s.zarr", "m", "c.zarr", "s.zarr/splits/default")}
    if "index" in options:
        artifacts.add(str(options["index"]))
    assert set(counts["commit"]) == artifacts, counts["commit"]
    assert all(n == 1 for n in counts["commit"].values()), counts["commit"]
    assert counts["metadata"] and all(n == 1 for n in counts["metadata"].values()), counts["metadata"]
    assert all(n == 1 for n in counts["attrs"].values()), counts["attrs"]


def test_index_objects_over_handles_equal_dhash_search(stored, tmp_path):
    d = stored
    with dask.config.set(scheduler="synchronous"):
        ds = dask_hashcodes.open_dataset(d / "s.zarr")
        model = dask_hashcodes.load_model(d / "m")
        codes = dask_hashcodes.open_codes(d / "c.zarr", model, ds)
        split = ds.get_split("default")
        queries = codes.take(split.query)
        flat = FlatIndex(codes, exclude=split.query)
        tables = dask_hashcodes.open_index(d / "i.zarr", codes)
        mih = MIHIndex(tables, exclude=split.query, choose=False)  # always through the tables
        chosen = MIHIndex(tables, exclude=split.query)  # the faster of the tables and the scan
        all_codes, keep = codes.reader.read_all(), np.setdiff1d(np.arange(ds.n), split.query)
        want = brute_force(queries, all_codes[keep], 25, ids=keep)
        want_range = brute_force_range(queries, all_codes[keep], 3, keep)
        for choice in (SCAN, MIH):  # whichever the trial picks, the answer is the same
            with mock.patch("dask_hashcodes.indexes.index.faster_exact_search", return_value=choice) as trial:
                for index in (flat, mih, chosen):
                    got = index.search_codes(queries, 25)
                    np.testing.assert_array_equal(got[0], want[0])
                    np.testing.assert_array_equal(got[1], want[1])
                    for g, w in zip(index.range_search_codes(queries, 3), want_range, strict=True):
                        np.testing.assert_array_equal(g, w)
                assert trial.call_count == 2 and chosen.searched_by == choice and mih.searched_by == MIH
        # the public API and its parquet output say the same (handles accepted as well as locations)
        done = dask_hashcodes.search(ds, model, codes, tmp_path / "r.parquet", split=split, k=25)
        table = pq.read_table(tmp_path / "r.parquet")
        np.testing.assert_array_equal(done.results[1], want[1])
        np.testing.assert_array_equal(table.column("id").to_numpy(), want[1].ravel())
        np.testing.assert_array_equal(table.column("hamming").to_numpy(), want[0].ravel())
        in_memory = dask_hashcodes.search(d / "s.zarr", d / "m", d / "c.zarr", radius=3, index=d / "i.zarr")
        assert in_memory.path is None
        for g, w in zip(in_memory.results, want_range, strict=True):
            np.testing.assert_array_equal(g, w)
        reranked = Rerank("exact", flat, candidates=100, source=ds)
        dist_x, ids_x = reranked.search_codes(Queries(codes=queries, vectors=ds.features.take(split.query)), 10)
        done = dask_hashcodes.search(ds, model, codes, split=split, k=10, rerank="exact", candidates=100)
        np.testing.assert_array_equal(done.results[1], ids_x)
        np.testing.assert_array_equal(done.results[0], dist_x)


def test_the_trial_chooses_what_is_faster_by_a_wide_margin(tmp_path, cluster):
    """On 100,000 codes in one shard, a top-1 is a handful of table lookups for multi-index
    hashing and a pass over every code for the scan; a top-10,000 needs a search radius that
    reaches most codes through the tables, which the scan does in one pass. Each margin (about
    9x and 4x on an idle machine) is wide enough that a busy one cannot flip it. The tables
    must also pay for being read: a batch of one query saves microseconds by them and would
    spend milliseconds reading them, so it runs by the scan."""
    with dask.config.set(scheduler="synchronous"):
        ds = workflows.synth("sift", tmp_path / "s.zarr", n=100_000, chunk_rows=100_000)
        workflows.split(ds, queries=100)
        model = workflows.train(ds, "itq", bits=32, split="default", params={"itq": {"n_iter": 5}})
        codes = workflows.encode(ds, model, tmp_path / "c.zarr")
        workflows.index(codes.path, tmp_path / "i.zarr")
        tables = dask_hashcodes.open_index(tmp_path / "i.zarr", dask_hashcodes.open_codes(codes.path))
        # the trial itself, not the build's calibration (which may decide a search without one)
        tables = dataclasses.replace(tables, attrs={k: v for k, v in tables.attrs.items() if k != "calibration"})
        queries = dask_hashcodes.open_codes(codes.path).take(ds.get_split("default").query)
        many = np.tile(queries, (20, 1))  # 2000 queries: their saving dwarfs reading the tables
        assert faster_exact_search(tables, many, k=1) == MIH
        assert faster_exact_search(tables, many, k=10_000) == SCAN
        assert faster_exact_search(tables, queries[:1], k=1) == SCAN
    # with a cluster the trial runs on a worker (the tables travel to it): the same choices
    with Client(cluster) as client, get_task_stream(client) as tasks:
        assert faster_exact_search(tables, many, k=1) == MIH
        assert faster_exact_search(tables, many, k=10_000) == SCAN
        # started before the batch's codes are read, from their stored rows: the same choices
        rows = np.tile(ds.get_split("default").query, 20)
        for k, want in ((1, MIH), (10_000, SCAN)):
            early = start_early_trial(tables, rows, k=k)
            assert early is not None and early.n_sample == TRIAL_QUERIES
            assert faster_exact_search(tables, many, k=k, early=early) == want
        # an early trial for another search is not used: that search runs its own
        assert faster_exact_search(tables, many, k=10_000, early=start_early_trial(tables, rows, k=1)) == SCAN
    keys = [str(task["key"]) for task in tasks.data]
    assert sum("trial_seconds" in key for key in keys) == 3 and sum("_trial_of_rows" in key for key in keys) == 3


def _calibration_never_decides():
    """Neither of the build calibration's rules skips a trial (on data this small the
    projected scan alone would)."""
    stack = ExitStack()
    stack.enter_context(mock.patch("dask_hashcodes.indexes.plan.CALIBRATED_MARGIN", np.inf))
    stack.enter_context(mock.patch("dask_hashcodes.indexes.plan.TRIAL_SECONDS", 0.0))
    return stack


def test_a_search_through_a_multi_index_times_its_trial_on_stored_query_rows(stored, cluster):
    """workflows.search tells the multi-index its queries' rows before it reads their codes:
    the one trial is the early one (a worker reads the sample), for a re-ranked search too
    (at the candidate depth), and the answer is the plain scan's. (The build's calibration
    is set never to decide here.)"""
    d = stored
    with _calibration_never_decides(), Client(cluster) as client, get_task_stream(client) as tasks:
        plain = workflows.search(d / "s.zarr", d / "m", d / "c.zarr", k=25)
        through = workflows.search(d / "s.zarr", d / "m", d / "c.zarr", k=25, index=d / "i.zarr")
        workflows.search(d / "s.zarr", d / "m", d / "c.zarr", k=10, index=d / "i.zarr", rerank="exact", candidates=50)
    for got, want in zip(through.results, plain.results, strict=True):
        np.testing.assert_array_equal(got, want)
    keys = [str(task["key"]) for task in tasks.data]
    assert sum("_trial_of_rows" in key for key in keys) == 2 and not any("trial_seconds" in key for key in keys)


def test_a_search_the_calibration_rules_out_for_the_tables_reads_none_and_runs_no_trial(stored, cluster):
    """The build times both searches on its first shard at each calibrated depth. A search
    the tables lose there by the margin (here: every one, the margin set to zero) runs the
    plain scan's tasks and nothing else, and its workers need no tables' kernels."""
    from dask_hashcodes.cli.commands import kernels_to_warm

    d = stored
    calibration = dask_hashcodes.open_index(d / "i.zarr", dask_hashcodes.open_codes(d / "c.zarr")).attrs["calibration"]
    assert sorted(map(int, calibration["k"])) == list(CALIBRATED_K)
    assert (calibration["n"], calibration["codes"], calibration["queries"]) == (4000, 1000, TRIAL_QUERIES)
    assert all(t["scan"] > 0 and t["mih"] > 0 for t in calibration["k"].values())
    with mock.patch("dask_hashcodes.indexes.plan.CALIBRATED_MARGIN", 0.0):
        with Client(cluster) as client:
            with get_task_stream(client) as tasks:
                plain = workflows.search(d / "s.zarr", d / "m", d / "c.zarr", k=25)
            plain_keys = {str(task["key"]).split("-")[0] for task in tasks.data}
            with get_task_stream(client) as tasks:
                through = workflows.search(d / "s.zarr", d / "m", d / "c.zarr", k=25, index=d / "i.zarr")
            keys = {str(task["key"]).split("-")[0] for task in tasks.data}
            tables = dask_hashcodes.open_index(d / "i.zarr", dask_hashcodes.open_codes(d / "c.zarr"))
            assert start_early_trial(tables, np.arange(100), k=25) is None  # nothing submitted
        assert plain_keys == {"hamming"}  # the scan's tasks (hamming-topk...), no table read, no trial
        assert through.searched_by == SCAN and keys == plain_keys, (keys, plain_keys)
        for got, want in zip(through.results, plain.results, strict=True):
            np.testing.assert_array_equal(got, want)
        assert not workflows.may_search_by_tables(d / "i.zarr", k=25)
        assert kernels_to_warm("search", {"index": str(d / "i.zarr"), "k": 25}) == ()
        assert workflows.may_search_by_tables(d / "i.zarr", radius=3)  # radius searches keep their trial
    with _calibration_never_decides():
        assert kernels_to_warm("search", {"index": str(d / "i.zarr"), "k": 25}) == ("mih",)
    # 40 queries against 4,000 codes: the whole scan costs less than a trial would
    search = {"index": str(d / "i.zarr"), "k": 25, "dataset": str(d / "s.zarr"), "split": "default"}
    assert kernels_to_warm("search", search) == ()
    with mock.patch("dask_hashcodes.indexes.plan.TRIAL_SECONDS", 0.0):
        assert workflows.may_search_by_tables(d / "i.zarr", k=25, dataset=d / "s.zarr") == (
            calibrated_choice(
                dask_hashcodes.open_index(d / "i.zarr", dask_hashcodes.open_codes(d / "c.zarr")).attrs, 25
            )
            is None
        )
    # the depth the tables would search for: k, or a re-ranking's candidates
    with mock.patch("dask_hashcodes.workflows.calibrated_choice", return_value=None) as chosen:
        for search, depth in (({}, 100), ({"k": 10}, 10), ({"k": 10, "rerank": "exact"}, 300),
                              ({"k": 10, "rerank": "exact", "candidates": 50}, 50)):  # fmt: skip
            assert workflows.may_search_by_tables(d / "i.zarr", **search) and chosen.call_args.args[1] == depth
    # an inverted file never runs multi-index hashing; a missing index is the search's to report
    assert not workflows.may_search_by_tables(d / "v.zarr") and not workflows.may_search_by_tables(d / "none")


def test_the_calibrated_choice_needs_the_loss_at_the_depths_around_k_or_a_batch_too_small_for_a_trial():
    timed = {"1": (1.0, 0.1), "10": (1.0, 4.0), "100": (2.0, 4.0), "1000": (1.0, 5.0)}
    calibration = {
        "n": 1000,
        "codes": 100,
        "queries": 10,
        "k": {k: {"scan": s, "mih": m} for k, (s, m) in timed.items()},
    }
    attrs = {"calibration": calibration}

    def choice(k, n_queries=None):
        chosen = calibrated_choice(attrs, k, n_queries)
        return None if chosen is None else chosen[0]

    assert choice(1) is None  # the tables win there: a trial decides
    assert choice(10) == SCAN and "top-10 searches on one shard took 4 s" in calibrated_choice(attrs, 10)[1]
    assert choice(50) is None  # 4x at 10 but 2x at 100
    assert choice(100) is None
    assert choice(1000) == choice(5000) == SCAN
    assert choice(None) is None  # a radius search
    assert calibrated_choice({}, 100) is None  # an index built before calibration
    # the scan took 1 s per 1,000 query-code pairs at top-1 and top-10, 2 s at top-100: a query
    # against the index's 1,000 codes projects to a whole scan of 1 s or 2 s, more than a trial
    assert choice(1, n_queries=1) is None and choice(100, n_queries=1) is None
    with mock.patch("dask_hashcodes.indexes.plan.TRIAL_SECONDS", 1.5):
        assert choice(1, n_queries=1) == SCAN and "less than a trial" in calibrated_choice(attrs, 1, 1)[1]
        assert choice(50, n_queries=1) is None  # projected from the slower depth around k: 2 s at 100
        assert choice(1, n_queries=2) is None
    for damaged in (
        {"calibration": [1]},
        {"calibration": {**calibration, "k": {"10": "fast"}}},
        {"calibration": {**calibration, "k": {"x": {}}}},
    ):
        with pytest.raises(InputError, match="damaged calibration"):
            calibrated_choice(damaged, 10)


def test_one_paused_run_of_the_tables_early_look_does_not_give_them_up():
    """The early look times a few queries in tens of microseconds: one pause of the process
    during one of its runs (here 50 ms, the first timed one) must not project a loss."""
    import time

    runs = []

    def mih(queries, substrings):
        runs.append(len(queries))
        if len(runs) == 2:
            time.sleep(0.05)

    sample = np.zeros((TRIAL_QUERIES, 4), np.uint8)
    seconds, projected = _mih_seconds(mih, None, sample, scan_seconds=0.01, give_up=EARLY_MARGIN)
    assert not projected and seconds < 0.01, (seconds, runs)


def test_an_early_trial_samples_the_queries_of_the_first_chunks_holding_any():
    rows = np.array([950, 10, 420, 15, 2_500, 7, 11, 12, 13, 14, 16, 17, 3_100])
    # chunks 0, 4, 9 and 25 hold queries before chunk 31 does
    assert sorted(early_sample_rows(rows, chunk_rows=100)) == [7, 10, 11, 12, 13, 14, 15, 16, 17, 420, 950, 2_500]
    assert early_sample_rows(rows[:5], chunk_rows=100) is None  # too few queries there to time
    many = np.arange(0, 1_000_000, 7)
    sample = early_sample_rows(many, chunk_rows=100_000)
    assert len(sample) == TRIAL_QUERIES and sample.max() < 400_000  # at most four chunks read


def test_storage_is_an_explicit_immutable_context(monkeypatch):
    import dask_hashcodes.storage.location as location

    assert not hasattr(location, "set_storage_options")
    storage = Storage({"key": "k", "secret": "s3cr3t", "client_kwargs": {"region_name": "x"}})
    assert "s3cr3t" not in repr(storage) and storage == Storage(storage.options)
    with pytest.raises(AttributeError):
        storage.extra = 1
    options = storage.options
    options["key"] = "changed"
    assert storage.options["key"] == "k"
    assert pickle.loads(pickle.dumps(storage)) == storage
    # two stores in one process: each location keeps the options it was resolved with
    a = resolve("s3://bucket-a/x", storage=storage)
    b = resolve("s3://bucket-b/x", storage={"anon": True})
    assert a.options["secret"] == "s3cr3t" and b.options == {"anon": True}
    assert a.child("y").options == a.options and str(a) == "s3://bucket-a/x"
    monkeypatch.setenv("DHASH_STORAGE_OPTIONS", '{"anon": false}')
    assert resolve("s3://bucket-c/x").options == {"anon": False} == Storage.of(None).options
    assert Storage.of(storage) is storage
    with pytest.raises(InputError, match="must be a JSON object"):
        Storage(["anon"])
    monkeypatch.setenv("DHASH_STORAGE_OPTIONS", "{not json")
    with pytest.raises(InputError, match="is not JSON"):
        Storage.from_env()
    assert resolve("relative/path").is_local  # local paths never read the options
