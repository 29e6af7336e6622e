"""A full disk is bad input: one line naming what was being written, and nothing left behind.

Each writing command runs against a real, nearly full filesystem (a small tmpfs mounted for
the test, topped up with a filler file), so the write fails part-way with ENOSPC from the
kernel, on the client or on a worker. Needs root to mount; skipped elsewhere.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dask_hashcodes.cli.main import main

pytestmark = pytest.mark.slow


def run(*argv) -> int:
    return main([str(a) for a in argv])


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs; ``fill(free_bytes)`` leaves about that much space on it."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here (root needed): {done.stderr.decode().strip()}")

    def fill(free_bytes: int) -> Path:
        st = os.statvfs(mount)
        filler = mount / "filler"
        filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - free_bytes))
        return mount

    try:
        yield fill
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(scope="module")
def inputs(cluster, tmp_path_factory):
    from dask_hashcodes.data.synth import write_sift_synth

    base = tmp_path_factory.mktemp("inputs")
    write_sift_synth(base / "ds.zarr", 20000, seed=5, chunk_rows=5000)
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    assert run("split", "--dataset", base / "ds.zarr", "--queries", 50, "--name", "default", *sched) == 0
    assert (
        run("train", "--dataset", base / "ds.zarr", "--method", "lsh", "--bits", 64, "--out", base / "m", *sched) == 0
    )
    assert run("encode", "--dataset", base / "ds.zarr", "--model", base / "m", "--out", base / "c.zarr", *sched) == 0
    return base


# command -> (output name on the small disk, free bytes left, the command line)
CASES = {
    "synth": ("s.zarr", 1 << 20, lambda i, out: ["synth", "sift", "--n", 20000, "--out", out]),
    "encode": ("c.zarr", 32 << 10, lambda i, out: ["encode", "--dataset", i / "ds.zarr", "--model", i / "m", "--out", out]),
    "train": ("m", 8 << 10, lambda i, out: ["train", "--dataset", i / "ds.zarr", "--method", "pcah", "--bits", 64, "--out", out]),
    "search": (
        "r.parquet",
        4 << 10,
        lambda i, out: ["search", "--dataset", i / "ds.zarr", "--model", i / "m", "--codes", i / "c.zarr", "--k", 500, "--out", out],
    ),
    "evaluate": (
        "rep",
        8 << 10,
        lambda i, out: ["evaluate", "--dataset", i / "ds.zarr", "--methods", "lsh", "--bits", 8, "--queries", 20, "--out", out],
    ),
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(CASES))
def test_a_full_disk_is_one_line_and_leaves_nothing(command, inputs, small_disk, cluster, capsys):
    name, free, argv = CASES[command]
    disk = small_disk(free)
    before = sorted(p.name for p in disk.iterdir())
    capsys.readouterr()
    status = run(*argv(inputs, disk / name), "--scheduler", cluster.scheduler_address, "--quiet")
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert "no space left" in err and str(disk / name) in err, err
    assert sorted(p.name for p in disk.iterdir()) == before, [
        str(p) for p in disk.rglob("*")
    ]  # no temporary, not even an empty one


def test_empty_temporaries_of_a_failed_writer_are_removed_by_the_next_one(tmp_path):
    """An empty ``.OUT.tmp-*`` left by a writer that could not even write its record is no
    writer's work in progress after a minute: the next writer of OUT removes it."""
    from dask_hashcodes.storage.atomic import atomic_output

    old = tmp_path / ".r.tmp-0123abcd"
    old.mkdir()
    os.utime(old, (0, 0))
    fresh = tmp_path / ".r.tmp-4567cdef"
    fresh.mkdir()  # may be a writer that started a moment ago: kept
    user = tmp_path / ".r.tmp-mine"
    user.mkdir()  # not dhash's name pattern: never touched
    os.utime(user, (0, 0))
    with atomic_output(tmp_path / "r", kind="report") as tmp:
        tmp.child("report.md").write_text("x")
    assert not old.exists() and fresh.exists() and user.exists()


def test_a_symlinked_output_is_judged_and_written_at_its_target(inputs, cluster, tmp_path):
    model = tmp_path / "real-model"
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    train = ["train", "--dataset", inputs / "ds.zarr", "--method", "lsh", "--bits", 16]
    assert run(*train, "--out", model, *sched) == 0
    link = tmp_path / "link"
    link.symlink_to(model)
    assert run(*train, "--seed", 1, "--out", link, "--overwrite", *sched) == 0
    assert link.is_symlink() and (model / "model.json").exists()
    (model / "notes.txt").write_text("mine")  # now the target holds a user's file: refused
    assert run(*train, "--seed", 2, "--out", link, "--overwrite", *sched) == 2
    assert (model / "notes.txt").read_text() == "mine" and link.is_symlink()
    np.testing.assert_equal(sorted(p.name for p in tmp_path.iterdir()), ["link", "real-model"])


def test_a_full_disk_during_training_names_the_checkpoint_it_kept(inputs, small_disk, cluster, capsys):
    """ITQ checkpoints every iteration: the disk fills on a later checkpoint, whose write
    leaves nothing, while the earlier one stays. The message names that checkpoint and says a
    re-run with --resume continues from it; freeing space and doing so finishes the model."""
    disk = small_disk(56 << 10)  # one 64-bit checkpoint fits, a second beside it does not
    out, ckpt = disk / "m", disk / "m.checkpoint"
    train = ["train", "--dataset", inputs / "ds.zarr", "--method", "itq", "--bits", 64, "--n-iter", 4, "--out", out]
    train += ["--scheduler", cluster.scheduler_address, "--quiet"]
    capsys.readouterr()
    assert run(*train) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "no space left" in err, err
    assert "nothing was left behind" not in err and f"the checkpoint {ckpt} (after iteration 1) was kept" in err, err
    assert "train again with --resume to continue from it" in err, err
    assert sorted(p.name for p in disk.iterdir()) == ["filler", "m.checkpoint"]  # no temporary
    (disk / "filler").unlink()  # the remedy: free space, then resume
    assert run(*train, "--resume") == 0, capsys.readouterr().err
    assert (out / "model.json").exists() and not ckpt.exists()
