"""Input checks shared by readers, estimators and jobs. They raise InputError (one line)."""

from __future__ import annotations

import numbers

import numpy as np

from dask_hashcodes.errors import InputError, shape_words


def check_numeric_dtype(dtype, what: str = "features") -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind not in "uif" or dtype == np.bool_:
        raise InputError(
            f"{what} have dtype {dtype}, which is not numeric; convert them to uint8, int*, float32 or float64 first"
        )
    return dtype


def check_features_array(X, what: str = "features"):
    """Shape/dtype checks that never compute anything (works for numpy and dask arrays)."""
    if not hasattr(X, "shape") or not hasattr(X, "dtype"):
        X = np.asarray(X)
    if X.ndim != 2:
        raise InputError(f"{what} must be a 2-D array (n_points, n_features); got {shape_words(X.shape)}")
    check_numeric_dtype(X.dtype, what)
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise InputError(f"{what} are empty ({shape_words(X.shape)}); pass at least one point with one feature")
    chunks = getattr(X, "chunks", None)
    if chunks is not None:
        if any(np.isnan(c) for c in chunks[0]):
            raise InputError(f"{what} have unknown chunk sizes; call X.compute_chunk_sizes() first")
        if len(chunks[1]) != 1:
            raise InputError(f"{what} are chunked along columns; rechunk with X.rechunk({{1: -1}})")
    return X


# Largest magnitude accepted in float features. Training sums squares and products of
# features (covariances, norms, projections): with |x| <= sqrt(float64 max) / 2**32, a sum
# of up to 2**64 such squares (rows x features) stays finite. Larger finite values (1e300
# is a valid float64) would pass a finiteness check and make training fail on Inf/NaN.
MAX_ABS_FEATURE = float(np.sqrt(np.finfo(np.float64).max)) / 2.0**32


def check_finite_block(block: np.ndarray, row_offset: int = 0, what: str = "features") -> None:
    """Reject NaN/Inf and values too large to square (``MAX_ABS_FEATURE``), naming the first
    bad row (only float data can hold them)."""
    if block.dtype.kind != "f":
        return
    if float(np.finfo(block.dtype).max) <= MAX_ABS_FEATURE:
        ok = np.isfinite(block).all(axis=1)  # float32 and smaller: only Inf/NaN can be out of range
    else:
        ok = (np.abs(block) <= MAX_ABS_FEATURE).all(axis=1)  # False for NaN and Inf too
    if ok.all():
        return
    row = int(np.flatnonzero(~ok)[0])
    values = block[row]
    if not np.isfinite(values).all():
        raise InputError(
            f"{what} row {row + row_offset} contains NaN or Inf; drop or impute non-finite rows before hashing"
        )
    biggest = float(np.abs(values).max())
    raise InputError(
        f"{what} row {row + row_offset} holds a value of magnitude {biggest:.3g}, above {MAX_ABS_FEATURE:.3g} "
        "(its square overflows float64 in training); rescale the features (e.g. divide by a constant) first"
    )


def check_int_param(value, name: str, owner: str, low: int = 1, high: int | None = None) -> int:
    """sklearn-style message: "The 'n_bits' parameter of ITQ must be an int in the range [1, 784]. Got 0 instead." """
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if ok:
        ok = value >= low and (high is None or value <= high)
    if not ok:
        rng = f"[{low}, {'inf' if high is None else high}]"
        raise InputError(f"The '{name}' parameter of {owner} must be an int in the range {rng}. Got {value!r} instead.")
    return int(value)


DEFAULT_K = 100  # neighbours per query of a search given neither k nor radius


def check_k(k) -> int:
    """The number of neighbours a top-k search asks for, refused in one line unless a positive int."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise InputError(f"k must be a positive int; got {k!r}")
    return int(k)


def check_radius(radius) -> int:
    """The Hamming radius of a range search, refused in one line unless a non-negative int."""
    if isinstance(radius, bool) or not isinstance(radius, numbers.Integral) or radius < 0:
        raise InputError(f"radius must be a non-negative int; got {radius!r}")
    return int(radius)
