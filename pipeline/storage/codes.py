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


def write_codes(path, codes, model, *, dataset_path: str = "", overwrite: bool = False, progress=None) -> Path:
    """Compute a lazy dask array of codes chunk by chunk into a new zarr array, atomically."""
    import dask.array as da
    with atomic_path(path, overwrite=overwrite) as tmp:
        arr = zarr.create_array(str(tmp), shape=codes.shape, chunks=(codes.chunks[0][0], codes.shape[1]),
                                dtype="uint8", zarr_format=3)
        arr.attrs.update({"schema": CODES_SCHEMA, "model_id": model.model_id, "method": model.method,
                          "n_bits": int(model.n_bits), "bit_order": BIT_ORDER, "dataset": str(dataset_path)})
        stored = da.store(codes, arr, lock=False, compute=False)
        if progress is not None:
            progress(stored)
        else:
            stored.compute()
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
