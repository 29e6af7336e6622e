"""Encoding into a codes store: the Dask side of ``dhash encode`` (the layout and the
checks live in storage/codes.py)."""

from __future__ import annotations

import dask.array as da
import numpy as np
from dask import delayed

from dask_hashcodes.distributed.graph import chunk_reads, map_chunks, row_bounds, tree_reduce
from dask_hashcodes.kernels.stats import add
from dask_hashcodes.storage.chunkread import write_rows
from dask_hashcodes.storage.codes import codes_output, create_codes_array, regular_rows
from dask_hashcodes.storage.location import resolve


def write_codes(path, codes, model, *, dataset=None, overwrite: bool = False, progress=None):
    """Compute a lazy dask array of codes chunk by chunk into a new zarr array, atomically."""
    chunk_rows = max(max(codes.chunks[0]), 1)
    if not regular_rows(codes.chunks[0]):
        # irregular chunks (e.g. after dropping query rows) would make two tasks write the
        # same zarr chunk concurrently (lock=False): lost rows. Align them with the array's.
        codes = codes.rechunk({0: chunk_rows})
    with codes_output(path, overwrite) as tmp:
        create_codes_array(tmp, codes.shape[0], chunk_rows, model, dataset)
        # one task per block, each block exactly one zarr chunk: written through write_rows,
        # so a task still running after the job failed never brings the temporary back
        starts = row_bounds(codes)[:-1].tolist()
        parts = [
            delayed(_store_rows, pure=True)(
                block, start, target=tmp.child("codes"), dask_key_name=f"codes-store-{i}-{codes.name}"
            )
            for i, (block, start) in enumerate(zip(codes.to_delayed().ravel().tolist(), starts))
        ]
        done = tree_reduce(f"{model.method}-codes-rows", parts, add)
        written = progress(done) if progress is not None else done.compute()
        if written is not None and written != codes.shape[0]:
            raise RuntimeError(f"stored {written} rows of codes, expected {codes.shape[0]}")
    return resolve(path)


def _store_rows(block, start, *, target):
    """One task: rows [start, start + len(block)) of the codes array (one zarr chunk)."""
    write_rows(target, slice(start, start + block.shape[0]), block)
    return block.shape[0]


def _encode_chunk_into(block, start, *, model, target):
    """One task: encode a feature chunk and write its rows of the codes array."""
    write_rows(target, slice(start, start + block.shape[0]), model._encode_block(block))
    return block.shape[0]


def encode_to_zarr(path, X, model, *, dataset=None, overwrite: bool = False, progress=None):
    """Encode features ``X`` (dask) into a new codes array, atomically. One task per feature
    chunk reads the chunk, encodes it and writes its own codes chunk, so no feature chunk
    or code block is ever a separate task result, stored and released between two tasks:
    encoding then costs little more than one plain pass that reads and projects the features.
    Irregular row chunks (where two tasks could share a codes chunk) are re-cut first (write_codes).
    ``dataset``: the Dataset the features come from (its location and content id are recorded)."""
    X = model._check_encode_input(X)
    rows = X.chunks[0]
    if not regular_rows(rows):
        return write_codes(path, model.encode(X), model, dataset=dataset, overwrite=overwrite, progress=progress)
    with codes_output(path, overwrite) as tmp:
        create_codes_array(tmp, X.shape[0], rows[0], model, dataset)
        parts = map_chunks(
            f"{model.method}-encode",
            _encode_chunk_into,
            list(zip(chunk_reads(X), row_bounds(X)[:-1].tolist())),
            model=delayed(model, pure=True, traverse=False),
            target=tmp.child("codes"),
        )
        done = tree_reduce(f"{model.method}-encode-rows", parts, add)
        written = progress(done) if progress is not None else done.compute()
        if written is not None and written != X.shape[0]:
            raise RuntimeError(f"encoded {written} rows, expected {X.shape[0]}")
    return resolve(path)


def _insert_rows(db_block, query_positions, query_codes):
    """One chunk of all rows' codes: the database rows' codes with the query rows' codes put
    back at their positions (relative to the chunk)."""
    out = np.empty((len(db_block) + len(query_positions), db_block.shape[1]), dtype=np.uint8)
    is_query = np.zeros(len(out), dtype=bool)
    is_query[query_positions] = True
    out[is_query], out[~is_query] = query_codes, db_block
    return out


def all_rows_codes(model, features, query_rows: np.ndarray):
    """Codes of every row of ``features`` for a model that learned its training rows' codes
    (``database_codes_``: the rows other than ``query_rows``): those codes where learned, the
    model's own encoding for the query rows. Chunked like ``features``."""
    query_rows = np.sort(np.asarray(query_rows, dtype=np.int64))
    bounds = row_bounds(features)
    before = np.searchsorted(query_rows, bounds)  # query rows before each chunk bound
    db = model.database_codes_.rechunk((tuple(np.diff(bounds - before).tolist()), model.code_size))
    query_codes = model.encode(np.asarray(features[query_rows].compute())) if len(query_rows) else None
    blocks = []
    for i, block in enumerate(db.to_delayed().ravel()):
        a, b = int(before[i]), int(before[i + 1])
        positions = query_rows[a:b] - bounds[i]
        codes = query_codes[a:b] if query_codes is not None else np.empty((0, model.code_size), np.uint8)
        blocks.append(
            da.from_delayed(
                delayed(_insert_rows, pure=True)(block, positions, codes),
                shape=(int(bounds[i + 1] - bounds[i]), model.code_size),
                dtype=np.uint8,
            )
        )
    return da.concatenate(blocks)
