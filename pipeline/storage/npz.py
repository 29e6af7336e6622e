"""Small arrays (models, checkpoints) as .npz bytes, read without ever unpickling."""

from __future__ import annotations

import numpy as np

from pipeline.errors import InputError


def npz_bytes(arrays: dict) -> bytes:
    """Arrays as the bytes of an .npz file (no pickle: plain numeric arrays only)."""
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def load_npz(loc, remedy: str) -> dict[str, np.ndarray]:
    """The arrays of an .npz file at a Location, never unpickling; a damaged or truncated
    file is a one-line InputError."""
    import io
    import zipfile

    try:
        raw = loc.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{loc} is missing; {remedy}") from None
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as exc:
        raise InputError(f"{loc} is damaged ({type(exc).__name__}: {str(exc)[:60]}); {remedy}") from None
