"""``dhash run PIPELINE.toml``: a scheduled batch job made of ``dhash`` steps.

A pipeline file names a working directory and a list of steps, each a ``dhash`` command
with its options (the keys of ``--config``)::

    [pipeline]
    name = "nightly"
    workdir = "../../runs/scheduled"     # relative to this file; every relative path is inside it

    [vars]                               # {name} anywhere in a step; --set name=value overrides
    inbox = "inbox/base.fvecs"

    [[steps]]
    command = "ingest"
    source = "{inbox}"
    out = "data/base.zarr"

``{date}`` (UTC day of the run, or ``--date``) and ``{pipeline}`` are always defined, so
a weekly report can go to ``reports/{date}``.

What makes it fit cron and Kubernetes CronJobs:

* **One run per working directory.** An exclusive ``flock`` on ``WORKDIR/.dhash-run/lock``
  is held for the whole run; a second run exits at once with status 75 (EX_TEMPFAIL)
  naming the holder. The kernel drops the lock when the process dies, so a killed run
  never leaves a stale lock.
* **Steps that are up to date are skipped.** After a step succeeds, a stamp records its
  exact command line and a fingerprint (files, bytes, newest mtime) of its inputs and
  output. The next run skips the step while all of these are unchanged, so a nightly run
  with no new data does nothing, and a run after a failure resumes at the failed step.
  Stamps are re-recorded after every later step, since a step may add to an earlier
  one's output (``split`` writes into the dataset). ``--force`` runs everything.
* **A killed train step resumes.** ``itq`` and ``dish`` save a checkpoint after every
  iteration; the next run finds it and resumes it (logged), finishing with the model an
  uninterrupted run gives. ``--force`` removes the checkpoint and starts over.
* **Only its own outputs are replaced.** Steps run with ``--overwrite``, but an existing
  ``out`` that this pipeline did not write (``WORKDIR/.dhash-run/outputs.json`` lists what
  it wrote) stops the run with status 2; every output is committed atomically, so a
  reader never sees a half-written one.
* **Exit status:** 0 all steps ok or skipped; 2 bad pipeline file or bad input in a step;
  1 a step crashed; 75 another run holds the lock. One line per step on stderr with a UTC
  timestamp; the whole output of the run also goes to ``WORKDIR/logs/NAME-STAMP.log`` and
  a JSON record of the steps (status, seconds) to ``WORKDIR/logs/NAME-STAMP.json``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import json
import os
import re
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from dask_hashcodes.cli import commands
from dask_hashcodes.cli.config import check_values, read_toml
from dask_hashcodes.cli.options import COMMANDS, options_of
from dask_hashcodes.data.sources import SOURCES
from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing.checkpoint import checkpoint_path, checkpoint_progress
from dask_hashcodes.storage.atomic import check_name, read_commit, remove_artifact, write_text_atomic
from dask_hashcodes.storage.fingerprint import fingerprint
from dask_hashcodes.storage.location import resolve, storage_error

EXIT_OK, EXIT_STEP_CRASHED, EXIT_BAD_INPUT, EXIT_LOCKED = 0, 1, 2, 75

# options whose values are files or directories (relative ones are resolved in the workdir)
PATH_OPTIONS = ("source", "out", "dataset", "model", "codes", "labels", "data", "performance_report")
OUTPUT_OPTIONS = ("out",)
NOT_A_STEP = ("run", "demo")
# options of the cluster, which dhash run connects once for every step
STEP_CLUSTER_KEYS = ("scheduler", "workers", "threads")
STATE_DIR = ".dhash-run"


class PipelineLocked(InputError):
    exit_code = EXIT_LOCKED


@dataclass
class Step:
    number: int
    command: str
    argv: list[str]  # the step as a dhash command line (logs, stamps)
    values: dict = field(default_factory=dict)  # dest -> typed value of every option
    inputs: list[str] = field(default_factory=list)  # absolute paths or URLs
    outputs: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"step {self.number} ({self.command})"

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.argv).encode()).hexdigest()[:16]


@dataclass
class Pipeline:
    path: Path
    name: str
    workdir: Path
    steps: list[Step]


# ------------------------------------------------------------------ reading the file --


def load_pipeline(path, *, date: str, overrides: dict | None = None, workdir=None) -> Pipeline:
    file = Path(path)
    data = read_toml(path, "pipeline file", "give the path of a TOML pipeline (see jobs/configs/)")
    unknown = set(data) - {"pipeline", "vars", "steps"}
    if unknown:
        raise InputError(
            f"pipeline file {path}: unknown table(s) {', '.join(sorted(unknown))}; use [pipeline], [vars] and [[steps]]"
        )
    for table in ("pipeline", "vars"):
        if not isinstance(data.get(table, {}), dict):
            raise InputError(f"pipeline file {path}: {table} must be a table, written [{table}]")
    head = data.get("pipeline", {})
    unknown = set(head) - {"name", "workdir"}
    if unknown:
        raise InputError(
            f"pipeline file {path}: unknown key(s) {', '.join(sorted(unknown))} in [pipeline]; "
            "it takes name and workdir"
        )
    name = check_name(str(head.get("name", file.stem)), f"pipeline file {path}: name")  # names its log files
    if workdir is not None:
        workdir = Path(workdir).resolve()  # --workdir: relative to where the run starts
    else:
        workdir = Path(head.get("workdir", "."))
        workdir = (workdir if workdir.is_absolute() else file.resolve().parent / workdir).resolve()
    if workdir.is_file() or read_commit(resolve(workdir)) is not None:
        # the run keeps its state and logs in the workdir: never inside a file or an artifact
        what = "a file" if workdir.is_file() else "a dhash artifact"
        raise InputError(f"pipeline workdir {workdir} is {what}; give a directory of its own (--workdir)")
    defined = data.get("vars", {})
    for key in overrides or {}:
        if key in ("date", "pipeline"):
            fix = "pass --date YYYY-MM-DD" if key == "date" else "set name in [pipeline]"
            raise InputError(f"--set {key}: {{{key}}} is not a [vars] entry, dhash run sets it; {fix}")
        if key not in defined:
            # a misspelt name would otherwise be ignored and the run use the file's value
            known = ", ".join(sorted(defined)) or "none"
            raise InputError(
                f"--set {key}: pipeline file {path} has no variable {key!r} (its [vars]: {known}); "
                "use one of those names, or add it under [vars]"
            )
    variables = {**defined, **(overrides or {}), "date": date, "pipeline": name}
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps or not all(isinstance(t, dict) for t in raw_steps):
        raise InputError(f"pipeline file {path} has no [[steps]] tables; add at least one step with a `command`")
    steps = []
    for number, table in enumerate(raw_steps, 1):
        table = {k: _substitute(v, variables, f"{path} step {number}") for k, v in table.items()}
        command = table.pop("command", None)
        if command not in COMMANDS or command in NOT_A_STEP:
            valid = ", ".join(c for c in COMMANDS if c not in NOT_A_STEP)
            raise InputError(
                f"pipeline file {path} step {number}: command {command!r} is not a step; use one of {valid}"
            )
        steps.append(_step(number, command, table, workdir, path))
    return Pipeline(file, name, workdir, steps)


def _substitute(value, variables: dict, where: str):
    """``"{name}"`` alone keeps the variable's type (so numbers stay numbers); inside a
    longer string it is formatted in."""
    if isinstance(value, list):
        return [_substitute(v, variables, where) for v in value]
    if not isinstance(value, str):
        return value
    whole = re.fullmatch(r"\{(\w+)\}", value)
    try:
        return variables[whole.group(1)] if whole else value.format_map(variables)
    except KeyError as exc:
        raise InputError(
            f"{where}: unknown variable {exc}; define it under [vars] or pass --set {exc.args[0]}=VALUE"
        ) from None
    except (ValueError, IndexError) as exc:
        raise InputError(f"{where}: bad placeholder in {value!r} ({exc}); write literal braces as {{{{ }}}}") from None


def _step(number, command, table, workdir, path) -> Step:
    """A step's typed option values (checked like ``--config`` keys), with relative paths
    made absolute in the workdir and ``overwrite`` on (a pipeline owns its outputs)."""

    where = f"pipeline file {path} step {number} ({command})"
    # `dhash run` connects every step to its one cluster: a step's own cluster keys would do
    # nothing, so they are refused by name (as is a config file per step)
    cluster_keys = sorted(key for key in table if key.replace("_", "-") in STEP_CLUSTER_KEYS)
    if cluster_keys:
        key = cluster_keys[0]
        raise InputError(
            f"{where}: {key} does not apply to a step (dhash run starts or joins one cluster for all its steps); "
            f"drop it from the step and give --{key.replace('_', '-')} to dhash run"
        )
    given = check_values(command, table, lambda key: where, skip=("scheduler", "config"))
    inputs, outputs = [], []
    for dest in PATH_OPTIONS:
        value = given.get(dest)
        if isinstance(value, str) and value not in SOURCES:
            if "://" not in value:
                given[dest] = value = str(workdir / value)  # absolute: workers on other hosts get it unchanged
            (outputs if dest in OUTPUT_OPTIONS else inputs).append(value)
    options = options_of(command)
    if "overwrite" in options:
        given["overwrite"] = True
    values = {dest: given.get(dest, opt.default_for(command)) for dest, opt in options.items()}
    missing = [opt.name for dest, opt in options.items() if values[dest] is None and command in opt.required]
    if missing:
        raise InputError(f"{where}: missing {', '.join(missing)}; add it to the step")
    if command in ("split", "groundtruth"):
        outputs += inputs  # they add to the dataset they read
    return Step(number, command, _as_argv(command, given), values, inputs, outputs)


def _as_argv(command: str, given: dict) -> list[str]:
    """The step as the equivalent ``dhash`` command line (shown in logs; its hash keys the stamp)."""
    argv, options = [command], options_of(command)
    for dest, value in given.items():
        opt = options[dest]
        if opt.positional:
            argv.insert(1, str(value))
        elif opt.switch:
            if value:
                argv.append(opt.flag)
        elif isinstance(value, bool):  # a true/false option (e.g. --sgh-refine false) keeps its value
            argv += [opt.flag, "true" if value else "false"]
        else:
            text = (
                json.dumps(value)
                if isinstance(value, dict)
                else (",".join(map(str, value)) if isinstance(value, list) else str(value))
            )
            argv += [opt.flag, text]
    return argv


# ------------------------------------------------------------------ state -------------


def step_location(step: Step, where, storage_options=None):
    """The Location of a step's input or output: a URL with the step's storage options (else
    the run's, else the environment's)."""
    own = step.values.get("storage_options")
    return resolve(where, storage=own if own is not None else storage_options)


class Stamps:
    """What each finished step ran on (WORKDIR/.dhash-run/stamps/KEY.json)."""

    def __init__(self, workdir: Path, storage_options=None):
        self.dir = workdir / STATE_DIR / "stamps"
        self.storage_options = storage_options  # the run's; a step's own win

    def _state(self, step: Step) -> dict:
        paths = [
            step_location(step, p, self.storage_options) if "://" in str(p) else p
            for p in [*step.inputs, *step.outputs]
        ]
        return {"argv": step.argv, "files": fingerprint(paths)}

    def up_to_date(self, step: Step) -> bool:
        file = self.dir / f"{step.key}.json"
        try:
            saved = json.loads(file.read_text())
        except (OSError, ValueError):
            return False
        state = self._state(step)
        return saved == state and all(v is not None for v in state["files"].values())

    def record(self, step: Step) -> None:

        self.dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.dir / f"{step.key}.json", json.dumps(self._state(step)))


class Outputs:
    """The outputs this pipeline has written (WORKDIR/.dhash-run/outputs.json). A step runs
    with --overwrite, but an existing ``out`` the pipeline did not write is refused: a
    scheduled job never replaces data someone else put there."""

    def __init__(self, workdir: Path, storage_options=None):
        self.file = workdir / STATE_DIR / "outputs.json"
        self.storage_options = storage_options

    def owned(self) -> set[str]:
        try:
            return set(json.loads(self.file.read_text()))
        except (OSError, ValueError):
            return set()

    def check(self, step: Step) -> None:

        for out in _step_outputs(step):
            if step_location(step, out, self.storage_options).exists() and out not in self.owned():
                raise InputError(
                    f"{step.label}: output {out} exists and was not written by this pipeline; "
                    "delete it, or give the step another out"
                )

    def record(self, step: Step) -> None:

        paths = self.owned() | set(_step_outputs(step))
        self.file.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.file, json.dumps(sorted(paths), indent=0))


def _step_outputs(step: Step) -> list[str]:
    """The step's own ``out`` (split and groundtruth add to their input dataset instead)."""
    out = step.values.get("out")
    return [out] if out and step.command in commands.OUTPUT_KINDS else []


def _checkpoint_of(step: Step, storage_options=None):
    """The Location of a train step's checkpoint (beside its model, opened with the step's
    storage options, else the run's), None for other steps."""
    outs = _step_outputs(step)
    if step.command != "train" or not outs:
        return None
    return checkpoint_path(step_location(step, outs[0], storage_options))


def _prepare_checkpoint(pipe: Pipeline, step: Step, values: dict, force: bool) -> dict:
    """A train step whose checkpoint exists resumes it; with --force it starts over."""

    ckpt = _checkpoint_of(step, values.get("storage_options"))
    if ckpt is None:
        return values
    if not ckpt.exists():
        return values
    if force:
        remove_artifact(ckpt, kind="checkpoint")  # refused, and nothing removed, unless dhash wrote all of it
        _say(pipe, f"{step.label}: --force: removed the checkpoint {ckpt}, training starts over")
        return values
    done = checkpoint_progress(ckpt)  # None: not as dhash wrote it; resuming refuses it, naming why
    _say(pipe, f"{step.label} resuming from {ckpt} (after iteration {'?' if done is None else done})")
    return {**values, "resume": True}


@contextlib.contextmanager
def run_lock(workdir: Path, pipeline: str):
    """Exclusive lock on the working directory for the whole run (see the module notes)."""
    import fcntl

    state = workdir / STATE_DIR
    state.mkdir(parents=True, exist_ok=True)
    fd = os.open(state / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown process"
            raise PipelineLocked(
                f"another dhash run holds the lock on {workdir} ({holder}); this run did nothing. "
                "Wait for it to finish, or give this pipeline its own workdir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(
            fd,
            json.dumps(
                {"pipeline": pipeline, "pid": os.getpid(), "host": socket.gethostname(), "started": _now()}
            ).encode(),
            0,
        )
        yield
    finally:
        os.close(fd)  # releases the flock


# ------------------------------------------------------------------ running -----------


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self):
        for s in self.streams:
            s.flush()


def run_pipeline(
    path,
    *,
    scheduler=None,
    workers=None,
    threads=None,
    force=False,
    dry_run=False,
    date=None,
    overrides=None,
    workdir=None,
    quiet=False,
    storage_options=None,
) -> int:
    """Run a pipeline file; returns the exit status (see the module notes). ``storage_options``
    (``dhash run --storage-options``) apply to every step that sets none of its own, and to
    the fingerprints of remote inputs and outputs."""
    date = date or dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    pipe = load_pipeline(path, date=date, overrides=overrides, workdir=workdir)
    stamps = Stamps(pipe.workdir, storage_options)
    if dry_run:
        for step in pipe.steps:
            state = "up to date, would skip" if stamps.up_to_date(step) and not force else "would run"
            print(f"{step.label}: dhash {' '.join(step.argv)}  [{state}]")
        return EXIT_OK
    with run_lock(pipe.workdir, pipe.name):
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"
        logs = pipe.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        record = {
            "pipeline": pipe.name,
            "file": str(pipe.path.resolve()),
            "workdir": str(pipe.workdir),
            "date": date,
            "started": _now(),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "steps": [],
        }
        with (
            open(logs / f"{pipe.name}-{stamp}.log", "a") as log_file,
            contextlib.redirect_stdout(_Tee(sys.stdout, log_file)),
            contextlib.redirect_stderr(_Tee(sys.stderr, log_file)),
        ):
            status = _run_steps(
                pipe,
                stamps,
                record,
                {
                    "scheduler": scheduler,
                    "workers": workers,
                    "threads": threads,
                    "quiet": quiet,
                    "storage_options": storage_options,
                },
                force,
            )
        record.update(finished=_now(), exit_code=status)
        from dask_hashcodes.storage.atomic import write_text_atomic

        write_text_atomic(logs / f"{pipe.name}-{stamp}.json", json.dumps(record, indent=1))
        return status


def _say(pipe: Pipeline, message: str) -> None:
    print(f"{_now()} dhash run {pipe.name}: {message}", file=sys.stderr, flush=True)


def _run_steps(pipe, stamps, record, cluster_args, force) -> int:
    client, done = None, []
    outputs = Outputs(pipe.workdir, cluster_args["storage_options"])
    _say(pipe, f"{len(pipe.steps)} steps in {pipe.workdir} (pid {os.getpid()})")
    try:
        for step in pipe.steps:
            entry = {"step": step.number, "command": step.command, "argv": step.argv}
            record["steps"].append(entry)
            if not force and stamps.up_to_date(step):
                done.append(step)
                entry.update(status="skipped", seconds=0.0)
                _say(pipe, f"{step.label} skipped: inputs and output unchanged since it last ran")
                continue
            try:
                # everything that needs no data, before the cluster starts (and only once:
                # execute is told it was done)
                outputs.check(step)
                values = dict(step.values)
                if values.get("storage_options") is None:  # a step's own options win over the run's
                    values["storage_options"] = cluster_args["storage_options"]
                values = _prepare_checkpoint(pipe, step, values, force)
                values["quiet"] = values["quiet"] or cluster_args["quiet"]
                commands.check_before_work(step.command, values)
            except Exception as exc:  # noqa: BLE001 - bad input (also refused credentials...) stops the run, one line
                bad_input = (
                    exc if isinstance(exc, InputError) else storage_error(exc, urls=[*step.inputs, *step.outputs])
                )
                if bad_input is None:
                    raise
                message = commands.cli_message(bad_input)
                _say(pipe, f"{step.label} FAILED with status {EXIT_BAD_INPUT}: {message}; later steps not run")
                entry.update(status="failed", exit_code=EXIT_BAD_INPUT, error=message, seconds=0.0)
                return EXIT_BAD_INPUT
            if commands.needs_cluster(step.command, values) and client is None:
                # one cluster for the whole run, started on the first step that needs it
                from dask_hashcodes.distributed.cluster import connect

                client = connect(
                    cluster_args["scheduler"],
                    workers=cluster_args["workers"],
                    threads=cluster_args["threads"],
                    quiet=cluster_args["quiet"],
                )
            _say(pipe, f"{step.label} started: dhash {' '.join(step.argv)}")
            started = time.perf_counter()
            try:
                code = commands.execute(step.command, values, checked=True)
            except Exception as exc:  # noqa: BLE001 - a crashed step ends the run with status 1, traceback in the log
                bad_input = storage_error(exc, urls=[*step.inputs, *step.outputs])
                if bad_input is not None:  # refused credentials, a missing bucket...: bad input, one line
                    message = commands.cli_message(bad_input)
                    print(f"error: {message}", file=sys.stderr)
                    code, entry["error"] = EXIT_BAD_INPUT, message
                else:
                    traceback.print_exc()
                    code, entry["error"] = EXIT_STEP_CRASHED, f"{type(exc).__name__}: {exc}"
            entry.update(
                seconds=round(time.perf_counter() - started, 3), status="ok" if code == 0 else "failed", exit_code=code
            )
            if code != 0:
                _say(pipe, f"{step.label} FAILED with status {code} after {entry['seconds']:.1f}s; later steps not run")
                ckpt = _checkpoint_of(step, values["storage_options"])
                if ckpt is not None and ckpt.exists():
                    # the next run resumes it; a checkpoint it cannot resume needs --force
                    _say(pipe, f"{step.label}: its checkpoint is kept for the next run; --force restarts the step")
                return code
            done.append(step)
            outputs.record(step)
            for finished in done:  # later steps may add to earlier outputs (split writes into the dataset)
                stamps.record(finished)
            _say(pipe, f"{step.label} done in {entry['seconds']:.1f}s")
        _say(pipe, "all steps done")
        return EXIT_OK
    finally:
        if client is not None:
            from dask_hashcodes.distributed.cluster import disconnect

            disconnect(client)
