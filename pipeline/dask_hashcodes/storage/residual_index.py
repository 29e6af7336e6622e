"""A residual-code inverted file (indexes.residual.ResidualIVF) on disk or in an object store:
a committed zarr v3 group (storage.atomic) in the verified layout, holding everything a
search reads, in list order, so that a server opens it without the data it was built from.

Arrays:

* ``centroids`` (n_lists, d): the list centroids, in the re-rank vectors' dtype;
* ``rotation``: the (D, D) float32 matrix, or the (steps, D) int8 signs of a structured one;
* ``codes`` (n, W) uint64 and ``factors`` (n, 2) float32: each row's residual code and its
  two factors (the index keeps the codes word-major in memory: they are transposed on open);
* ``ids`` (n,) int32 or int64: what a search returns for each position (a row number);
* ``offsets`` (n_lists + 1,) int64: where each list starts;
* ``rerank_vectors`` (n, d) one byte per dimension, and, for float data, ``rerank_offset``
  (d,) float32 with the attribute ``rerank_step``: the 8-bit scalar quantiser.

attrs: schema, error_ratio, rerank_step (null for byte data), nprobe, eps, and ``about``: what
the rows are (the dataset and split `dhash index` built it from; empty from the library), and
``tuned``: how nprobe and eps were chosen (the validation queries, k, target and the recall
reached; empty when they are the library's defaults; absent in indexes written before it).
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.errors import InputError
from dask_hashcodes.storage.atomic import atomic_output, require_committed
from dask_hashcodes.storage.chunkread import arrays_manifest, create_array, new_group, open_verified, read_attrs
from dask_hashcodes.storage.location import Location, resolve

RESIDUAL_SCHEMA = "dhash.residual-index/1"
RESIDUAL_KIND = "residual-index"
RESIDUAL_ARRAYS = ("centroids", "rotation", "codes", "factors", "ids", "offsets", "rerank_vectors", "rerank_offset")
OPTIONAL_ARRAYS = ("rerank_offset",)  # float data only
RESIDUAL_ATTRS = ("error_ratio", "rerank_step", "nprobe", "eps")
CHUNK_BYTES = 16 << 20  # rows per chunk: about this many bytes, so a reader holds one chunk at a time


def _chunk_rows(values: np.ndarray) -> int:
    row_bytes = max(1, int(np.prod(values.shape[1:], dtype=np.int64)) * values.dtype.itemsize)
    return max(1, CHUNK_BYTES // row_bytes)


def write_residual_index(path, arrays: dict, attrs: dict, *, overwrite: bool = False, storage=None) -> Location:
    """Commit ``arrays`` (name -> array, or None for an absent optional one) and ``attrs`` as
    a residual index at ``path``; an existing output is replaced only with ``overwrite`` and
    only when dhash wrote it as a residual index (storage.atomic)."""
    loc = resolve(path, storage=storage)
    with atomic_output(loc, kind=RESIDUAL_KIND, overwrite=overwrite, manifest=arrays_manifest(*RESIDUAL_ARRAYS)) as tmp:
        group = new_group(tmp)
        group.attrs.update({"schema": RESIDUAL_SCHEMA, **attrs})
        for name in RESIDUAL_ARRAYS:
            values = arrays.get(name)
            if values is None:
                continue
            rows = _chunk_rows(values)
            stored = create_array(group, name, values.shape, rows, values.dtype)
            for start in range(0, len(values), rows):  # a chunk at a time: a memory-mapped input stays on disk
                stored[start : start + rows] = np.ascontiguousarray(values[start : start + rows])
    return loc


def open_residual_index(path, *, storage=None) -> tuple[Location, dict, dict]:
    """(location, attrs, name -> verified ChunkReader) of the committed residual index at
    ``path``: one-line errors for anything else, and for a missing or damaged array."""
    loc = resolve(path, storage=storage)
    remedy = "build the index again and save it with overwrite=True"
    record = require_committed(loc, RESIDUAL_KIND, remedy)
    attrs = read_attrs(loc, f"residual index {loc}", remedy)
    if attrs.get("schema") != RESIDUAL_SCHEMA:
        raise InputError(f"{loc} is not a dhash residual index (schema {attrs.get('schema')!r}); {remedy}")
    missing = [key for key in RESIDUAL_ATTRS if key not in attrs]
    if missing:
        raise InputError(f"the residual index at {loc} lacks its attributes {', '.join(missing)}; {remedy}")
    manifest = record["manifest"].get("arrays", {})
    readers = {
        name: open_verified(loc.child(name), manifest.get(name), f"residual index {loc} ({name})", remedy, record)
        for name in RESIDUAL_ARRAYS
        if name not in OPTIONAL_ARRAYS or name in manifest
    }
    n = readers["ids"].shape[0]
    n_lists, d = readers["centroids"].shape
    if (
        readers["codes"].shape[0] != n
        or readers["factors"].shape != (n, 2)
        or readers["rerank_vectors"].shape != (n, d)
        or readers["offsets"].shape != (n_lists + 1,)
    ):
        raise InputError(f"the residual index at {loc} has arrays of disagreeing shapes; {remedy}")
    return loc, attrs, readers
