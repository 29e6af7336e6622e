"""No command destroys, changes or creates anything but its declared outputs.

A tool run from cron over people's storage must never lose their data. Rather than one
test per remembered accident, every command that writes (checked against the CLI's own
command and option tables, so a new command or output option cannot be missed) is pointed,
option by option, at every kind of existing path a user may have: a home-like tree with a
stray commit record and a stale writer record, plain files, an empty directory, symlinks to
both, real dhash artifacts holding the user's own files. Always with ``--overwrite`` where
the command has it. Afterwards every pre-existing entry of the sandbox is byte-identical,
and whatever is new lies inside the command's declared outputs. Names and paths are also
generated (hypothesis), not only listed.

The named tests at the end reproduce, one by one, the ways dhash used to lose data.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dask_hashcodes.cli.main import main
from dask_hashcodes.cli.options import COMMANDS, options_of

pytestmark = pytest.mark.slow

# command -> the options whose value names something it writes (a path, or a name that
# becomes a path component). Checked against the CLI below.
WRITING_COMMANDS = {
    "ingest": ("out", "performance-report"),
    "synth": ("out", "performance-report"),
    "split": ("name", "performance-report"),
    "groundtruth": ("performance-report",),
    "train": ("out", "codes", "performance-report"),
    "encode": ("out", "performance-report"),
    "index": ("out", "performance-report"),
    "search": ("out", "performance-report"),
    "evaluate": ("out", "performance-report"),
    "demo": ("out", "performance-report"),
    "run": ("workdir", "performance-report"),
}
# option names that name an output wherever they appear, and the exceptions that are inputs
OUTPUT_OPTION_NAMES = {"out", "performance-report", "workdir", "name", "codes"}
INPUT_OPTIONS = {("search", "codes"), ("index", "codes")}
# existing paths that no command may write to, whatever it is: (target, why)
TARGETS = (
    "home",  # a home-like tree: dot files, documents, a stray commit record, a stale writer record
    "notes.txt",  # a user's file
    "table.md",  # a user's Markdown file
    "empty",  # an empty directory
    "link-home",  # a symlink to the home-like tree
    "link-notes",  # a symlink to the user's file
    "model-with-notes",  # a real dhash model the user put files into
    "dataset-with-readme",  # a real dhash dataset the user put a README into
    "stale-writer",  # user files plus a writer record of a dead dhash process
)


def run(*argv) -> int:
    return main([str(a) for a in argv])


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


@pytest.fixture(scope="module")
def inputs(cluster, tmp_path_factory):
    """A small committed pipeline: dataset with a split and ground truth, an ITQ model, its
    codes and their multi-index (outside the sandbox, and checked unchanged too)."""
    from dask_hashcodes.data.synth import write_sift_synth

    base = tmp_path_factory.mktemp("inputs")
    write_sift_synth(base / "ds.zarr", 3000, seed=3, chunk_rows=1000)
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    assert run("split", "--dataset", base / "ds.zarr", "--queries", 20, "--name", "default", *sched) == 0
    assert run("groundtruth", "--dataset", base / "ds.zarr", "--split", "default", "--top-k", 10, *sched) == 0
    assert (
        run("train", "--dataset", base / "ds.zarr", "--method", "itq", "--bits", 16, "--out", base / "model", *sched)
        == 0
    )
    assert (
        run("encode", "--dataset", base / "ds.zarr", "--model", base / "model", "--out", base / "codes.zarr", *sched)
        == 0
    )
    assert run("index", "--codes", base / "codes.zarr", "--out", base / "index", *sched) == 0
    np.save(base / "src.npy", np.arange(300, dtype=np.float32).reshape(100, 3))
    return base


def make_sandbox(root: Path, inputs: Path) -> Path:
    """The canaries: every kind of existing path a user may point an output at."""
    home = root / "home"
    (home / "docs").mkdir(parents=True)
    (home / ".bashrc").write_text("export PATH=$HOME/bin:$PATH\n")
    (home / "docs" / "thesis.tex").write_text("\\section{Results}\n")
    # a copied commit record (of a real model) and a stale writer record of a dead dhash
    shutil.copy(inputs / "model" / ".dhash-commit.json", home / ".dhash-commit.json")
    (home / ".dhash-writer.json").write_text(json.dumps({"host": os.uname().nodename, "pid": _dead_pid()}))
    (home / "sift-synth").mkdir()  # where the demo would put a report
    (home / "sift-synth" / "mine.txt").write_text("not a report\n")
    (root / "notes.txt").write_text("my notes\n")
    (root / "notes.md").write_text("# my notes\n")
    (root / "table.md").write_text("| a |\n")
    (root / "empty").mkdir()
    (root / "link-home").symlink_to(home)
    (root / "link-notes").symlink_to(root / "notes.txt")
    shutil.copytree(inputs / "model", root / "model-with-notes")
    (root / "model-with-notes" / "notes.txt").write_text("lr 0.1 was better\n")
    (root / "model-with-notes" / "experiments").mkdir()
    shutil.copytree(inputs / "ds.zarr", root / "dataset-with-readme")
    (root / "dataset-with-readme" / "README.txt").write_text("do not delete\n")
    (root / "stale-writer").mkdir()
    (root / "stale-writer" / "results.csv").write_text("a,b\n1,2\n")
    (root / "stale-writer" / ".dhash-writer.json").write_text(
        json.dumps({"host": os.uname().nodename, "pid": _dead_pid(), "kind": "dataset"})
    )
    (root / "outputs").mkdir()
    return root


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under root (not following links) -> what it is and holds."""
    found = {}
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(top) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def check_untouched(before: dict, after: dict, declared: list[str]) -> None:
    """Entries of ``before`` unchanged; new entries only at or under a declared output."""
    changed = sorted(rel for rel, what in before.items() if after.get(rel) != what)
    assert not changed, f"entries changed or removed: {changed[:5]}"
    new = [rel for rel in after if rel not in before]
    # a declared output, what is inside it, or a parent directory created to hold it
    stray = [
        rel for rel in new if not any(rel == d or rel.startswith(d + "/") or d.startswith(rel + "/") for d in declared)
    ]
    assert not stray, f"entries created outside the declared outputs {declared}: {stray[:5]}"


def command_line(command: str, option: str, target: str, root: Path, inputs: Path, scheduler: str) -> list:
    """The command with ``option`` pointed at ``target`` (a sandbox entry, or a name) and its
    other outputs at fresh paths under outputs/."""
    out = root / "outputs"
    ds, model, codes = inputs / "ds.zarr", inputs / "model", inputs / "codes.zarr"
    base = {
        "ingest": ["ingest", inputs / "src.npy", "--out", out / "ds.zarr"],
        "synth": ["synth", "sift", "--n", 1000, "--out", out / "s.zarr"],
        "split": ["split", "--dataset", ds, "--queries", 10, "--name", "fresh"],
        "groundtruth": ["groundtruth", "--dataset", ds, "--split", "default", "--top-k", 10],
        "train": ["train", "--dataset", ds, "--method", "itq", "--bits", 16, "--out", out / "model"],
        "encode": ["encode", "--dataset", ds, "--model", model, "--out", out / "codes.zarr"],
        "index": ["index", "--codes", codes, "--out", out / "index"],
        "search": ["search", "--dataset", ds, "--model", model, "--codes", codes, "--out", out / "r.parquet"],
        "evaluate": [
            "evaluate",
            "--dataset",
            ds,
            "--methods",
            "lsh",
            "--bits",
            8,
            "--queries",
            10,
            "--out",
            out / "rep",
        ],
        "demo": ["demo", "--n", 2000, "--methods", "lsh", "--bits", 8, "--out", out / "demo"],
        "run": ["run", root / "outputs" / "p.toml", "--workdir", out / "work"],
    }[command]
    argv = list(base)
    value = target if option == "name" else root / target
    flag = f"--{option}"
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    if command == "train" and option == "codes":
        argv[argv.index("itq")] = "adsh"  # the method that writes codes; refused before it trains
    if "overwrite" in {o.name for o in options_of(command).values()}:
        argv.append("--overwrite")
    return argv + ["--scheduler", scheduler, "--quiet"]


def declared_outputs(command: str, option: str, target: str, root: Path) -> list[str]:
    """Where a command may create entries in the sandbox (relative paths, symlinks resolved)."""
    declared = ["outputs"]
    if command == "run" and option == "workdir":  # its state and logs, inside the workdir it was given
        workdir = Path(os.path.realpath(root / target)).relative_to(root)
        declared += [f"{workdir}/.dhash-run", f"{workdir}/logs"]
    return declared


# pointed at an empty directory the demo writes its report directories into it, as asked:
# allowed, and a full demo run, so left out here
LEGITIMATE = {("demo", "out", "empty")}


def test_the_list_covers_every_writing_command_and_output_option():
    """A new command, or a new output option of a listed one, fails here until listed."""
    assert set(WRITING_COMMANDS) == set(COMMANDS)
    for command, listed in WRITING_COMMANDS.items():
        names = {o.name for o in options_of(command).values()}
        outputs = {n for n in names & OUTPUT_OPTION_NAMES if (command, n) not in INPUT_OPTIONS}
        assert outputs == set(listed), command


@pytest.mark.parametrize("command,option", [(c, o) for c, opts in WRITING_COMMANDS.items() for o in opts])
def test_no_command_writes_over_what_it_did_not_write(command, option, inputs, cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("DHASH_DATA_DIR", str(tmp_path / "cache"))
    root = make_sandbox(tmp_path / "sandbox", inputs)
    (root / "outputs" / "p.toml").write_text(
        '[pipeline]\nname = "p"\n[[steps]]\ncommand = "ingest"\n'
        f'source = "{inputs / "src.npy"}"\nout = "{root / "home"}"\n'
    )
    inputs_before = snapshot(inputs)
    canaries = snapshot(root)  # dhash's own outputs of an earlier target may change; these never
    declared: list[str] = []
    targets = ["../../../etc/x", "a/b", "..", ".hidden", "", "x\x00y"] if option == "name" else TARGETS
    for target in targets:
        if (command, option, target) in LEGITIMATE:
            continue
        argv = command_line(command, option, target, root, inputs, cluster.scheduler_address)
        status = run(*argv)
        declared += declared_outputs(command, option, target, root)
        check_untouched(canaries, snapshot(root), declared)
        # every target is refused, but a workdir: there `dhash run` refuses its step's output
        assert status != 0, f"{' '.join(map(str, argv))} wrote over {target}"
    assert snapshot(inputs) == inputs_before


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    parts=st.lists(
        st.sampled_from(["..", ".", "home", "docs", "link-home", "notes.txt", ".dhash-commit.json", "new", "x.zarr"]),
        min_size=1,
        max_size=4,
    )
)
def test_generated_output_paths_never_touch_the_canaries(parts, inputs, cluster, tmp_path_factory):
    """encode --out at generated paths made of the sandbox's names, `..` and symlinks: either
    refused, or a new codes store at a path that did not exist; nothing else changes."""
    root = make_sandbox(tmp_path_factory.mktemp("gen") / "sandbox", inputs)
    out = root.joinpath(*parts)
    existed = os.path.lexists(out)
    before = snapshot(root)
    status = run(
        "encode", "--dataset", inputs / "ds.zarr", "--model", inputs / "model", "--out", out, "--overwrite",
        "--scheduler", cluster.scheduler_address, "--quiet",
    )  # fmt: skip
    after = snapshot(root)
    if status == 0:
        assert not existed, f"{out} existed and was replaced"
        real = Path(os.path.realpath(out))
        declared = [str(real.relative_to(root))] if real.is_relative_to(root) else []
        check_untouched(before, after, declared)
    else:
        check_untouched(before, after, [])


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.lists(st.sampled_from(list("ab.-_/\\~ \x00é$") + ["..", "../"]), max_size=8).map("".join))
def test_generated_split_names_stay_inside_the_dataset(name, inputs, tmp_path_factory):
    """A split name is one path component: any other name is refused and nothing is written."""
    from dask_hashcodes.errors import InputError
    from dask_hashcodes.storage.atomic import SAFE_NAME
    from dask_hashcodes.storage.datasets import open_dataset

    root = tmp_path_factory.mktemp("names")
    ds_path = root / "ds.zarr"
    shutil.copytree(inputs / "ds.zarr", ds_path)
    before = snapshot(root)
    try:
        open_dataset(ds_path).make_split(10, 1, name=name)
    except InputError:
        assert snapshot(root) == before
        assert not SAFE_NAME.match(name)
        return
    assert SAFE_NAME.match(name)
    new = [rel for rel in snapshot(root) if rel not in before]
    assert new and all(rel.startswith(f"ds.zarr/splits/{name}") for rel in new)


# ------------------------------------------------------------------ the named cases ----


def test_overwrite_keeps_a_model_directory_the_user_added_files_to(inputs, cluster, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(inputs / "model", model)
    (model / "notes.txt").write_text("mine")
    (model / "experiments").mkdir()
    argv = ["train", "--dataset", inputs / "ds.zarr", "--method", "itq", "--bits", 16, "--out", model]
    assert run(*argv, "--overwrite", "--scheduler", cluster.scheduler_address, "--quiet") == 2
    assert (model / "notes.txt").read_text() == "mine" and (model / "experiments").is_dir()


def test_a_copied_commit_record_does_not_make_a_directory_ours(inputs, tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".profile").write_text("x")
    shutil.copy(inputs / "ds.zarr" / ".dhash-commit.json", home / ".dhash-commit.json")
    assert run("ingest", inputs / "src.npy", "--out", home, "--overwrite", "--quiet") == 2
    err = capsys.readouterr().err
    assert ".profile" in err and err.count("\n") == 1 and (home / ".profile").exists()


def test_synth_overwrite_keeps_a_readme_inside_the_dataset(cluster, tmp_path, capsys):
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    assert run("synth", "sift", "--n", 1000, "--out", tmp_path / "s.zarr", *sched) == 0
    (tmp_path / "s.zarr" / "README.txt").write_text("keep me")
    assert run("synth", "sift", "--n", 1000, "--out", tmp_path / "s.zarr", "--overwrite", *sched) == 2
    assert "README.txt" in capsys.readouterr().err and (tmp_path / "s.zarr" / "README.txt").exists()
    (tmp_path / "s.zarr" / "README.txt").unlink()  # once it holds only what dhash wrote, it is replaced
    assert run("synth", "sift", "--n", 1000, "--seed", 1, "--out", tmp_path / "s.zarr", "--overwrite", *sched) == 0


def test_a_stale_writer_record_does_not_make_user_files_replaceable(tmp_path, inputs):
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.csv").write_text("1,2")
    (work / ".dhash-writer.json").write_text(json.dumps({"host": os.uname().nodename, "pid": _dead_pid()}))
    for extra in ([], ["--overwrite"]):
        assert run("ingest", inputs / "src.npy", "--out", work, "--quiet", *extra) == 2
        assert (work / "data.csv").read_text() == "1,2"


def test_performance_report_never_replaces_what_is_not_its_own(inputs, cluster, tmp_path):
    folder = tmp_path / "report.html"
    (folder / "keep").mkdir(parents=True)
    mine = tmp_path / "mine.html"
    mine.write_text("<html>my page</html>")
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    encode = ["encode", "--dataset", inputs / "ds.zarr", "--model", inputs / "model"]
    assert run(*encode, "--out", tmp_path / "c1", "--performance-report", folder, *sched) == 2
    assert (folder / "keep").is_dir() and not (tmp_path / "c1").exists()
    for extra in ([], ["--overwrite"]):
        assert run(*encode, "--out", tmp_path / "c2", "--performance-report", mine, *extra, *sched) == 2
        assert mine.read_text() == "<html>my page</html>"
    # its own report is replaced with --overwrite (and only with it)
    assert run(*encode, "--out", tmp_path / "c3", "--performance-report", tmp_path / "p.html", *sched) == 0
    assert run(*encode, "--out", tmp_path / "c4", "--performance-report", tmp_path / "p.html", *sched) == 2
    assert (
        run(*encode, "--out", tmp_path / "c4", "--performance-report", tmp_path / "p.html", "--overwrite", *sched) == 0
    )


def test_split_names_cannot_leave_the_dataset(inputs, cluster, tmp_path):
    ds = tmp_path / "ds.zarr"
    shutil.copytree(inputs / "ds.zarr", ds)
    before = snapshot(tmp_path)
    for name in ("../../x", "a/b", "..", "../splits/default"):
        assert run("split", "--dataset", ds, "--queries", 5, "--name", name, "--overwrite", "--scheduler",
                   cluster.scheduler_address, "--quiet") == 2  # fmt: skip
    assert snapshot(tmp_path) == before


def test_a_split_of_another_dataset_is_refused(inputs, cluster, tmp_path, capsys):
    from dask_hashcodes.data.synth import write_sift_synth

    other = tmp_path / "other.zarr"
    write_sift_synth(other, 3000, seed=4, chunk_rows=1000)
    shutil.copytree(inputs / "ds.zarr" / "splits" / "default", other / "splits" / "default")
    capsys.readouterr()
    argv = ["train", "--dataset", other, "--method", "itq", "--bits", 16, "--split", "default", "--out", tmp_path / "m"]
    assert run(*argv, "--scheduler", cluster.scheduler_address, "--quiet") == 2
    assert "was made from other data" in capsys.readouterr().err and not (tmp_path / "m").exists()


def test_evaluate_refusals_never_suggest_an_option_it_does_not_have(inputs, tmp_path, capsys):
    taken = tmp_path / "rep"
    taken.mkdir()
    (taken / "mine.txt").write_text("x")
    argv = ["evaluate", "--dataset", inputs / "ds.zarr", "--methods", "lsh", "--bits", 8, "--out", taken, "--quiet"]
    assert run(*argv) == 2
    err = capsys.readouterr().err
    assert "--overwrite" not in err and "mine.txt" in err


def test_a_damaged_split_has_one_remedy_that_works(inputs, cluster, tmp_path, capsys):
    """Following the error's remedy once is enough (no loop between remedies)."""
    ds = tmp_path / "ds.zarr"
    shutil.copytree(inputs / "ds.zarr", ds)
    record = ds / "splits" / "default" / ".dhash-commit.json"
    record.write_text(record.read_text()[:40])  # damaged
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    train = ["train", "--dataset", ds, "--method", "lsh", "--bits", 8, "--split", "default", "--out", tmp_path / "m"]
    capsys.readouterr()
    assert run(*train, *sched) == 2
    err = capsys.readouterr().err
    remedy = err.split("; ", 1)[1].strip()
    assert remedy == f"delete {ds / 'splits' / 'default'} and re-create it by splitting the dataset with --name default"
    shutil.rmtree(ds / "splits" / "default")
    assert run("split", "--dataset", ds, "--name", "default", "--queries", 20, *sched) == 0
    assert run(*train, *sched) == 0


def test_an_output_under_proc_is_refused_before_any_work(inputs, cluster, capsys):
    """/proc exists and looks writable to root, but nothing can be created there: found by
    creating a temporary before training, not after."""
    argv = ["train", "--dataset", inputs / "ds.zarr", "--method", "itq", "--bits", 16, "--out", "/proc/dhash-model"]
    assert run(*argv, "--scheduler", cluster.scheduler_address, "--quiet") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write /proc/dhash-model") and err.count("\n") == 1, err


def test_a_user_directory_where_a_checkpoint_goes_is_never_removed(inputs, cluster, tmp_path, capsys):
    """``OUT.checkpoint`` is derived from ``--out``: train --overwrite, the library's train and
    `dhash run --force` (which discard an interrupted run's checkpoint) all refuse a directory
    there that dhash did not write, and remove nothing."""
    from dask_hashcodes import workflows
    from dask_hashcodes.errors import InputError

    mine = tmp_path / "m.checkpoint"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "keep.txt").write_text("mine")
    train = ["train", "--dataset", inputs / "ds.zarr", "--method", "itq", "--bits", 16, "--out", tmp_path / "m"]
    assert run(*train, "--overwrite", "--scheduler", cluster.scheduler_address, "--quiet") == 2
    with pytest.raises(InputError, match="m.checkpoint"):
        workflows.train(inputs / "ds.zarr", "itq", tmp_path / "m", bits=16, overwrite=True)
    pipeline = tmp_path / "p.toml"
    pipeline.write_text(
        '[pipeline]\nname = "p"\n[[steps]]\ncommand = "train"\n'
        f'dataset = "{inputs / "ds.zarr"}"\nmethod = "itq"\nbits = 16\nout = "{tmp_path / "m"}"\n'
    )
    capsys.readouterr()
    status = run("run", pipeline, "--force", "--workdir", tmp_path / "work", "--scheduler", cluster.scheduler_address)
    assert status == 2, capsys.readouterr().err
    assert (mine / "data" / "keep.txt").read_text() == "mine" and not (tmp_path / "m").exists()
