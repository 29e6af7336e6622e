"""Hamming search through an inverted file (kernels.ivf) over chunked codes on the cluster.

``build_ivf`` learns the coarse quantiser in one of two spaces. "features": k-means on a
sample of the features the codes encode (Lloyd steps over the sample's chunks, only counts
and sums travelling: distributed.kmeans), in the top principal directions of that sample
where they hold most of its variance; a query probes the lists nearest its vector. "codes":
k-means on a sample of the codes themselves as +-1 vectors, the centroids then made binary
(FAISS's ``IndexBinaryIVF`` training: kernels.code_kmeans), which reads no feature; every row
is assigned by a popcount per centroid instead of a float distance, and a query probes the
lists whose centroid codes are nearest its code.
Then one ``ivf-build`` task per codes chunk assigns the chunk's rows to their nearest
centroid and writes the chunk's list layout (storage.ivf_index). ``ivf_knn_lazy`` finds each
query's ``nprobe`` nearest centroids in one task on a worker (small), sends them to one
``ivf-topk`` task per shard, which ranks only the probed lists' codes, and merges the
shards' results as the linear scan does: the answer is exactly the Hamming top-k over the
rows of the probed lists, ties by id, whatever the chunking and the number of workers.
"""

from __future__ import annotations

import dask
import numpy as np
from dask import delayed
from dask.base import tokenize

from dask_hashcodes.distributed.graph import chunk_reads, map_chunks, map_reduce, select_rows, tree_reduce, write_shards
from dask_hashcodes.distributed.kmeans import kmeans
from dask_hashcodes.distributed.progress import active_client
from dask_hashcodes.distributed.resident import held_blocks, kept_on_workers, resident, worker_slots
from dask_hashcodes.errors import InputError, shape_words
from dask_hashcodes.indexes.hamming import check_query_codes
from dask_hashcodes.kernels.code_kmeans import binary_centres, code_signs, nearest_code_centres
from dask_hashcodes.kernels.ivf import (
    Projection,
    list_layout,
    principal_dims,
    probed_code_lists,
    probed_lists,
    search_lists,
    search_lists_exact,
)
from dask_hashcodes.kernels.kmeans import nearest_centres
from dask_hashcodes.kernels.stats import chunk_moments, combine_moments, covariance, top_eigenvectors
from dask_hashcodes.kernels.topk import topk_merger
from dask_hashcodes.storage.chunkread import write_rows
from dask_hashcodes.storage.codes import open_codes
from dask_hashcodes.storage.ivf_index import create_ivf_arrays, ivf_output
from dask_hashcodes.storage.location import resolve
from dask_hashcodes.validation import check_finite_block, check_k

# Defaults chosen on the validation queries of the recall benchmark (sift-synth): among
# the settings tried (1, 2 and 4 sqrt(n) lists; 1 to 64 probes; 100 to 1000 candidates),
# the fastest whose recall@10 of the exact neighbours, after exact re-ranking, reached 0.9
# for each of 64- and 128-bit ITQ and DisH codes. 4 sqrt(n) lists is also FAISS's guideline (4 to 16 sqrt(n)).
LISTS_PER_ROOT_N = 4
KMEANS_STEPS = 10
# k-means learns the centroids from at most this many rows per list (FAISS's
# max_points_per_centroid): more rows barely move them, while each Lloyd step costs a pass
# over every training row against every centroid. 64 or 128 rows per list lost 0.01 to 0.03
# of recall at nprobe 1 to 4 on validation queries of sift-synth
KMEANS_ROWS_PER_LIST = 256
# The quantiser's default subspace: the fewest principal directions of the k-means sample
# holding this share of its variance (chosen on validation queries: see ivf_quantiser)
QUANTISER_VARIANCE_SHARE = 0.9
DEFAULT_NPROBE = 4
# the spaces a coarse quantiser can live in: the features the codes encode, or the codes
QUANTISERS = ("features", "codes")
# Rows one ivf-topk task searches: a task merges the lists of its shards into one layout, so
# a query's cost per task (finding its probed lists, its top-k buffers) is paid once per
# about a million rows rather than once per codes chunk (a chunk is often 128k rows)
SEARCH_TASK_ROWS = 1 << 20
# Rows per chunk of the k-means sample as the workers keep it (a Lloyd step's task)
TRAINING_CHUNK_ROWS = 1 << 18
# The most rows one resident block holds: merging a block's shards into one layout takes about
# 40 bytes per row of a worker's memory while it runs
RESIDENT_BLOCK_MAX_ROWS = 1 << 24


def default_lists(n: int) -> int:
    return max(1, min(n, int(round(LISTS_PER_ROOT_N * np.sqrt(n)))))


def build_ivf(
    codes,
    features,
    out,
    *,
    quantiser: str = "features",
    n_lists: int | None = None,
    kmeans_steps: int = KMEANS_STEPS,
    kmeans_rows: int | None = None,
    quantiser_dims: int | None = None,
    seed: int = 0,
    overwrite: bool = False,
    progress=None,
    storage=None,
):
    """Write the inverted file of a codes store (a Codes handle or its location) at ``out``
    (atomically). ``quantiser="features"``: its lists given by k-means on ``features`` (a
    dask array of the rows the codes encode, in the same order), learned from ``kmeans_rows``
    rows drawn with ``seed`` (default: KMEANS_ROWS_PER_LIST per list, every row when there
    are fewer), in ``quantiser_dims`` principal directions of those rows (see
    ``ivf_quantiser``). ``quantiser="codes"``: by k-means on ``kmeans_rows`` of the codes
    as +-1 vectors, the centroids made binary (``features`` unused: None). Every row is then
    assigned to its nearest centroid. Returns (index location, n_lists, the dims the
    centroids live in: the code bits for "codes")."""
    codes = open_codes(codes, storage=storage)
    reader = codes.reader
    if quantiser not in QUANTISERS:
        raise InputError(f"`quantiser` must be one of {', '.join(QUANTISERS)}; got {quantiser!r}")
    if quantiser == "features" and features is None:
        raise InputError(
            f"an inverted file on the features needs the {reader.shape[0]} feature rows the codes at {codes.path} "
            f"encode; give them, or build the lists from the codes alone (`quantiser='codes'`)"
        )
    if quantiser == "features" and (features.ndim != 2 or features.shape[0] != reader.shape[0]):
        raise InputError(
            f"the features ({shape_words(features.shape)}) are not the {reader.shape[0]} rows the codes at "
            f"{codes.path} encode; give the dataset the codes were encoded from, or build the lists from the codes "
            f"alone (`quantiser='codes'`)"
        )
    if quantiser == "codes" and quantiser_dims is not None:
        raise InputError("`quantiser_dims` picks principal directions of the features; it does not apply to "
                         "`quantiser='codes'`: leave it unset")  # fmt: skip
    n_lists = default_lists(reader.shape[0]) if n_lists is None else int(n_lists)
    if not 1 <= n_lists <= reader.shape[0]:
        raise InputError(f"`n_lists` must lie in [1, {reader.shape[0]}] (the number of codes); got {n_lists}")
    if quantiser == "codes":
        rows = codes.dask()
        centroids = code_quantiser(rows, n_lists, kmeans_rows=kmeans_rows, kmeans_steps=kmeans_steps, seed=seed)
        projection = None
    else:
        centroids, projection = ivf_quantiser(
            features, n_lists, kmeans_rows=kmeans_rows, kmeans_steps=kmeans_steps, dims=quantiser_dims, seed=seed
        )
        # one feature chunk per codes chunk, so that each task holds the rows of one shard
        rows = features.rechunk((reader.chunk_rows, features.shape[1]))
    out = resolve(out, storage=storage)
    with ivf_output(out, overwrite) as tmp:
        create_ivf_arrays(tmp, codes=codes, centroids=centroids, projection=projection, quantiser=quantiser)
        write_shards(
            "ivf-build", _build_shard_into, rows, reader.shape[0], progress,
            centroids=centroids, projection=projection, quantiser=quantiser, chunk_rows=reader.chunk_rows, target=tmp,
        )  # fmt: skip
    return out, n_lists, 8 * reader.shape[1] if quantiser == "codes" else centroids.shape[1]


def _sample_size(kmeans_rows, n: int, n_lists: int) -> int:
    """The k-means sample's row count (default KMEANS_ROWS_PER_LIST per list), checked."""
    kmeans_rows = min(n, KMEANS_ROWS_PER_LIST * n_lists) if kmeans_rows is None else kmeans_rows
    if isinstance(kmeans_rows, bool) or not isinstance(kmeans_rows, (int, np.integer)):
        raise InputError(f"`kmeans_rows` must be an int; got {kmeans_rows!r}")
    if not n_lists <= kmeans_rows <= n:
        raise InputError(
            f"`kmeans_rows` must lie in [{n_lists}, {n}] (the lists, the rows): k-means starts from that many "
            f"distinct rows; got {kmeans_rows}"
        )
    return int(kmeans_rows)


def _training_rows(rows, kmeans_rows: int, rng):
    """The sample k-means learns from: ``kmeans_rows`` rows of the dask array ``rows`` drawn with
    ``rng`` (all of them when that is every row), in chunks of TRAINING_CHUNK_ROWS sample rows
    whatever the stored chunking: a Lloyd step then runs a few long tasks, each paying its
    setup (the centroids' layout, its score buffers) once, and its float sums fall the same
    way for any store."""
    n = rows.shape[0]
    if kmeans_rows < n:
        rows = select_rows(rows, np.sort(rng.choice(n, kmeans_rows, replace=False)), keep=True)
    return rows.rechunk((TRAINING_CHUNK_ROWS, rows.shape[1]))


def code_quantiser(codes, n_lists: int, *, kmeans_rows: int | None = None, kmeans_steps: int = KMEANS_STEPS, seed=0):
    """The coarse quantiser in code space: (n_lists, code bytes) uint8 centroid codes, k-means
    of ``kmeans_rows`` rows of ``codes`` (a dask array of packed codes) drawn with ``seed``
    (default KMEANS_ROWS_PER_LIST per list) as +-1 vectors, each centroid then made binary
    by its signs. The workers keep the packed sample; each step expands a slab at a time."""
    kmeans_rows = _sample_size(kmeans_rows, codes.shape[0], n_lists)
    rng = np.random.default_rng(seed)
    training = _training_rows(codes, kmeans_rows, rng)
    return binary_centres(kmeans(training, n_lists, kmeans_steps, rng, "ivf", transform=code_signs)[0])


def ivf_quantiser(
    features, n_lists: int, *, kmeans_rows: int | None = None, kmeans_steps: int = KMEANS_STEPS, dims=None, seed=0
) -> tuple[np.ndarray, Projection | None]:
    """The coarse quantiser: (k-means centroids (n_lists, dims), the Projection they live in,
    or None for the features' own space) of ``kmeans_rows`` rows of ``features`` (a dask
    array) drawn with ``seed`` (default KMEANS_ROWS_PER_LIST per list).

    ``dims``: the principal directions of those rows the quantiser works in; the features'
    own count (or more) keeps their space. Default: the fewest directions holding
    QUANTISER_VARIANCE_SHARE of the rows' variance, where that makes the assignment (a
    projection to dims, then n_lists distances in dims) cheaper than n_lists distances in d."""
    n, d = features.shape
    kmeans_rows = _sample_size(kmeans_rows, n, n_lists)
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, (int, np.integer)) or dims < 1):
        raise InputError(f"`quantiser_dims` must be a positive int (or None for the default); got {dims!r}")
    rng = np.random.default_rng(seed)
    training = _training_rows(features, kmeans_rows, rng)
    # the covariance pass and every Lloyd step read the sample: held on the workers once, as
    # stored (the steps project it slab by slab)
    training = kept_on_workers(training, "ivf k-means sample")
    mean, cov = covariance(dask.compute(map_reduce("ivf-covariance", chunk_moments, combine_moments,
                                                   chunk_reads(training)))[0])  # fmt: skip
    if not np.isfinite(cov).all():
        raise InputError(
            "the features hold NaN or infinite values, which k-means cannot place; clean or drop those rows "
            "before building an inverted file"
        )
    variances, directions = top_eigenvectors(cov, d)  # signs fixed as PCA's: the same from any chunking
    if dims is None:
        dims = principal_dims(variances, QUANTISER_VARIANCE_SHARE)
        dims = dims if dims * (d + n_lists) < d * n_lists else d
    projection = Projection(mean, directions[:, : int(dims)]) if dims < d else None
    return kmeans(training, n_lists, kmeans_steps, rng, "ivf", transform=projection)[0], projection


def _build_shard_into(block, shard, *, centroids, projection, quantiser, chunk_rows, target):
    """One task: the lists of one chunk's rows (its features, or its codes for a code-space
    quantiser), written as its rows of ``order`` and its row of ``offsets`` (positions inside
    the chunk: int32)."""
    start = shard * chunk_rows
    if quantiser == "codes":
        nearest = nearest_code_centres(block, centroids)
    else:
        check_finite_block(block, start)  # a NaN row has no nearest centroid: an error, never list 0
        nearest = nearest_centres(block, centroids, transform=projection)
    order, offsets = list_layout(nearest, len(centroids))
    write_rows(target.child("order"), slice(start, start + len(block)), order.astype(np.int32))
    write_rows(target.child("offsets"), shard, offsets.astype(np.int32))
    return len(block)


def merged_lists(readers, n_lists: int, shards, excluded_rows=()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(list codes, list ids int64, offsets): the rows of the given ``shards`` of a stored
    inverted file (``readers``: its codes, order and offsets readers) in one list layout,
    every list ascending by id, the sorted row numbers ``excluded_rows`` left out."""
    codes_reader, order_reader, offsets_reader = readers
    codes, ids, list_of = [], [], []
    for shard in shards:
        order = order_reader(shard).astype(np.int64)
        offsets = offsets_reader(shard)[0].astype(np.int64)
        codes.append(_take_rows(codes_reader(shard), order))
        ids.append(shard * codes_reader.chunk_rows + order)
        list_of.append(np.repeat(np.arange(n_lists, dtype=np.int64), np.diff(offsets)))
    if not codes:
        return np.empty((0, codes_reader.shape[1]), np.uint8), np.empty(0, np.int64), np.zeros(n_lists + 1, np.int64)
    codes, ids, list_of = np.concatenate(codes), np.concatenate(ids), np.concatenate(list_of)
    if len(excluded_rows):
        kept = ~np.isin(ids, excluded_rows)
        codes, ids, list_of = codes[kept], ids[kept], list_of[kept]
    # shards in order, ascending ids inside each shard's lists: a stable sort by list keeps
    # every list ascending by id, the layout the kernels want (a radix sort when the list
    # numbers fit 16 bits)
    keys = list_of.astype(np.uint16) if n_lists <= 1 << 16 else list_of
    regroup = np.argsort(keys, kind="stable")
    return _take_rows(codes, regroup), ids[regroup], np.searchsorted(list_of[regroup], np.arange(n_lists + 1))


def _take_rows(codes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """codes[rows] for packed (n, bytes) codes, each row moved as one item (several times
    faster than numpy's gather of a 2-D uint8 array)."""
    width = codes.shape[1]
    items = np.ascontiguousarray(codes).view(np.dtype((np.void, width))).reshape(-1)
    return items[rows].view(np.uint8).reshape(len(rows), width)


def _stored_topk(shards, excluded, *, readers, n_lists, queries, probes, k):
    """One task: the top-k of the probed lists of a run of shards, merged into one layout
    first so that each query visits each probed list once per task, not once per shard."""
    list_codes, list_ids, offsets = merged_lists(readers, n_lists, shards, excluded)
    return search_lists(queries, probes, list_codes, list_ids, offsets, k)


def _merged_block(shards, excluded, *, readers, n_lists):
    """One task: a run of shards' lists in one layout, ids in 32 bits where they fit: the
    block a worker keeps between batches (resident_lists)."""
    list_codes, list_ids, offsets = merged_lists(readers, n_lists, shards, excluded)
    narrow = len(list_ids) == 0 or list_ids.max() < 2**31
    return list_codes, list_ids.astype(np.int32 if narrow else np.int64), offsets


def _resident_topk(block, *, queries, probes, k):
    """One task, on the worker holding ``block``: the top-k of its probed lists."""
    return search_lists(queries, probes, *block, k)


def resident_lists(lists, excluded_rows=(), rows_per_task: int | None = None, *, create: bool = True):
    """The lists of a stored inverted file (StoredLists), ``excluded_rows`` left out, read and
    merged once into blocks held on the workers (distributed.resident), keyed by the index's
    content: every later batch against the same index and exclusion searches them without
    reading storage. The blocks hold about ``rows_per_task`` rows each; by default one block
    per worker thread (``resident_block_chunks``), placed one per thread. None without a
    distributed client, or when they would not fit the workers' memory budget; with
    ``create=False``, None unless they are held already."""
    codes_reader = lists.codes.reader
    excluded_rows = np.unique(np.asarray(excluded_rows, dtype=np.int64))
    # the default layout is keyed as such, not by the block size it resolved to: a cluster
    # that grows later finds the blocks it holds instead of reading a second copy
    layout = "per-thread" if rows_per_task is None else rows_per_task
    content = tokenize(lists.location.url, lists.order.opened, lists.codes.content_id, excluded_rows, layout)
    if not create:
        return held_blocks("ivf-lists", content)
    client = active_client()
    if client is None:
        return None
    if rows_per_task is None:
        threads = len(worker_slots(client))
        rows_per_task = codes_reader.chunk_rows * resident_block_chunks(
            codes_reader.n_chunks, codes_reader.chunk_rows, threads
        )
    runs = shard_runs(codes_reader, excluded_rows, rows_per_task)
    blocks = map_chunks("ivf-lists", _merged_block, runs, readers=(codes_reader, lists.order, lists.offsets),
                        n_lists=lists.n_lists, salt=content)  # fmt: skip
    rows = codes_reader.shape[0] - len(excluded_rows)
    nbytes = rows * (codes_reader.shape[1] + 4) + len(runs) * 8 * (lists.n_lists + 1)
    return resident("ivf-lists", content, blocks, nbytes, client=client)


def resident_block_chunks(n_chunks: int, chunk_rows: int, threads: int) -> int:
    """Codes chunks per resident block: the fewest blocks that give every worker thread the
    same number of blocks, each of at most RESIDENT_BLOCK_MAX_ROWS rows. A batch pays a fixed
    cost per block (grouping its queries by list, sorting and sending its top-k), so fewer,
    larger blocks answer faster than the million-row runs a cold batch reads; the cap bounds
    the memory a worker needs to merge one block's shards."""
    threads = max(1, int(threads))
    most = max(1, RESIDENT_BLOCK_MAX_ROWS // max(1, chunk_rows))
    blocks = threads * -(-n_chunks // (threads * most))
    return max(1, -(-n_chunks // blocks))


def shard_runs(codes_reader, excluded_rows, rows_per_task: int) -> list[tuple]:
    """Per task: (consecutive shards holding about ``rows_per_task`` rows, the excluded row
    numbers among them)."""
    excluded_rows = np.sort(np.asarray(excluded_rows, dtype=np.int64))
    per_task = max(1, rows_per_task // codes_reader.chunk_rows)
    runs = []
    for first in range(0, codes_reader.n_chunks, per_task):
        shards = list(range(first, min(first + per_task, codes_reader.n_chunks)))
        lo, hi = np.searchsorted(
            excluded_rows, [first * codes_reader.chunk_rows, (shards[-1] + 1) * codes_reader.chunk_rows]
        )
        runs.append((shards, excluded_rows[lo:hi]))
    return runs


def check_nprobe(nprobe, n_lists: int, location) -> int:
    if isinstance(nprobe, bool) or not isinstance(nprobe, (int, np.integer)) or not 1 <= nprobe <= n_lists:
        raise InputError(
            f"`nprobe` must be an int in [1, {n_lists}] (the lists of the inverted file at {location}); got {nprobe!r}"
        )
    return int(nprobe)


def check_query_vectors(query_vectors, d: int, location) -> np.ndarray:
    """The query vectors as float64, refused unless (nq, d) and finite."""
    query_vectors = np.asarray(query_vectors, dtype=np.float64)
    if query_vectors.ndim != 2:
        raise InputError(
            f"query vectors must be a 2-D array, one row per query; got {shape_words(query_vectors.shape)}"
        )
    if query_vectors.shape[1] != d:
        raise InputError(
            f"query vectors have {query_vectors.shape[1]} features but the inverted file at {location} was built on "
            f"{d}; give {d}-feature vectors"
        )
    if not np.isfinite(query_vectors).all():
        raise InputError("query vectors hold NaN or infinite values; the lists nearest them are undefined")
    return query_vectors


def ivf_knn_lazy(
    query_codes,
    query_vectors,
    lists,
    k: int,
    nprobe: int,
    excluded_rows=(),
    rows_per_task: int | None = None,
    *,
    warm: bool = False,
):
    """Delayed (distances, ids = row numbers) of the Hamming top-k of ``query_codes`` among the
    rows of each query's ``nprobe`` nearest lists (found from ``query_vectors``, or from the
    query codes when the quantiser lives in code space: the vectors may then be None) of a stored
    inverted file (the StoredLists of storage.ivf_index.open_ivf), ``excluded_rows`` left out.
    One ``ivf-topk`` task per run of shards holding about ``rows_per_task`` rows (default
    SEARCH_TASK_ROWS). ``warm``: search the lists held on the workers (``resident_lists``:
    read and merged by the first warm batch, reused by the next; by default one block per
    worker thread), where they fit."""
    k = check_k(k)
    nprobe = check_nprobe(nprobe, lists.n_lists, lists.location)
    codes_reader = lists.codes.reader
    queries = check_query_codes(query_codes, codes_reader[:0])
    if lists.quantiser == "codes":
        if queries.ndim != 2:
            raise InputError("an inverted file in code space probes by each query's one code; DisH1's per-node "
                             "query codes have none: build its lists on the features (`quantiser='features'`)")  # fmt: skip
        probe, by, quantiser = probed_code_lists, queries, (lists.centroids, nprobe)
    else:
        query_vectors = check_query_vectors(query_vectors, lists.d, lists.location)
        if len(query_vectors) != len(query_codes):
            raise InputError(f"{len(query_vectors)} query vectors for {len(query_codes)} query codes")
        probe, by, quantiser = probed_lists, query_vectors, (lists.centroids, nprobe, lists.projection)
    # one task finds the probes on a worker, whose kernels are loaded already: the client
    # would pay the first compiled kernel's start-up for it; only the small probes travel
    # on. The vectors (or codes) go to the cluster once, by themselves, not inside the graph
    client = active_client()
    # (under a key of their own: scattering equal data twice under one content key lets the
    # release of the first copy take the second with it)
    by = by if client is None else client.scatter(by, hash=False)
    probes = delayed(probe, pure=True)(by, *quantiser, dask_key_name=f"ivf-probes-{tokenize(by, *quantiser)}")
    held = resident_lists(lists, excluded_rows, rows_per_task) if warm else None
    if held is not None:
        # fetched first: a warm task's only input on a worker must be the block it holds, or the
        # scheduler may copy a block to where the probes are
        probes = dask.compute(probes)[0]
        parts = map_chunks("ivf-warm-topk", _resident_topk, held.futures, queries=queries, probes=probes, k=k)
        return tree_reduce("ivf-topk-merge", parts, topk_merger(k))
    parts = map_chunks(
        "ivf-topk",
        _stored_topk,
        shard_runs(codes_reader, excluded_rows, SEARCH_TASK_ROWS if rows_per_task is None else rows_per_task),
        readers=(codes_reader, lists.order, lists.offsets),
        n_lists=lists.n_lists,
        queries=queries,
        probes=probes,
        k=k,
    )
    return tree_reduce("ivf-topk-merge", parts, topk_merger(k))


class InvertedLists:
    """An inverted file's lists held in this process's memory, searched on the calling thread:
    the ``centroids`` (n_lists, dims) in the quantiser's space (``projection``: a Projection,
    or None for the features' own), every indexed row's code in one list-ordered layout
    (``list_codes``), its id (``list_ids``, 4 bytes below 2**31 rows) and where each list
    starts (``offsets``, n_lists + 1). ``location``: the stored inverted file they were
    loaded from, named in messages (None: built in memory). ``quantiser="codes"``: the
    centroids are uint8 centroid codes, probed by the query codes."""

    def __init__(self, centroids, list_codes, list_ids, offsets, *, projection=None, location=None,
                 quantiser: str = "features"):  # fmt: skip
        self.quantiser = quantiser
        dtype = np.uint8 if quantiser == "codes" else np.float32
        self.centroids = np.ascontiguousarray(centroids, dtype=dtype)
        self.projection = projection
        self.list_codes = np.ascontiguousarray(list_codes, dtype=np.uint8)
        self.list_ids = np.ascontiguousarray(list_ids)
        self.offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        self.location = location

    @classmethod
    def load(cls, lists, exclude=None) -> InvertedLists:
        """The lists of a stored inverted file (the StoredLists of ``open_ivf``) and its codes,
        every shard regrouped into one layout, the rows ``exclude`` left out."""
        reader = lists.codes.reader
        excluded = np.empty(0, np.int64) if exclude is None else np.unique(np.asarray(exclude, dtype=np.int64))
        readers = (reader, lists.order, lists.offsets)
        list_codes, ids, offsets = merged_lists(readers, lists.n_lists, range(reader.n_chunks), excluded)
        id_type = np.int32 if reader.shape[0] < 2**31 else np.int64
        return cls(lists.centroids, list_codes, ids.astype(id_type), offsets, projection=lists.projection,
                   location=lists.location, quantiser=lists.quantiser)  # fmt: skip

    @classmethod
    def assigned(cls, centroids, codes, ids, assignment, projection=None) -> InvertedLists:
        """The lists of rows whose ``codes`` and ``ids`` are given, each row in the list
        ``assignment`` names (its nearest centroid in the space of ``projection``)."""
        order, offsets = list_layout(assignment, len(centroids))
        return cls(centroids, np.asarray(codes)[order], np.asarray(ids)[order], offsets, projection=projection)

    @property
    def n_lists(self) -> int:
        return len(self.centroids)

    @property
    def ntotal(self) -> int:
        return len(self.list_ids)

    @property
    def code_size(self) -> int:
        return int(self.list_codes.shape[1])

    @property
    def d(self) -> int:
        """Features per query vector (0: a code-space quantiser uses none)."""
        if self.quantiser == "codes":
            return 0
        return self.centroids.shape[1] if self.projection is None else self.projection.d

    @property
    def nbytes(self) -> int:
        quantiser = self.centroids.nbytes
        if self.projection is not None:
            quantiser += self.projection.mean.nbytes + self.projection.components.nbytes
        return self.list_codes.nbytes + self.list_ids.nbytes + self.offsets.nbytes + quantiser

    def probes(self, query_vectors, nprobe: int, query_codes=None) -> np.ndarray:
        """Each query's ``nprobe`` nearest lists, the vectors (the codes, for a code-space
        quantiser) and nprobe checked."""
        nprobe = check_nprobe(nprobe, self.n_lists, self.location)
        if self.quantiser == "codes":
            return probed_code_lists(check_query_codes(query_codes, self.list_codes[:0]), self.centroids, nprobe)
        vectors = check_query_vectors(query_vectors, self.d, self.location)
        return probed_lists(vectors, self.centroids, nprobe, self.projection)

    def search(self, query_codes, query_vectors, k: int, nprobe: int):
        """(D int32, I int64) of the Hamming top ``k`` among each query's ``nprobe`` lists."""
        probes = self.probes(query_vectors, nprobe, query_codes)
        return search_lists(query_codes, probes, self.list_codes, self.list_ids, self.offsets, int(k))

    def search_exact(self, query_codes, query_vectors, vectors, k: int, nprobe: int, candidates: int):
        """(D float64, I int64): the Hamming top ``candidates`` of each query's ``nprobe`` lists
        re-ranked by exact squared L2 to the rows of ``vectors`` (in memory or memory-mapped)
        in the same compiled loop, which reads only the candidates' rows."""
        probes = self.probes(query_vectors, nprobe, query_codes)
        query_vectors = np.asarray(query_vectors, dtype=np.float64)
        return search_lists_exact(query_codes, query_vectors, probes, self.list_codes, self.list_ids, self.offsets,
                                  vectors, self.list_ids, int(candidates), int(k))  # fmt: skip
