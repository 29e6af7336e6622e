"""IDX files (MNIST, Fashion-MNIST, EMNIST), raw or gzipped.

Header: two zero bytes, a dtype code, the number of dimensions, then one big-endian
uint32 per dimension. The data follow, big-endian, row-major. An ``(n, 28, 28)`` image
file is read as ``(n, 784)`` vectors; an ``(n,)`` label file as ``(n, 1)``.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from dask_hashcodes.data.readers import check_not_empty, existing_file, row_ranges
from dask_hashcodes.errors import InputError, shape_words

IDX_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
IDX_CODES = {dtype: code for code, dtype in IDX_DTYPES.items()}
_CORRUPT = (EOFError, OSError, zlib.error)  # what gzip raises on cut or damaged streams


def _open(path: Path, mode: str = "rb"):
    return gzip.open(path, mode) if path.name.lower().endswith(".gz") else open(path, mode)


def _read(f, nbytes: int, path: Path) -> bytes:
    try:
        return f.read(nbytes)
    except _CORRUPT as exc:
        raise InputError(f"{path} is truncated or corrupt ({exc}); re-download it") from None


def _read_exact(f, nbytes: int, path: Path, what: str) -> bytes:
    data = _read(f, nbytes, path)
    if len(data) != nbytes:
        raise InputError(f"{path} is truncated: it ends inside the {what}; re-download it")
    return data


def read_idx_header(f, path: Path) -> tuple[np.dtype, tuple[int, ...], int]:
    """(big-endian dtype, shape, header length in bytes) from an open IDX stream."""
    zero0, zero1, code, ndim = _read_exact(f, 4, path, "header")
    if zero0 or zero1 or code not in IDX_DTYPES or ndim == 0:
        raise InputError(f"{path} is not an IDX file (bad magic number); check the file or pass `format`")
    shape = tuple(int(x) for x in np.frombuffer(_read_exact(f, 4 * ndim, path, "header"), dtype=">u4"))
    return IDX_DTYPES[code], shape, 4 + 4 * ndim


class IdxReader:
    """Streams an IDX file: gzip is read sequentially, a raw file through a memmap."""

    def __init__(self, path):
        self.path = existing_file(path)
        self.gzipped = self.path.name.lower().endswith(".gz")
        with _open(self.path) as f:
            self.file_dtype, self.shape, self.offset = read_idx_header(f, self.path)
        self.dtype = self.file_dtype.newbyteorder("=")
        self.n = self.shape[0]
        self.d = int(np.prod(self.shape[1:], dtype=np.int64))  # images are flattened
        self.source = f"idx:{self.path.resolve()}"
        check_not_empty(self.n, self.d, self.path)
        if not self.gzipped:
            # a raw file's size is known up front, so a cut download fails before any work
            expected = self.offset + self.n * self.d * self.dtype.itemsize
            size = self.path.stat().st_size
            if size != expected:
                problem = "is truncated" if size < expected else "has trailing bytes"
                raise InputError(
                    f"{self.path} {problem}: {size} bytes, but its header announces {shape_words(self.shape)} "
                    f"of {self.dtype} ({expected} bytes); re-download it"
                )

    def __repr__(self):
        return f"IdxReader({self.source!r}, shape={self.shape}, dtype={self.dtype})"

    def iter_blocks(self, block_rows: int) -> Iterator[np.ndarray]:
        if not self.gzipped:
            data = np.memmap(self.path, dtype=self.file_dtype, mode="r", offset=self.offset, shape=(self.n, self.d))
            for start, stop in row_ranges(self.n, block_rows):
                yield np.array(data[start:stop], dtype=self.dtype)  # plain copy, native byte order
            return
        row_bytes = self.d * self.dtype.itemsize
        with _open(self.path) as f:
            _read_exact(f, self.offset, self.path, "header")
            for start, stop in row_ranges(self.n, block_rows):
                raw = _read_exact(f, (stop - start) * row_bytes, self.path, f"rows {start}..{stop - 1}")
                yield np.frombuffer(raw, dtype=self.file_dtype).reshape(stop - start, self.d).astype(self.dtype)
            # reading on to the end also makes gzip verify its checksum
            if _read(f, 1, self.path):
                raise InputError(
                    f"{self.path} has trailing bytes after the {shape_words(self.shape)} of {self.dtype} its header "
                    f"announces; the file is corrupt, re-download it"
                )


def read_idx_labels(path) -> np.ndarray:
    """A 1-D IDX label file (``*-idx1-ubyte[.gz]``) as a 1-D array in native byte order."""
    reader = IdxReader(path)
    if len(reader.shape) != 1:
        raise InputError(
            f"{reader.path} holds an array of {shape_words(reader.shape)}, not labels; pass the *-idx1-ubyte labels file"
        )
    return np.concatenate(list(reader.iter_blocks(reader.n))).ravel()


def write_idx(path, array) -> Path:
    """Write a numpy array as IDX (gzipped if ``path`` ends in .gz); for tests and benchmarks."""
    path = Path(path)
    array = np.asarray(array)
    big_endian = array.dtype.newbyteorder(">")
    if big_endian not in IDX_CODES:
        raise InputError(f"IDX cannot store dtype {array.dtype}; use uint8, int8, int16, int32, float32 or float64")
    header = bytes([0, 0, IDX_CODES[big_endian], array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    with _open(path, "wb") as f:
        f.write(header)
        f.write(np.ascontiguousarray(array, dtype=big_endian).tobytes())
    return path
