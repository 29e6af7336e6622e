"""``.npy`` files, memory-mapped so that only the block being read is in memory."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from dask_hashcodes.data.readers import check_not_empty, existing_file, row_ranges
from dask_hashcodes.errors import InputError, shape_words
from dask_hashcodes.validation import check_numeric_dtype


def read_npy_header(path) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) from the header alone, so object arrays are refused before loading."""
    fmt = np.lib.format
    with open(path, "rb") as f:
        try:
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = fmt.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, _, dtype = fmt.read_array_header_2_0(f)
            else:
                raise InputError(
                    f"{path} uses .npy format version {version}, which only structured arrays "
                    f"need; save a plain 2-D numeric array with np.save"
                )
        except ValueError as exc:
            raise InputError(f"{path} is not a valid .npy file ({exc}); save it with np.save") from None
    return shape, dtype


class NpyReader:
    def __init__(self, path):
        self.path = existing_file(path)
        shape, dtype = read_npy_header(self.path)
        if dtype.hasobject:
            raise InputError(
                f"{self.path} holds Python objects (dtype {dtype}), which cannot be read safely; "
                f"save a numeric array, e.g. np.save(path, np.asarray(x, dtype=np.float32))"
            )
        if len(shape) != 2:
            raise InputError(
                f"{self.path} holds a {len(shape)}-D array of {shape_words(shape)}; vectors must be 2-D "
                f"(n_points, n_features), save x.reshape(len(x), -1) instead"
            )
        self.dtype = check_numeric_dtype(dtype, what=f"vectors in {self.path}").newbyteorder("=")
        self.n, self.d = shape
        self.source = f"npy:{self.path.resolve()}"
        check_not_empty(self.n, self.d, self.path)

    def __repr__(self):
        return f"NpyReader({self.source!r}, n={self.n}, d={self.d}, dtype={self.dtype})"

    def iter_blocks(self, block_rows: int) -> Iterator[np.ndarray]:
        data = np.load(self.path, mmap_mode="r", allow_pickle=False)
        for start, stop in row_ranges(self.n, block_rows):
            # a C-ordered, native-endian copy detached from the map (also undoes Fortran order)
            yield np.array(data[start:stop], dtype=self.dtype, order="C")
