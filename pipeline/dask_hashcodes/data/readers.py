"""Streaming readers for the vector file formats users have, behind one small protocol.

Every reader (opened by ``dask_hashcodes.data.formats.open_reader``) has ``n``, ``d``, ``dtype`` (native byte
order), ``source`` (``"FORMAT:/abs/path"``, recorded in the dataset) and
``iter_blocks(block_rows)``, which yields ``(rows, d)`` arrays of at most ``block_rows``
rows. Readers only hold file metadata; each ``iter_blocks`` call opens the file afresh,
so memory stays bounded by one block however large the file is.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np

from dask_hashcodes.errors import InputError

READ_BLOCK_BYTES = 8 * 2**20  # per block read from disk: big enough for fast I/O, small next to RAM


class VectorReader(Protocol):
    n: int
    d: int
    dtype: np.dtype
    source: str

    def iter_blocks(self, block_rows: int) -> Iterator[np.ndarray]: ...


def row_ranges(n: int, block_rows: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` row ranges covering ``range(n)``, ``block_rows`` at a time."""
    if block_rows < 1:
        raise InputError(f"block_rows must be at least 1; got {block_rows}")
    for start in range(0, n, block_rows):
        yield start, min(n, start + block_rows)


def block_rows_for(d: int, itemsize: int, target_bytes: int = READ_BLOCK_BYTES) -> int:
    """Rows per block so that one block holds about ``target_bytes``."""
    return max(1, target_bytes // max(1, d * itemsize))


def check_not_empty(n: int, d: int, path) -> None:
    if n <= 0 or d <= 0:
        raise InputError(f"{path} holds no vectors (n={n}, d={d}); give a file with at least one vector")


def existing_file(path) -> Path:
    path = Path(path)
    if not path.exists():
        raise InputError(f"no such file: {path}")
    if path.is_dir():
        raise InputError(f"{path} is a directory; give a single data file")
    if path.stat().st_size == 0:
        raise InputError(f"{path} is empty (0 bytes); re-download or regenerate it")
    return path
