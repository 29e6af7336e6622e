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

import pytest

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


def test_local_cluster_workers_start_with_ctrl_c_held(tmp_path):
    """The worker processes of the command's local cluster start with SIGINT blocked (then
    ignored), so a Ctrl-C in the moment one is importing never prints its traceback over the
    command's one line. Read from /proc in a fresh process, as the command starts them."""
    script = tmp_path / "masks.py"
    script.write_text(
        "import os\n"
        "from dask_hashcodes.distributed.cluster import connect, disconnect\n"
        "if __name__ == '__main__':\n"
        "    client = connect(None, workers=2, threads=1, quiet=True)\n"
        "    for pid in client.run(os.getpid).values():\n"
        "        fields = dict(line.split(':', 1) for line in open(f'/proc/{pid}/status').read().splitlines())\n"
        "        print(fields['SigBlk'].strip())\n"
        "    disconnect(client)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    masks = done.stdout.split()
    assert done.returncode == 0 and len(masks) == 2, done.stderr
    assert all(int(mask, 16) & (1 << (signal.SIGINT - 1)) for mask in masks), masks


def _worker_log_passes() -> dict:
    """In a worker: which records its "distributed.worker" logger lets through."""
    import logging

    logger = logging.getLogger("distributed.worker")

    def passes(message):
        return bool(logger.filter(logger.makeRecord(logger.name, logging.ERROR, __file__, 0, message, (), None)))

    return {
        "heartbeat": passes("Failed to communicate with scheduler during heartbeat."),
        "other": passes("Unexpected exception during heartbeat. Closing worker."),
    }


def test_embedded_cluster_workers_drop_failed_heartbeat_reports_only():
    """A worker of the command's own cluster whose heartbeat fails (the scheduler is closing
    with the command, or a busy machine delays it) prints nothing over the command's one
    line; its other errors still print."""
    from dask_hashcodes.distributed.cluster import connect, disconnect

    client = connect(None, workers=2, threads=1, quiet=True)
    try:
        seen = client.run(_worker_log_passes)
    finally:
        disconnect(client)
    assert len(seen) == 2 and all(v == {"heartbeat": False, "other": True} for v in seen.values()), seen


def test_a_stopped_jobs_temporary_written_again_by_a_late_task_is_removed_after_the_close(tmp_path):
    """A job stops (an interruption): its temporary is removed, a task still running writes
    into it again and is ended before it can clean up; closing the job's cluster removes it
    once more, and nothing else beside it."""
    from dask_hashcodes.storage.atomic import atomic_output, remove_stopped_temporaries
    from dask_hashcodes.storage.location import resolve

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("not dhash's")
    written = []
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(resolve(tmp_path / "out.zarr"), kind="dataset") as tmp:
            written.append(tmp)
            raise KeyboardInterrupt
    (late,) = written
    os.makedirs(os.path.join(late.url, "features", "c"))  # the late task's chunk directory
    remove_stopped_temporaries()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    assert (tmp_path / "mine" / "keep.txt").read_text() == "not dhash's"


def test_importing_the_cli_leaves_ctrl_c_alone_outside_the_command():
    """A process that is neither the dhash command nor one of its workers (a test runner, a
    notebook) keeps its Ctrl-C when it imports dask_hashcodes.cli, even when it holds an
    "__mp_main__" alias of its main module (as some libraries add): a command it starts
    would otherwise inherit the ignored signal and run on through Ctrl-C."""
    probe = (
        "import signal, sys; sys.modules['__mp_main__'] = sys.modules['__main__']; import dask_hashcodes.cli; "
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "True", done.stderr
