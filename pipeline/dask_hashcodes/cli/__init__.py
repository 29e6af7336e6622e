"""Batch entry points: a thin CLI over the pipeline library (``dhash``, ``python -m dask_hashcodes.cli``).

Started as the ``dhash`` command, this package is imported before the CLI's heavy imports
(Dask, NumPy, scikit-learn: seconds of start-up), so it is where Ctrl-C during start-up is
handled: one line ``error: interrupted`` and exit status 130, never a traceback from
whichever import was running. Nothing has been written yet, so the process ends at once;
``dask_hashcodes.cli.main.main`` takes Ctrl-C over when it starts (and removes unfinished outputs).
Imported in a worker process of the command's local cluster, it ignores Ctrl-C there (the
client reports it and closes the cluster); imported by anything else (a test, a notebook),
it leaves the signal alone.
"""

import os
import signal
import sys

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a process ended by Ctrl-C


def console_main() -> int:
    """The ``dhash`` console script's entry point. The command's modules are imported here,
    not when the script is: a local cluster's worker processes re-run the script as their
    main module (multiprocessing's spawn) and would otherwise each import the whole CLI
    (seconds of CPU per worker) for tasks that need only the kernels."""
    from dask_hashcodes.cli.main import main

    return main()


def _interrupted_at_start_up(signum, frame):
    os.write(2, b"error: interrupted\n")
    os._exit(EXIT_INTERRUPTED)


def _started_as_the_command() -> bool:
    """True when this process is the ``dhash`` console script or ``python -m dask_hashcodes.cli``
    (while ``-m`` imports the package, ``sys.argv[0]`` is "-m")."""
    script = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    return os.path.basename(script).removesuffix(".exe") == "dhash" or sys.argv[:1] == ["-m"]


if getattr(sys.modules.get("__main__"), "__name__", None) == "__mp_main__":
    # a worker process of the command's local cluster (multiprocessing's spawn re-runs the
    # dhash script in it as __mp_main__): Ctrl-C in a terminal reaches it too, and the client
    # handles it alone. (Only the main module's own name tells: other processes, a test
    # runner or a notebook, may hold an "__mp_main__" alias of their main module.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
elif _started_as_the_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_at_start_up)
