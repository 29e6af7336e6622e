"""Search results as parquet: one row per (query, rank) — query_id, rank, id, hamming, and
with re-ranking the distance that ranked them (l2 or asymmetric)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dask_hashcodes.storage.atomic import SEAL_IN_FILE_METADATA, SEAL_JSON_KEY, SEAL_PLACEHOLDER, atomic_output

RESULTS_SCHEMA = "dhash.search-results/1"
RESULTS_KIND = "search-results"


def _write(path, table: pa.Table, meta: dict, overwrite: bool):
    # the file's checksum goes into the file's own metadata (filled in when the file is
    # complete), and the schema's says it is there: a copy rewritten by another program
    # keeps the schema's metadata but not the checksum, and is never replaced
    schema_meta = {b"dhash": json.dumps(meta).encode(), b"schema": RESULTS_SCHEMA.encode()}
    table = table.replace_schema_metadata({**schema_meta, SEAL_JSON_KEY.encode(): SEAL_IN_FILE_METADATA.encode()})
    with atomic_output(path, kind=RESULTS_KIND, overwrite=overwrite, file=True) as tmp:
        with tmp.open("wb") as f, pq.ParquetWriter(f, table.schema) as writer:
            writer.write_table(table)
            writer.add_key_value_metadata({SEAL_JSON_KEY: SEAL_PLACEHOLDER.decode()})


RERANK_COLUMNS = {"exact": "l2", "asymmetric": "asymmetric"}


def write_knn_results(
    path,
    query_ids: np.ndarray,
    distances: np.ndarray,
    ids: np.ndarray,
    *,
    rerank: tuple[str, int, np.ndarray] | None = None,
    overwrite=False,
):
    """Top-k results; rows with id -1 (fewer than k codes) are left out. ``rerank`` =
    (kind, candidates R, (m, k) distances): the rows are ranked by that distance, which gets
    its own column ("l2": squared Euclidean; "asymmetric") beside the Hamming distance."""
    valid, columns = _topk_columns(query_ids, ids)
    columns["hamming"] = distances[valid].astype(np.int32)
    meta = {"kind": "knn", "k": int(ids.shape[1])}
    if rerank is not None:
        kind, candidates, reranked = rerank
        columns[RERANK_COLUMNS[kind]] = reranked[valid].astype(np.float64)
        meta.update({"rerank": kind, "candidates": int(candidates)})
    _write(path, pa.table(columns), meta, overwrite)


def write_vector_results(path, query_ids: np.ndarray, distances: np.ndarray, ids: np.ndarray, *, overwrite=False):
    """Top-k results of a search over the vectors themselves (a residual index): ranked by
    the squared Euclidean distance in the ``l2`` column; there is no Hamming distance."""
    valid, columns = _topk_columns(query_ids, ids)
    columns["l2"] = distances[valid].astype(np.float64)
    _write(path, pa.table(columns), {"kind": "knn", "k": int(ids.shape[1]), "distance": "l2"}, overwrite)


def _topk_columns(query_ids, ids: np.ndarray) -> tuple[np.ndarray, dict]:
    """(which (query, rank) cells hold a result, the query_id, rank and id columns of those)."""
    m, k = ids.shape
    valid = ids >= 0
    return valid, {
        "query_id": np.repeat(np.asarray(query_ids, np.int64), k)[valid.ravel()],
        "rank": np.tile(np.arange(k, dtype=np.int32), m)[valid.ravel()],
        "id": ids[valid].astype(np.int64),
    }


def write_radius_results(path, query_ids, query_index, ids, distances, *, overwrite=False):
    query_index = np.asarray(query_index, np.int64)
    starts = np.searchsorted(query_index, query_index, side="left")
    table = pa.table(
        {
            "query_id": np.asarray(query_ids, np.int64)[query_index],
            "rank": (np.arange(len(query_index)) - starts).astype(np.int32),
            "id": np.asarray(ids, np.int64),
            "hamming": np.asarray(distances, np.int32),
        }
    )
    _write(path, table, {"kind": "radius"}, overwrite)
