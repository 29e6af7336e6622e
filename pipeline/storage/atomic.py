"""Atomic outputs: write under a temporary sibling name, rename into place on success.

A crash or a bad input therefore never leaves a half-written dataset, model, codes array
or report where a later job would pick it up.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path

from pipeline.errors import InputError


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike, *, overwrite: bool = False):
    """Yield a temporary path next to ``final``; rename it to ``final`` when the block succeeds.

    The temporary name starts with a dot so listings and globbing skip it.
    """
    final = Path(final)
    if final.exists() and not overwrite:
        raise InputError(f"output {final} already exists; choose another path or pass --overwrite")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        yield tmp
    except BaseException:
        _remove(tmp)
        raise
    if final.exists():
        # move the old output aside first so there is never a moment with neither
        old = final.parent / f".{final.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(final, old)
        os.replace(tmp, final)
        _remove(old)
    else:
        os.replace(tmp, final)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path, overwrite=True) as tmp:
        Path(tmp).write_text(text)
