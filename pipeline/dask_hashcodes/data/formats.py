"""Which reader opens a file: the format from its name (or the ``format`` given), then the
format's streaming reader (readers.py holds the protocol and the shared helpers)."""

from __future__ import annotations

import re
from pathlib import Path

from dask_hashcodes.data.idx import IdxReader
from dask_hashcodes.data.npyfile import NpyReader
from dask_hashcodes.data.parquetfile import ParquetReader
from dask_hashcodes.data.readers import VectorReader, existing_file
from dask_hashcodes.data.texmex import VecsReader
from dask_hashcodes.errors import InputError

FORMATS = ("fvecs", "bvecs", "ivecs", "npy", "idx", "parquet")
# MNIST-style names: train-images-idx3-ubyte, t10k-labels.idx1-ubyte (optionally .gz)
_IDX_NAME = re.compile(r"idx\d+-ubyte$")
_SUFFIX_FORMATS = {
    ".fvecs": "fvecs",
    ".bvecs": "bvecs",
    ".ivecs": "ivecs",
    ".npy": "npy",
    ".parquet": "parquet",
    ".pq": "parquet",
}


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
        f"rename it or pass `format` (one of {', '.join(FORMATS)})"
    )


def open_reader(path, format: str = "auto", column: str | None = None) -> VectorReader:
    """Open ``path`` for streaming; ``format`` is one of FORMATS or "auto" (by file name)."""
    path = existing_file(path)
    fmt = detect_format(path) if format == "auto" else format
    if fmt not in FORMATS:
        raise InputError(f"unknown `format` {format!r}; choose one of auto, {', '.join(FORMATS)}")
    if column is not None and fmt != "parquet":
        raise InputError(f"`column` only applies to parquet input; {path} is read as {fmt}")
    # pyarrow is only loaded when a parquet file is actually read
    if fmt in ("fvecs", "bvecs", "ivecs"):
        return VecsReader(path, kind=fmt)
    if fmt == "npy":
        return NpyReader(path)
    if fmt == "idx":
        return IdxReader(path)

    return ParquetReader(path, column=column)
