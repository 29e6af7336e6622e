"""Progress bars: shown on a terminal, never in a pipe or with --quiet (one rule,
dask_hashcodes.distributed.progress.show_progress), and never a change in the results."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import numpy as np
import pytest

from dask_hashcodes.distributed import progress as bars
from dask_hashcodes.distributed.cluster import dashboard_message

DHASH = [sys.executable, "-m", "dask_hashcodes.cli"]
# tqdm's bar ("42%|####") or Dask's ("[####   ] | 42% Completed")
BAR_MARKS = (b"%|", b"% Completed")
# each command's own bar: the fit's iterations, Dask's bar of the passes, the (method, bits) runs
OWN_BAR = {"train": b"ITQ 16 bits: iterations", "groundtruth": b"% Completed", "evaluate": b"(method, bits) runs"}


def _environment() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CI"}  # CI would hide the bars on the terminal too
    return env


def _read_until_exit(proc, fd) -> bytes:
    """Everything the child writes to the pty until it exits (a pty is not a pipe: read it
    while the child runs, or a full buffer blocks the child)."""
    out = bytearray()
    while True:
        chunk = b""
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: every holder of the terminal's other end closed it
                pass
            out += chunk
        if not chunk and proc.poll() is not None:
            return bytes(out)
        if ready and not chunk:
            time.sleep(0.05)  # a closed end stays readable: wait for the exit without spinning


def dhash_on_terminal(args, cwd) -> tuple[int, bytes, bytes]:
    """(status, stdout, stderr) of ``dhash ARGS`` with stderr on a pseudo-terminal."""
    main, child = os.openpty()
    # a new pty is 0 x 0, where tqdm draws a bar of no width: give it a terminal's size
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    try:
        proc = subprocess.Popen(
            [*DHASH, *args], stdout=subprocess.PIPE, stderr=child, stdin=subprocess.DEVNULL, cwd=cwd, env=_environment()
        )
        os.close(child)
        child = None
        stderr = _read_until_exit(proc, main)
        return proc.wait(timeout=300), proc.stdout.read(), stderr
    finally:
        if child is not None:
            os.close(child)
        os.close(main)


def dhash_here(args, monkeypatch, terminal: bool) -> tuple[int, bytes]:
    """(status, stderr) of ``dhash ARGS`` run in this process (``main``) with sys.stderr on a
    pseudo-terminal or on a pipe: the same CLI code on a real terminal or pipe, without
    starting another Python (each costs seconds of imports)."""
    import threading

    from dask_hashcodes.cli.main import main

    monkeypatch.delenv("CI", raising=False)  # CI would hide the bars on the terminal too
    if terminal:
        read_end, write_end = os.openpty()
        fcntl.ioctl(write_end, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    else:
        read_end, write_end = os.pipe()
    out = bytearray()

    def drain():  # read while the command runs: a full buffer would block it
        while True:
            try:
                chunk = os.read(read_end, 65536)
            except OSError:  # EIO: the terminal's other end closed
                return
            if not chunk:
                return
            out.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stream = open(write_end, "w", buffering=1)  # noqa: SIM115 - closed below, after the command
    try:
        assert stream.isatty() == terminal
        monkeypatch.setattr(sys, "stderr", stream)
        status = main([str(a) for a in args])
    finally:
        monkeypatch.setattr(sys, "stderr", sys.__stderr__)
        stream.close()
        reader.join(timeout=30)
        os.close(read_end)
    return status, bytes(out)


def _has_bar(stderr: bytes) -> bool:
    return any(mark in stderr for mark in BAR_MARKS)


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory, cluster):
    """A 3000-row sift-synth dataset in 1000-row chunks with a 50-query split."""
    from distributed import Client

    from dask_hashcodes.data.synth import write_sift_synth

    where = tmp_path_factory.mktemp("progress")
    with Client(cluster):
        ds = write_sift_synth(where / "s.zarr", 3000, chunk_rows=1000)
    ds.make_split(50, 0, name="default")
    return where, str(ds.path)


def _command(command: str, path: str, where: Path, run: int) -> list:
    """``dhash COMMAND`` on the small dataset; each ``run`` its own output and ground truth
    (K = 10 + run), so each run computes rather than finds an earlier run's results."""
    k = str(10 + run)
    return {
        "train": ["train", "--dataset", path, "--method", "itq", "--bits", "16", "--n-iter", "5", "--split",
                  "default", "--out", str(where / f"itq16-{run}")],
        "groundtruth": ["groundtruth", "--dataset", path, "--split", "default", "--top-k", k],
        "evaluate": ["evaluate", "--dataset", path, "--methods", "itq", "--bits", "16", "--n-iter", "5",
                     "--queries", "50", "--top-k", k, "--ks", "10", "--out", str(where / f"report-{run}")],
    }[command]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("command", ["train", "groundtruth", "evaluate"])
def test_long_commands_show_progress_on_a_terminal_only(small_dataset, cluster, command, monkeypatch):
    """On a terminal: a bar (the command started as a user starts it). With --quiet on the
    terminal, or stderr to a pipe (a log, CI, cron): none (the command's code run in this
    process, its stderr on a real terminal or pipe). The shared test cluster (--scheduler)
    keeps each run cheap."""
    where, path = small_dataset
    scheduler = ["--scheduler", cluster.scheduler_address]

    status, _, stderr = dhash_on_terminal([*_command(command, path, where, 0), *scheduler], where)
    assert status == 0, stderr.decode(errors="replace")
    assert _has_bar(stderr), stderr.decode(errors="replace")
    assert OWN_BAR[command] in stderr, stderr.decode(errors="replace")

    monkeypatch.chdir(where)
    status, stderr = dhash_here([*_command(command, path, where, 1), *scheduler, "--quiet"], monkeypatch, True)
    assert status == 0, stderr.decode(errors="replace")
    assert not _has_bar(stderr), stderr.decode(errors="replace")

    status, stderr = dhash_here([*_command(command, path, where, 2), *scheduler], monkeypatch, False)
    assert status == 0, stderr.decode(errors="replace")
    assert not _has_bar(stderr), stderr.decode(errors="replace")
    assert b"iteration" in stderr or command == "groundtruth"  # the log lines stay; only the bars go


def test_one_rule_decides(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(bars, "_stderr_is_terminal", lambda: True)
    assert bars.show_progress(None) and not bars.show_progress(False)
    monkeypatch.setenv("CI", "true")
    assert not bars.show_progress(None) and bars.show_progress(True)
    monkeypatch.setenv("CI", "false")
    assert bars.show_progress(None)
    monkeypatch.setattr(bars, "_stderr_is_terminal", lambda: False)
    assert not bars.show_progress(None)


def test_a_workflow_settles_the_rule_for_everything_it_calls(monkeypatch):
    seen = []

    @bars.resolves_progress
    def inner(*, progress=None):
        seen.append(("inner", progress, bars.show_progress()))

    @bars.resolves_progress
    def outer(*, progress=None):
        seen.append(("outer", progress, bars.show_progress()))
        inner()

    monkeypatch.setattr(bars, "_stderr_is_terminal", lambda: False)
    outer(progress=True)
    outer()
    assert seen == [("outer", True, True), ("inner", True, True), ("outer", False, False), ("inner", False, False)]
    assert bars.show_progress() is False  # the answer ends with the call


def test_steps_counts_a_loop_that_breaks_and_a_resumed_one(capsys):
    done = []
    for i in bars.steps(range(2, 10), "fit", initial=2):
        done.append(i)
        if i == 4:
            break
    assert done == [2, 3, 4]
    with bars.steps_bar(3, "x", show=True) as bar:
        bar.update(3)
    assert "3/3" in capsys.readouterr().err


def test_itq_with_progress_learns_the_same_rotation(monkeypatch, capsys):
    """A bar changes nothing in a fit: the same rotation with and without."""
    import dask.array as da

    from dask_hashcodes.hashing import make_hasher

    rng = np.random.default_rng(0)
    X = da.from_array(rng.standard_normal((2000, 24)).astype(np.float32), chunks=(500, 24))
    fits = []
    for shown in (False, True):
        monkeypatch.setattr(bars, "_SHOWN", bars.contextvars.ContextVar("t", default=shown))
        fits.append(make_hasher("itq", 16, random_state=3, n_iter=4).fit(X).rotation_)
    assert "ITQ 16 bits: iterations" in capsys.readouterr().err
    np.testing.assert_array_equal(fits[0], fits[1])


def test_dashboard_message_tells_how_to_tunnel(monkeypatch):
    import socket

    monkeypatch.setattr(socket, "gethostname", lambda: "node7")
    line = dashboard_message("http://127.0.0.1:40123/status")
    assert "http://127.0.0.1:40123/status" in line
    assert "ssh -L 40123:localhost:40123 node7" in line and "http://localhost:40123/status" in line
    assert "ssh -L 8787:localhost:8787 sched.example" in dashboard_message("http://sched.example:8787/status")


def test_log_lines_go_above_an_open_bar(capsys):
    with bars.steps_bar(2, "fit", show=True) as bar:
        bars.write_line("iteration 1")
        bar.update(1)
    err = capsys.readouterr().err
    assert "iteration 1\n" in err
