"""What every index searches, said explicitly by the method called, never guessed from a dtype:
``search(vectors, k)`` takes query vectors (the index's model encodes them), and
``search_codes(codes, k)`` takes packed codes or ``Queries`` holding the codes and their vectors.

A uint8 array is both a valid batch of vectors (SIFT descriptors are bytes) and a valid batch
of packed codes, so no index tells them apart by type: this module checks each against what
the method was told it is and refuses, in one line naming both widths, what does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dask_hashcodes.errors import InputError, shape_words

# the element types query vectors may have; float16 is encoded through float32 (exact), which
# the models' compiled kernels take
VECTOR_DTYPES = (np.uint8, np.float16, np.float32, np.float64)
SEARCH_VECTORS = "to search vectors call search(vectors, k)"
SEARCH_CODES = "to search packed codes call search_codes(codes, k)"


@dataclass(frozen=True)
class Queries:
    """A batch of queries as their packed ``codes`` (uint8 (nq, code bytes)) and their
    ``vectors`` (nq, d), row q of each the same query. ``search_codes`` takes it where the
    codes alone are not enough: an inverted file finds each query's lists from its vector, and
    re-ranking measures distances from it (the stored codes of a split's queries and their
    rows, as ``dhash search`` passes them)."""

    codes: np.ndarray
    vectors: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.codes)


def width_words(code_size: int) -> str:
    """A code width in words: 128 -> "128-byte (1024-bit)"."""
    return f"{code_size}-byte ({8 * code_size}-bit)"


def checked_codes(codes, code_size: int) -> np.ndarray:
    """Packed query codes (the ``codes`` of a Queries value, or an array) as uint8
    (nq, ``code_size``), refused in one line unless they are exactly that."""
    if isinstance(codes, Queries):
        codes = codes.codes
    codes = np.asarray(codes)
    if codes.dtype != np.uint8 or codes.ndim != 2:
        raise InputError(
            f"query codes must be a 2-D uint8 array of packed codes, {code_size} bytes per query; got {codes.dtype} "
            f"of {shape_words(codes.shape)}; {SEARCH_VECTORS}"
        )
    if codes.shape[1] != code_size:
        width = codes.shape[1]
        raise InputError(
            f"query codes are {width} byte{'' if width == 1 else 's'} ({8 * width} bits) wide but the index holds "
            f"{width_words(code_size)} codes; encode the queries with the model of the indexed codes, or "
            f"{SEARCH_VECTORS}"
        )
    return codes


def checked_vectors(
    vectors, d: int | None = None, *, trained_on: str = "the index's model was trained on"
) -> np.ndarray:
    """Query vectors as a 2-D array of a VECTOR_DTYPES type (float16 widened to float32),
    refused in one line unless they have ``d`` features (None: any)."""
    if isinstance(vectors, Queries):
        raise InputError(
            "search takes the query vectors; to search Queries (codes and vectors) call search_codes(queries, k)"
        )
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.dtype not in VECTOR_DTYPES:
        raise InputError(
            f"query vectors must be a 2-D array of uint8, float16, float32 or float64; got {vectors.dtype} of "
            f"{shape_words(vectors.shape)}; {SEARCH_CODES}"
        )
    if d is not None and vectors.shape[1] != d:
        raise InputError(
            f"query vectors have {vectors.shape[1]} feature{'' if vectors.shape[1] == 1 else 's'} but {trained_on} "
            f"{d}; give {d}-feature vectors, or {SEARCH_CODES}"
        )
    return vectors.astype(np.float32) if vectors.dtype == np.float16 else vectors


def encoded(vectors, model, code_size: int) -> Queries:
    """``vectors`` checked against ``model`` (the features it was trained on) and encoded by
    it into codes of the index's ``code_size``: Queries holding both."""
    if model is None:
        raise InputError(
            f"this index has no `model` to encode query vectors; give it one, or {SEARCH_CODES} with packed codes"
        )
    d = getattr(model, "n_features_in_", None)
    vectors = checked_vectors(vectors, None if d is None else int(d))
    codes = np.asarray(model.encode(vectors))
    if codes.ndim != 2 or codes.shape[1] != code_size:
        raise InputError(
            f"the index's `model` encodes {width_words(codes.shape[-1])} codes but the index holds "
            f"{width_words(code_size)} codes; give the index the model its codes were encoded with"
        )
    return Queries(codes=codes, vectors=vectors)


def with_vectors(queries, what: str) -> Queries:
    """``queries`` for a search whose ``what`` needs the query vectors besides their codes:
    Queries holding both, refused in one line otherwise."""
    if not isinstance(queries, Queries) or queries.vectors is None:
        raise InputError(
            f"{what} needs the query vectors as well as their codes: pass Queries(codes=..., vectors=...) to "
            f"search_codes, or {SEARCH_VECTORS}"
        )
    if len(queries.vectors) != len(queries.codes):
        raise InputError(
            f"Queries holds {len(queries.vectors)} vectors for {len(queries.codes)} codes; give one vector per code"
        )
    return queries
