"""Built-in named sources and dataset resolution (a name or a path to a dataset).

* ``fashion-mnist``: Debian's ``dataset-fashion-mnist`` package (IDX files under
  /usr/share/datasets/fashion-mnist), train (60k) then test (10k) rows, 784-d uint8,
  10 class labels.
* ``sift-synth``: the deterministic SIFT-like generator (dask_hashcodes.data.synth).
* ``debian-minilm``: MiniLM sentence embeddings (384-d float32, unit norm) of the Debian
  package descriptions, label = section (dask_hashcodes.data.debian_text); ``n`` takes a prefix.
* ``debian-sift``: real SIFT descriptors (128-d uint8) of the wallpaper photographs of three
  Debian packages, label = image (dask_hashcodes.data.debian_sift).

A named source is materialised once into the data directory (dask config dhash.data-dir or
$DHASH_DATA_DIR; default: the platform's user cache directory, ~/.cache/dhash on Linux) and
reused.
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path

import numpy as np
import platformdirs

from dask_hashcodes import config
from dask_hashcodes.data.debian_sift import write_debian_sift
from dask_hashcodes.data.debian_text import write_debian_minilm
from dask_hashcodes.data.idx import IdxReader, read_idx_labels
from dask_hashcodes.data.synth import write_sift_synth
from dask_hashcodes.distributed.progress import compute_with_progress
from dask_hashcodes.errors import InputError
from dask_hashcodes.storage.datasets import STORAGE_FORMAT, open_dataset, write_dataset
from dask_hashcodes.storage.location import resolve

FASHION_MNIST_PARTS = ("train", "t10k")
SOURCES = ("fashion-mnist", "sift-synth", "debian-minilm", "debian-sift")
DEFAULT_SYNTH_N = 1_000_000


def data_dir() -> Path:
    """dhash.data-dir (or $DHASH_DATA_DIR), else the platform's user cache directory."""
    return Path(config.get("data-dir") or platformdirs.user_cache_dir("dhash"))


def fashion_mnist_dir() -> Path:
    """dhash.fashion-mnist-dir (or $DHASH_FASHION_MNIST_DIR): where the IDX files are."""
    return Path(config.get("fashion-mnist-dir"))


def fashion_mnist_available() -> bool:
    return all((fashion_mnist_dir() / f"{p}-images-idx3-ubyte.gz").exists() for p in FASHION_MNIST_PARTS)


def write_fashion_mnist(out, *, chunk_rows=None, overwrite=False, progress=None):
    """Ingest Fashion-MNIST (70k x 784 uint8 + labels) from the Debian package."""

    where = fashion_mnist_dir()
    if not fashion_mnist_available():
        raise InputError(
            f"Fashion-MNIST not found in {where}; install it with `apt-get install dataset-fashion-mnist` "
            "(or set dask's dhash.fashion-mnist-dir)"
        )
    readers = [IdxReader(where / f"{p}-images-idx3-ubyte.gz") for p in FASHION_MNIST_PARTS]
    labels = np.concatenate([read_idx_labels(where / f"{p}-labels-idx1-ubyte.gz") for p in FASHION_MNIST_PARTS])
    blocks = chain.from_iterable(r.iter_blocks(10_000) for r in readers)
    return write_dataset(
        out,
        blocks,
        n=sum(r.n for r in readers),
        d=readers[0].d,
        dtype=np.uint8,
        source="fashion-mnist",
        labels=labels,
        chunk_rows=chunk_rows,
        overwrite=overwrite,
        attrs={"origin": str(where), "rows": "train (60000) then t10k (10000)"},
        progress=progress,
    )


def default_path(name: str, *, n: int | None = None, seed: int = 0, chunk_rows: int | None = None) -> Path:

    # the storage format is in the name: a cache written before chunk verification is not reused
    suffix = (f"-c{chunk_rows}" if chunk_rows else "") + f"-f{STORAGE_FORMAT}"
    if name == "sift-synth":
        # the generator version is in the name: a cached set from an older generator is not reused
        from dask_hashcodes.data.synth import GENERATOR_VERSION

        return data_dir() / f"sift-synth-v{GENERATOR_VERSION}-n{n or DEFAULT_SYNTH_N}-s{seed}{suffix}.zarr"
    if name == "debian-minilm" and n:
        return data_dir() / f"{name}-n{n}{suffix}.zarr"
    return data_dir() / f"{name}{suffix}.zarr"


def resolve_dataset(
    name_or_path: str, *, n: int | None = None, seed: int = 0, chunk_rows: int | None = None, progress: bool = False
):
    """Open a dataset path, or materialise a named source once and open it (``progress``: a
    bar on stderr while it is built)."""

    if name_or_path not in SOURCES or resolve(name_or_path).exists():
        if resolve(name_or_path).exists():
            return open_dataset(name_or_path)
        raise InputError(
            f"unknown dataset {name_or_path!r}: not a dataset directory and not a built-in source; "
            f"use one of {', '.join(SOURCES)} or a path made by `dhash ingest`/`dhash synth`"
        )
    target = default_path(name_or_path, n=n, seed=seed, chunk_rows=chunk_rows)
    if (target / ".dhash-commit.json").exists():
        return open_dataset(target)
    if name_or_path == "fashion-mnist":
        return write_fashion_mnist(target, chunk_rows=chunk_rows)
    if name_or_path == "debian-minilm":
        return write_debian_minilm(target, n=n, chunk_rows=chunk_rows, progress=progress)
    if name_or_path == "debian-sift":
        return write_debian_sift(target, chunk_rows=chunk_rows, progress=progress)

    compute = (lambda tasks: compute_with_progress(tasks, show=True)) if progress else None
    return write_sift_synth(target, n or DEFAULT_SYNTH_N, seed=seed, chunk_rows=chunk_rows, progress=compute)
