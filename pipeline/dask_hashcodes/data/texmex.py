"""TexMex / BIGANN ``.fvecs``, ``.bvecs`` and ``.ivecs`` files.

Each record is a little-endian int32 dimension ``d`` followed by ``d`` values (float32,
uint8 or int32). There is no file header, so the record count comes from the file size,
and every record repeats ``d``: we check those headers block by block while reading.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from dask_hashcodes.data.readers import block_rows_for, existing_file, row_ranges
from dask_hashcodes.errors import InputError, shape_words

VECS_DTYPES = {"fvecs": np.dtype("<f4"), "bvecs": np.dtype("u1"), "ivecs": np.dtype("<i4")}
MAX_DIM = 2**20  # far above any real descriptor; a larger header means "not a vecs file"
HEADER_BYTES = 4


def vecs_kind(path) -> str:
    kind = Path(path).suffix.lower().lstrip(".")
    if kind not in VECS_DTYPES:
        raise InputError(f"{path} does not end in .fvecs, .bvecs or .ivecs; pass `format` to say which it is")
    return kind


def record_dtype(kind: str, d: int) -> np.dtype:
    """One record as a structured dtype, so a block of records is one memmap slice."""
    return np.dtype([("dim", "<i4"), ("vec", VECS_DTYPES[kind], (d,))])


class VecsReader:
    """Streams a vecs file ``block_rows`` records at a time (bounded memory for any file size)."""

    def __init__(self, path, kind: str | None = None):
        self.path = existing_file(path)
        self.kind = kind or vecs_kind(self.path)
        self.dtype = VECS_DTYPES[self.kind].newbyteorder("=")
        self.source = f"{self.kind}:{self.path.resolve()}"
        size = self.path.stat().st_size
        if size < HEADER_BYTES:
            raise InputError(
                f"{self.path} is truncated: {size} bytes is shorter than one record header; "
                f"re-download or regenerate it"
            )
        d = int(np.fromfile(self.path, dtype="<i4", count=1)[0])
        if not 0 < d <= MAX_DIM:
            raise InputError(
                f"{self.path} starts with dimension {d}, which is not a plausible vector length; "
                f"is it really a .{self.kind} file? check the file or pass `format`"
            )
        self.d = d
        self.record = record_dtype(self.kind, d)
        if size % self.record.itemsize:
            raise InputError(
                f"{self.path} is truncated: {size} bytes is not a whole number of {d}-dim records; "
                f"re-download or regenerate it"
            )
        self.n = size // self.record.itemsize

    def __repr__(self):
        return f"VecsReader({self.source!r}, n={self.n}, d={self.d}, dtype={self.dtype})"

    def iter_blocks(self, block_rows: int) -> Iterator[np.ndarray]:
        # plain reads, not one memmap of the whole file: pages of a long-lived map stay in
        # RSS until it is dropped, so peak RSS grew with the file size; with plain reads it
        # stays bounded by the block whatever the file's size
        with open(self.path, "rb") as f:
            yield from self._blocks(f, block_rows)

    def _blocks(self, f, block_rows: int) -> Iterator[np.ndarray]:
        for start, stop in row_ranges(self.n, block_rows):
            block = np.fromfile(f, dtype=self.record, count=stop - start)
            bad = np.flatnonzero(block["dim"] != self.d)
            if bad.size:
                i = start + int(bad[0])
                raise InputError(
                    f"{self.path} record {i} has dimension header {int(block['dim'][bad[0]])}, "
                    f"but the first record has {self.d}; the file is corrupt, re-download or regenerate it"
                )
            # np.array copies the strided field out of the map into a plain (rows, d) array
            yield np.array(block["vec"], dtype=self.dtype)


def write_vecs(path, array, block_rows: int | None = None) -> Path:
    """Write a 2-D array (numpy, memmap or dask) as a vecs file; the dtype follows the extension.

    Rows are converted and written ``block_rows`` at a time, so the array may be larger
    than memory. Integer values that do not fit the target (e.g. 300 in a .bvecs) are refused.
    """
    path = Path(path)
    kind = vecs_kind(path)
    if len(array.shape) != 2 or array.shape[1] < 1:
        raise InputError(f"write_vecs needs a 2-D (n, d) array with d >= 1; got {shape_words(array.shape)}")
    n, d = array.shape
    record = record_dtype(kind, d)
    target = VECS_DTYPES[kind]
    block_rows = block_rows or block_rows_for(d, record.itemsize)
    with open(path, "wb") as f:
        for start, stop in row_ranges(n, block_rows):
            values = np.asarray(array[start:stop])
            converted = values.astype(target)
            # float -> float32 may round; integer targets must hold the values exactly
            if target.kind in "iu" and not np.array_equal(converted, values):
                raise InputError(
                    f"rows {start}..{stop - 1} do not fit {target} exactly; "
                    f"convert or scale them before writing .{kind}"
                )
            records = np.empty(stop - start, dtype=record)
            records["dim"] = d
            records["vec"] = converted
            records.tofile(f)
    return path
