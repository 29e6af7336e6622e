"""Codes on disk: zarr v3 array (n, ceil(n_bits/8)) uint8, row-aligned with the dataset.

attrs: schema, model_id, method, n_bits, bit_order ("little": FAISS's binary layout),
dataset path. Search refuses codes whose model_id differs from the model it is given.
"""
from __future__ import annotations

from pathlib import Path

import zarr

from pipeline.errors import InputError
from pipeline.kernels.codes import BIT_ORDER
from pipeline.storage.atomic import atomic_path

CODES_SCHEMA = "dhash.codes/1"


def _regular_rows(rows: tuple) -> bool:
    """Row chunks that map one-to-one onto zarr chunks: all equal, the last one no larger."""
    return all(r == rows[0] for r in rows[:-1]) and rows[-1] <= rows[0]


def write_codes(path, codes, model, *, dataset_path: str = "", overwrite: bool = False, progress=None) -> Path:
    """Compute a lazy dask array of codes chunk by chunk into a new zarr array, atomically."""
    import dask.array as da
    chunk_rows = max(max(codes.chunks[0]), 1)
    if not _regular_rows(codes.chunks[0]):
        # irregular chunks (e.g. after dropping query rows) would make two tasks write the
        # same zarr chunk concurrently (lock=False): lost rows. Align them with the array's.
        codes = codes.rechunk({0: chunk_rows})
    with atomic_path(path, overwrite=overwrite) as tmp:
        arr = _create_codes_array(tmp, codes.shape[0], chunk_rows, model, dataset_path)
        stored = da.store(codes, arr, lock=False, compute=False)
        if progress is not None:
            progress(stored)
        else:
            stored.compute()
    return Path(path)


def _create_codes_array(tmp, n: int, chunk_rows: int, model, dataset_path: str):
    arr = zarr.create_array(str(tmp), shape=(n, model.code_bytes), chunks=(chunk_rows, model.code_bytes),
                            dtype="uint8", zarr_format=3)
    arr.attrs.update({"schema": CODES_SCHEMA, "model_id": model.model_id, "method": model.method,
                      "n_bits": int(model.n_bits), "bit_order": BIT_ORDER, "dataset": str(dataset_path)})
    return arr


def _encode_chunk_into(block, start, *, model, target):
    """One task: encode a feature chunk and write its rows of the codes array."""
    target[start:start + block.shape[0]] = model._encode_block(block)
    return block.shape[0]


def _add(a, b):
    return a + b


def encode_to_zarr(path, X, model, *, dataset_path: str = "", overwrite: bool = False, progress=None) -> Path:
    """Encode features ``X`` (dask) into a new codes array, atomically. One task per feature
    chunk reads the chunk, encodes it and writes its own codes chunk, so no feature chunk
    or code block is ever a separate task result (measured 1.43x -> see benchmarks/README.md).
    Irregular row chunks (where two tasks could share a codes chunk) go through da.store."""
    from dask import delayed

    from pipeline.distributed.graph import chunk_reads, map_chunks, row_bounds, tree_reduce
    X = model._check_encode_input(X)
    rows = X.chunks[0]
    if not _regular_rows(rows):
        return write_codes(path, model.encode(X), model, dataset_path=dataset_path, overwrite=overwrite,
                           progress=progress)
    with atomic_path(path, overwrite=overwrite) as tmp:
        arr = _create_codes_array(tmp, X.shape[0], rows[0], model, dataset_path)
        parts = map_chunks(f"{model.method}-encode", _encode_chunk_into, list(zip(chunk_reads(X), row_bounds(X)[:-1].tolist())),
                           model=delayed(model, pure=True, traverse=False), target=arr)
        done = tree_reduce(f"{model.method}-encode-rows", parts, _add)
        written = progress(done) if progress is not None else done.compute()
        if written is not None and written != X.shape[0]:
            raise RuntimeError(f"encoded {written} rows, expected {X.shape[0]}")
    return Path(path)


def open_codes(path, model=None):
    """Open a codes array; with ``model`` given, check the codes were made by it."""
    path = Path(path)
    if not (path / "zarr.json").exists():
        raise InputError(f"{path} holds no codes; create them with `dhash encode`")
    arr = zarr.open_array(str(path), mode="r")
    attrs = dict(arr.attrs)
    if attrs.get("schema") != CODES_SCHEMA:
        raise InputError(f"{path} is not a dhash codes array (schema {attrs.get('schema')!r}); re-encode with `dhash encode`")
    if model is not None and attrs.get("model_id") != model.model_id:
        raise InputError(f"codes at {path} were made by model {attrs.get('model_id')} ({attrs.get('method')}, "
                         f"{attrs.get('n_bits')} bits), not by the given model {model.model_id}; re-encode with `dhash encode`")
    return arr, attrs


def codes_dask(arr):
    import dask.array as da
    return da.from_zarr(arr)
