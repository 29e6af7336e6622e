"""Kill a job at a chosen point: the helper of the tests that interrupt training for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def kill_after_checkpoint(argv: list[str], state: Path, iteration: int = 3, timeout: float = 180) -> int:
    """Run ``python -m dask_hashcodes.cli ARGV`` in its own process group and SIGKILL the whole group (the
    client with its scheduler and workers) once the checkpoint ``state`` holds ``iteration``
    or later. Returns the iteration it was stopped at; fails if the job ended first."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dask_hashcodes.cli", *map(str, argv)],
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stopped_at = None
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        try:
            stopped_at = json.loads(state.read_text())["iteration"]
        except (OSError, ValueError, KeyError):
            stopped_at = None
        if stopped_at is not None and stopped_at >= iteration:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.01)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "the job finished before it could be stopped"
    return stopped_at
