"""Progress bars on stderr for long steps (job logs keep stdout for results).

One rule decides whether bars are shown (``show_progress``): ``progress=True`` shows them,
``progress=False`` hides them, and ``progress=None`` (every workflow's default) shows them
when someone is watching: stderr is a terminal or the code runs in a Jupyter kernel, and
the ``CI`` environment variable is not set. A workflow called with ``progress=`` settles the
rule once (``resolves_progress``) and the bars of everything it calls (Dask's task bar of a
cluster computation, tqdm bars of rows and of an iterative fit's steps) follow that answer.
The command line passes ``progress=False`` for ``--quiet`` and None otherwise, so cron
jobs, CI and ``dhash run``'s log files (stderr not a terminal) stay free of bars.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import sys

import dask

# the answer of the workflow being run (None outside any: decided by the environment)
_SHOWN: contextvars.ContextVar[bool | None] = contextvars.ContextVar("dhash_progress", default=None)


def in_ci() -> bool:
    """CI services set ``CI`` (to ``true``/``1``); some run the job under a pseudo-terminal."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def in_jupyter() -> bool:
    """Code running in a Jupyter (IPython) kernel: its stderr is shown under the cell."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()
    except AttributeError:
        return False
    return ip is not None and "IPKernelApp" in getattr(ip, "config", {})


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def show_progress(progress: bool | None = None) -> bool:
    """The one rule: True/False as given; None: the enclosing workflow's answer, else shown
    when stderr is a terminal or in Jupyter, and not in CI."""
    if progress is None:
        progress = _SHOWN.get()
    if progress is not None:
        return bool(progress)
    return not in_ci() and (_stderr_is_terminal() or in_jupyter())


def resolves_progress(workflow):
    """Decorate a function taking ``progress=`` (default None): the rule is applied once at
    the call, the function receives the answer as a bool, and every bar below it (also
    those of functions that take no ``progress``, like a model's fit) follows it."""

    @functools.wraps(workflow)
    def run(*args, progress: bool | None = None, **kwargs):
        shown = show_progress(progress)
        token = _SHOWN.set(shown)
        try:
            return workflow(*args, progress=shown, **kwargs)
        finally:
            _SHOWN.reset(token)

    return run


def active_client():
    """The distributed client of this context, or None (local scheduler)."""
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None


def _has_widgets() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def compute_with_progress(obj, *, show: bool | None = None):
    """dask.compute(obj)[0], with Dask's task progress bar when a cluster is active and
    ``show_progress(show)``: a widget in Jupyter when ipywidgets is installed, else a text
    bar on stderr. The same graph is computed either way."""
    client = active_client()
    if client is None or not show_progress(show):
        return dask.compute(obj)[0]
    from distributed.diagnostics.progressbar import progress

    futures = client.compute(obj)  # a future, or a list of futures for a list
    if in_jupyter() and _has_widgets():
        from IPython.display import display

        display(progress(futures, notebook=True, multi=False))
        return client.gather(futures)
    # the text bar draws on stdout: stdout carries a command's results, so it goes to stderr
    with contextlib.redirect_stdout(sys.stderr):
        progress(futures, interval="0.5s", notebook=False)
        print(file=sys.stderr)
    return client.gather(futures)


def rows_bar(total: int, desc: str, show: bool | None = None):
    """tqdm bar counting rows (ingest streams on the client)."""
    from tqdm import tqdm  # text on stderr: a terminal shows it, and so does Jupyter (no widget needed)

    return tqdm(
        total=total,
        desc=desc,
        unit="rows",
        unit_scale=True,
        file=sys.stderr,
        disable=not show_progress(show),
        mininterval=1.0,
    )


def steps_bar(total: int, desc: str, *, initial: int = 0, show: bool | None = None):
    """tqdm bar counting the steps of an iterative fit (an iteration, an epoch, a bit) on
    stderr, under ``show_progress(show)``. A bar opened inside another (an evaluation's
    runs) is cleared when it ends; a bar of its own stays."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit="step",
        file=sys.stderr,
        disable=not show_progress(show),
        mininterval=0.5,
        leave=None,  # tqdm: kept only at position 0, i.e. when no outer bar is open
    )


def steps(iterable, desc: str, *, total: int | None = None, initial: int = 0):
    """``iterable`` (a fit's ``range`` of iterations) counted by a ``steps_bar`` that
    closes when the loop ends or breaks (converged early). ``initial``: steps already
    done (a resumed checkpoint's iterations)."""
    total = len(iterable) + initial if total is None else total
    with steps_bar(total, desc, initial=initial) as bar:
        for item in iterable:
            try:
                yield item
            finally:  # also the step the loop broke out of: it was done
                bar.update(1)


def write_line(message: str) -> None:
    """``message`` as a line on stderr above the open bars (printed plainly, a line would
    land after a bar's last drawing, and the bar be drawn over it)."""
    from tqdm import tqdm

    if getattr(tqdm, "_instances", None):  # shown bars only: a disabled bar leaves the set
        tqdm.write(message, file=sys.stderr)
        sys.stderr.flush()
    else:
        print(message, file=sys.stderr, flush=True)
