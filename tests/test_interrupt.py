"""Ctrl-C at any moment of a ``dhash`` command: while Python imports the CLI, while the local
cluster starts, and once the work runs, the command prints the one line ``error: interrupted``,
exits with status 130 and leaves no unfinished output behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

DHASH = Path(sys.executable).with_name("dhash")  # the console script, as a user runs it
STEPS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)  # seconds after the start


def _interrupt_after(delay: float, where: Path) -> tuple[int, str, bool]:
    """(exit status, stderr, whether the work had begun) of ``dhash synth`` sent Ctrl-C
    ``delay`` seconds after it started, as a terminal sends it: to its whole process group."""
    where.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(where), "DHASH_DATA_DIR": str(where)}
    argv = [DHASH, "synth", "sift", "--n", 5_000_000, "--chunk-rows", 20_000, "--out", where / "s.zarr"]
    proc = subprocess.Popen(
        [str(a) for a in [*argv, "--workers", 1, "--threads", 1, "--quiet"]],
        cwd=where,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        time.sleep(delay)
        working = any(where.glob(".s.zarr*")) or (where / "s.zarr").exists()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err, working


def test_ctrl_c_through_start_up_and_into_work_is_one_line(tmp_path):
    """One run per delay, from the imports until the synth is writing its dataset."""
    seen = []
    for delay in STEPS:
        where = tmp_path / f"after-{delay}"
        status, err, working = _interrupt_after(delay, where)
        seen.append(delay)
        assert status == 130 and err == "error: interrupted\n", f"Ctrl-C after {delay}s: status {status}\n{err}"
        left = sorted(p.name for p in where.glob("*s.zarr*"))
        assert left == [], f"Ctrl-C after {delay}s left {left}"  # unfinished outputs are removed
        if working:
            break
    assert working, f"the command had not begun its work after {seen[-1]}s"
