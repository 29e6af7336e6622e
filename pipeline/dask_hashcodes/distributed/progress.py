"""Progress bars on stderr for long steps (job logs keep stdout for results)."""

from __future__ import annotations

import contextlib
import sys

import dask


def active_client():
    """The distributed client of this context, or None (local scheduler)."""
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None


def compute_with_progress(obj, *, show: bool = True):
    """dask.compute(obj)[0], with Dask's task progress bar on stderr when a cluster is active."""
    client = active_client()
    if client is None or not show:
        return dask.compute(obj)[0]
    from distributed.diagnostics.progressbar import progress

    futures = client.compute(obj)  # a future, or a list of futures for a list
    with contextlib.redirect_stdout(sys.stderr):
        progress(futures, interval="0.5s")
        print(file=sys.stderr)
    return client.gather(futures)


def rows_bar(total: int, desc: str, show: bool = True):
    """tqdm bar counting rows (ingest streams on the client)."""
    from tqdm import tqdm

    return tqdm(
        total=total, desc=desc, unit="rows", unit_scale=True, file=sys.stderr, disable=not show, mininterval=1.0
    )


def steps_bar(total: int, desc: str):
    """tqdm bar counting the steps of an iterative fit (a network epoch, a pass over the
    chunks) on stderr, shown when the ``pipeline`` logger reports INFO: the command line
    unless --quiet; in Python, after ``logging.getLogger("dask_hashcodes").setLevel("INFO")``."""
    import logging

    from tqdm import tqdm

    show = logging.getLogger("dask_hashcodes").isEnabledFor(logging.INFO)
    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr, disable=not show, mininterval=1.0)
