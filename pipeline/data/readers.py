"""Streaming readers for the vector file formats users have, behind one small protocol.

Every reader opened by :func:`open_reader` has ``n``, ``d``, ``dtype`` (native byte
order), ``source`` (``"FORMAT:/abs/path"``, recorded in the dataset) and
``iter_blocks(block_rows)``, which yields ``(rows, d)`` arrays of at most ``block_rows``
rows. Readers only hold file metadata; each ``iter_blocks`` call opens the file afresh,
so memory stays bounded by one block however large the file is.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, Protocol

import numpy as np

from pipeline.errors import InputError

FORMATS = ("fvecs", "bvecs", "ivecs", "npy", "idx", "parquet")
READ_BLOCK_BYTES = 8 * 2**20  # per block read from disk: big enough for fast I/O, small next to RAM

# MNIST-style names: train-images-idx3-ubyte, t10k-labels.idx1-ubyte (optionally .gz)
_IDX_NAME = re.compile(r"idx\d+-ubyte$")
_SUFFIX_FORMATS = {".fvecs": "fvecs", ".bvecs": "bvecs", ".ivecs": "ivecs", ".npy": "npy",
                   ".parquet": "parquet", ".pq": "parquet"}


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


def detect_format(path) -> str:
    """Format name from the file name (see FORMATS); InputError if it is not recognised."""
    name = Path(path).name.lower()
    gz = name.endswith(".gz")
    stem = name[:-3] if gz else name
    if _IDX_NAME.search(stem) or stem.endswith(".idx"):
        return "idx"
    fmt = _SUFFIX_FORMATS.get(Path(stem).suffix)
    if fmt is not None and gz:
        # only IDX is commonly distributed gzipped; the others are read with random access
        raise InputError(f"{path} is gzipped; only IDX files can be read compressed, gunzip it first")
    if fmt is not None:
        return fmt
    raise InputError(
        f"cannot tell the format of {path} from its name; accepted: .fvecs .bvecs .ivecs .npy "
        f".parquet/.pq and IDX (*-idx3-ubyte, *-idx1-ubyte, .idx, optionally .gz); "
        f"rename it or pass --format {{{','.join(FORMATS)}}}"
    )


def open_reader(path, format: str = "auto", column: str | None = None) -> VectorReader:
    """Open ``path`` for streaming; ``format`` is one of FORMATS or "auto" (by file name)."""
    path = existing_file(path)
    fmt = detect_format(path) if format == "auto" else format
    if fmt not in FORMATS:
        raise InputError(f"unknown --format {format!r}; choose one of auto, {', '.join(FORMATS)}")
    if column is not None and fmt != "parquet":
        raise InputError(f"--column only applies to parquet input; {path} is read as {fmt}")
    # format modules are imported here: they import row_ranges from this module, and
    # pyarrow is only loaded when a parquet file is actually read
    if fmt in ("fvecs", "bvecs", "ivecs"):
        from pipeline.data.texmex import VecsReader
        return VecsReader(path, kind=fmt)
    if fmt == "npy":
        from pipeline.data.npyfile import NpyReader
        return NpyReader(path)
    if fmt == "idx":
        from pipeline.data.idx import IdxReader
        return IdxReader(path)
    from pipeline.data.parquetfile import ParquetReader
    return ParquetReader(path, column=column)
