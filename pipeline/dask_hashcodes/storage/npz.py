"""Small arrays (models, checkpoints) as .npz bytes, read without ever unpickling, and
checked against the names, dtypes and shapes their reader expects."""

from __future__ import annotations

import numpy as np

from dask_hashcodes.errors import InputError, shape_words

# dtype kinds of an array spec (a string of numpy dtype kinds, or one exact dtype)
FLOAT = "f"  # floating point of any width
REAL = "fiu"  # any real number type: rows sampled from the training features keep their dtype
INTEGER = "iu"  # row or column numbers


def npz_bytes(arrays: dict) -> bytes:
    """Arrays as the bytes of an .npz file (no pickle: plain numeric arrays only)."""
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def npz_arrays(raw: bytes, where, remedy: str) -> dict[str, np.ndarray]:
    """The arrays of .npz bytes (``where``: the file they were read from, for messages),
    never unpickling; damaged or truncated bytes are a one-line InputError."""
    import io
    import zipfile

    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as exc:
        raise InputError(f"{where} is damaged ({type(exc).__name__}: {str(exc)[:60]}); {remedy}") from None


def check_arrays(arrays: dict, spec: dict, where, remedy: str) -> None:
    """Refuse ``arrays`` unless they are exactly the arrays ``spec`` declares: name ->
    (dtype kinds such as ``FLOAT`` or an exact dtype, shape with None for a dimension the
    data decides). A missing, extra, ill-typed or ill-shaped array is a one-line InputError
    naming it, so nothing undeclared is ever used."""
    missing = [name for name in spec if name not in arrays]
    if missing:
        raise InputError(f"{where} lacks the array {missing[0]!r}; {remedy}")
    extra = sorted(name for name in arrays if name not in spec)
    if extra:
        shown = ", ".join(repr(name) for name in extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
        raise InputError(f"{where} holds arrays it should not have ({shown}); {remedy}")
    for name, (dtype, shape) in spec.items():
        array = arrays[name]
        if isinstance(dtype, str):
            typed = array.dtype.kind in dtype
            wanted = "/".join(_KIND_NAMES[k] for k in dtype)
        else:
            typed, wanted = array.dtype == np.dtype(dtype), str(np.dtype(dtype))
        if not typed:
            raise InputError(f"{where}: array {name!r} has dtype {array.dtype}, expected {wanted}; {remedy}")
        shaped = array.ndim == len(shape) and all(s is None or s == t for s, t in zip(shape, array.shape, strict=True))
        if not shaped:
            if len(shape) == 1:
                expected = "any number of values" if shape[0] is None else shape_words(shape)
            else:
                expected = " x ".join("any" if s is None else str(s) for s in shape)
            raise InputError(f"{where}: array {name!r} is {shape_words(array.shape)}, expected {expected}; {remedy}")


_KIND_NAMES = {"f": "float", "i": "int", "u": "uint", "b": "bool"}
