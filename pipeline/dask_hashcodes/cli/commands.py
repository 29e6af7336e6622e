"""What each ``dhash`` command does: call its workflow (pipeline/dask_hashcodes/workflows.py) with the
typed option values and print where the outputs went. Used by the command line
(pipeline/dask_hashcodes/cli/main.py) and by ``dhash run`` steps (pipeline/dask_hashcodes/cli/run.py) alike.

``values`` is a dict dest -> value holding every option of the command (defaults filled
in, see pipeline/dask_hashcodes/cli/options.py).

The library's errors name Python parameters (`` `overwrite=True` ``, see dask_hashcodes.errors);
``cli_message`` shows them as the flags that set them (``--overwrite``), through
``PARAMETER_FLAGS``, derived from the option table.
"""

from __future__ import annotations

import re
import shlex
import sys

from dask_hashcodes import workflows
from dask_hashcodes.cli.method_options import ARGUMENT_FLAGS, METHOD_COMMANDS, METHOD_OPTIONS
from dask_hashcodes.cli.options import (
    OPTIONS,
    is_set,
    method_params,
    options_of,
    refuse_unused,
)
from dask_hashcodes.distributed.cluster import REPORT_KIND, performance_report
from dask_hashcodes.distributed.progress import write_line
from dask_hashcodes.errors import PARAMETER, InputError
from dask_hashcodes.evaluation.neighbours import NeighbourSearches
from dask_hashcodes.evaluation.report import neighbour_table, quality_table
from dask_hashcodes.hashing.checkpoint import checkpoint_path
from dask_hashcodes.hashing.registry import HASHERS
from dask_hashcodes.indexes.rerank import check_rerank
from dask_hashcodes.storage.atomic import (
    OVERWRITE,
    TEMPORARY_NAME,
    check_file_output,
    check_output,
    child_inside,
    read_commit,
)
from dask_hashcodes.storage.location import resolve
from dask_hashcodes.storage.residual_index import RESIDUAL_KIND

EXIT_BAD_INPUT = 2
# what each command writes at its ``out``: an existing path is replaced only if it is this kind
# and dhash wrote all of it (storage.atomic)
OUTPUT_KINDS = {
    "ingest": "dataset",
    "synth": "dataset",
    "train": "model",
    "encode": "codes",
    "index": lambda values: {"ivf": "ivf-index", "residual": RESIDUAL_KIND}.get(values.get("kind"), "mih-index"),
    "evaluate": "report",
}  # demo: one report per dataset below out
# commands whose ``out`` is a single file: file path -> kind
FILE_OUTPUTS = {"search": lambda out: {out: "search-results"}}


# library parameters the option table does not map to one flag: those named otherwise on
# the command line (the estimators' n_bits is --bits), and validation_size, which the table
# gives two flags (mac's --validation-size, adsh's --adsh-validation-size): only mac's
# messages name it
RENAMED_PARAMETERS = {
    **{param: f"--{flag}" for param, flag in ARGUMENT_FLAGS.items()},
    "n_queries": "--queries",
    "dataset": "--dataset",
    "storage": "--storage-options",
    "validation_size": "--validation-size",
    "n_lists": "--lists",
}


def _shortest(options) -> str:
    return min((o.flag for o in options), key=lambda flag: (len(flag), flag))


def _parameter_flags() -> dict[str, str]:
    """API parameter name -> flag, by the option table's own naming: each option's
    destination (``top_k`` -> ``--top-k``), and for a method parameter the shortest flag
    that sets it in every estimator taking it (``n_similar`` -> ``--kappa-plus``,
    ``n_labeled`` -> ``--labeled``), plus ``RENAMED_PARAMETERS``. A name no one flag sets
    everywhere (``max_iter`` is ``--max-iter`` for dish, ``--dgh-max-iter`` for dgh) has no
    entry: the message keeps the parameter's name rather than show a flag that may be the
    wrong one."""
    flags: dict[str, set] = {}
    for opt in OPTIONS:
        flags.setdefault(opt.dest, set()).add(opt.flag)
    setting: dict[str, list] = {}
    for opt in METHOD_OPTIONS:
        setting.setdefault(opt.param, []).append(opt)
    for param, options in setting.items():
        everywhere = {m for opt in options for m in opt.methods}
        covering = [opt for opt in options if set(opt.methods) == everywhere]
        flags.setdefault(param, set()).add(_shortest(covering) if covering else None)
    table = {name: found.pop() for name, found in flags.items() if len(found) == 1 and None not in found}
    return {**table, **RENAMED_PARAMETERS}


def _estimator_flags() -> dict[tuple[str, str], str]:
    """(estimator class name, parameter) -> the shortest flag that sets it, for messages that
    name the estimator as well as the parameter (the constraints' "The 'rho' parameter of
    <estimator> must be ...")."""
    found: dict[tuple[str, str], list] = {}
    for opt in METHOD_OPTIONS:
        for method in opt.methods:
            found.setdefault((HASHERS[method].__name__, opt.param), []).append(opt)
    return {key: _shortest(options) for key, options in found.items()}


PARAMETER_FLAGS = _parameter_flags()
ESTIMATOR_FLAGS = _estimator_flags()


def cli_message(message) -> str:
    """A library message as the command line says it: each parameter mark with a flag
    becomes that flag (`` `overwrite=True` `` -> ``--overwrite``, `` `top_k=K` `` ->
    ``--top-k K``, `` `rerank='exact'` `` -> ``--rerank exact``, a JSON value quoted for the
    shell); other marks stay as written."""

    def flag(match) -> str:
        name, value = match.group(1), match.group(2)
        if name not in PARAMETER_FLAGS:
            return match.group(0)
        if value is None or value == "True":
            return PARAMETER_FLAGS[name]
        if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]  # a Python string: the flag takes its text
        return f"{PARAMETER_FLAGS[name]} {shlex.quote(value)}"

    def estimator_flag(match) -> str:
        param, owner, verb = match.groups()
        flag = ESTIMATOR_FLAGS.get((owner, param), PARAMETER_FLAGS.get(param))
        return match.group(0) if flag is None else f"{flag} {verb}"

    text = ESTIMATOR_PARAMETER.sub(estimator_flag, str(message))
    for advice, instead in PYTHON_ADVICE:
        text = advice.sub(instead, text)
    return PARAMETER.sub(flag, text)


# parameter validation names a parameter and its estimator in scikit-learn's words ("The
# 'n_iter' parameter of ITQ must be ...", dask_hashcodes.hashing.constraints): the command
# line says the flag
ESTIMATOR_PARAMETER = re.compile(r"The '([a-z][a-z0-9_]*)' parameter of (\w+) (must|is)")
# what messages reachable from a command say in Python terms (scikit-learn's required wording
# for a missing y, calls of fit), as the command line says it
PYTHON_ADVICE = (
    (re.compile(r"requires y to be passed, but the target y is None(?: \(the data has no labels\))?"), "needs labels, "
     "and the dataset has none"),
    (re.compile(r"(?:pass|call) fit\(X, y\)(?:,| or) "), ""),
    (re.compile(r"partition='by-label'"), "--partition by-label"),
)  # fmt: skip


def log(message: str) -> None:
    write_line(message)  # above an open progress bar, not after its last drawing


def needs_cluster(command: str, values: dict) -> bool:
    return command not in ("ingest", "run")


def kernels_to_warm(command: str, values: dict) -> tuple[str, ...]:
    """Compiled kernels beyond the scan's that the workers load as they start: a search
    through a multi-index that may run multi-index hashing (first in its trial) would
    otherwise load its kernels on the search's critical path."""
    if command != "search" or not values.get("index"):
        return ()
    names = ("k", "radius", "rerank", "candidates", "dataset", "split")
    search = {name: values[name] for name in names if values.get(name) is not None}
    return ("mih",) if workflows.may_search_by_tables(values["index"], storage=_storage(values), **search) else ()


# values ``dhash run`` fills into every step itself (its --quiet and --storage-options, and
# --overwrite and --resume: a pipeline owns its outputs and resumes its checkpoints): never
# taken for options a step gives
FILLED_IN = ("quiet", "storage_options", "overwrite", "resume")


def given_options(command: str, values: dict) -> frozenset:
    """The dests of the options given for this command: known to values parsed from a
    command line (``Values.given``); for other values (a ``dhash run`` step's), those that
    differ from the option's default, except ``FILLED_IN``."""
    given = getattr(values, "given", None)
    if given is not None:
        return given
    return frozenset(
        dest
        for dest, opt in options_of(command).items()
        if dest not in FILLED_IN and is_set(values.get(dest)) and values.get(dest) != opt.default_for(command)
    )


def check_before_work(command: str, values: dict) -> None:
    """Checks that need no data, before any cluster starts or any computation runs: options
    given that would do nothing (the option table's ``applies``, and method options for
    methods not run), option combinations, and where this command will write (writable,
    replaceable when it exists)."""

    if command == "search" and values["radius"] is not None and values["k"] is not None:
        raise InputError("give either --k (top-k search) or --radius (radius search), not both")
    given = given_options(command, values)
    refuse_unused(command, values, given)
    if command in METHOD_COMMANDS:
        method_params(command, values)  # a method option for methods this command does not run is refused
    values = {**values, **{key: _located(values, key) for key in ("out", "codes") if values.get(key)}}
    if command == "search":
        check_search_inputs(values, given)
        check_rerank(values["rerank"], values["candidates"], values["k"], values["radius"])
        if values["nprobe"] is not None and values["index"]:
            check_inverted_file(_located(values, "index"))
    if command == "index" and values["kind"] != "residual" and not values.get("codes"):
        raise InputError(
            f"dhash index --kind {values['kind']} indexes a codes store: add --codes (made by dhash encode)"
        )
    kind = OUTPUT_KINDS.get(command)
    kind = kind(values) if callable(kind) else kind
    flag = OVERWRITE if "overwrite" in values else None
    if kind is not None and values.get("out"):
        # evaluate replaces its own previous report; the others need --overwrite
        check_output(values["out"], kind=kind, overwrite=values.get("overwrite", True), flag=flag)
    if command in FILE_OUTPUTS and values.get("out"):
        for path, file_kind in FILE_OUTPUTS[command](values["out"]).items():
            check_file_output(path, kind=file_kind, overwrite=bool(values.get("overwrite")), flag=flag)
    if command == "train" and values.get("codes"):
        check_output(values["codes"], kind="codes", overwrite=bool(values.get("overwrite")), flag=flag)
    if command == "train" and values.get("out") and checkpoint_path(values["out"]).exists():
        # the checkpoint beside the model is resumed or replaced later: it must be dhash's own
        check_output(checkpoint_path(values["out"]), kind="checkpoint", overwrite=True, flag=None)
    if command == "demo":
        check_demo_output(values["out"])
    if values.get("performance_report"):
        check_file_output(
            values["performance_report"], kind=REPORT_KIND, overwrite=bool(values.get("overwrite")), flag=flag
        )


def check_search_inputs(values: dict, given) -> None:
    """A Hamming search needs --model and --codes; a search through a residual index needs
    neither (it searches the vectors) and answers top-k without re-ranking options."""
    if values["index"] and workflows.is_residual_index(_located(values, "index")):
        flags = options_of("search")
        extra = [flags[dest].flag for dest in ("model", "codes", "rerank", "candidates", "radius") if dest in given]
        if extra:
            raise InputError(
                f"{', '.join(extra)} {'does' if len(extra) == 1 else 'do'} not apply to a search through the residual "
                f"index {values['index']} (it searches the vectors and re-ranks them itself); drop "
                f"{' and '.join(extra)}"
            )
        return
    missing = [options_of("search")[dest].flag for dest in ("model", "codes") if not values.get(dest)]
    if missing:
        raise InputError(
            f"dhash search: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} required for a Hamming "
            "search (or give --index of a residual index made by dhash index --kind residual)"
        )


def check_inverted_file(index) -> None:
    """--nprobe probes the lists of an inverted file: an index that is a multi-index is refused
    (one that cannot be read is left for the search to report)."""
    record = read_commit(resolve(index))
    if record is not None and record.get("kind") == OUTPUT_KINDS["index"]({"kind": "mih"}):
        raise InputError(
            f"--nprobe sets the lists an inverted file probes, and {index} is a multi-index; drop --nprobe, or "
            "search an index made by dhash index --kind ivf"
        )


def check_demo_output(out) -> None:
    """The demo writes one report directory per dataset into a directory of its own: ``out``
    must be absent, or hold nothing but those reports (replaced as dhash's own)."""
    out = resolve(out)
    if out.exists():
        if out.is_file() or read_commit(out) is not None:
            what = "a file" if out.is_file() else f"a dhash {read_commit(out).get('kind')}"
            raise InputError(f"demo output {out} is {what}; name a directory of its own")
        others = [n for n in out.list_names() if n not in workflows.DEMO_DATASETS and not TEMPORARY_NAME.match(n)]
        if others:
            raise InputError(
                f"demo output {out} holds entries the demo did not write ({', '.join(others[:3])}); "
                "name a new directory (the demo writes one report directory per dataset into it)"
            )
    for name in workflows.DEMO_DATASETS:
        check_output(child_inside(out, name), kind="report", overwrite=True, flag=None)


def execute(command: str, values: dict, *, checked: bool = False) -> int:
    """Run one command on the current cluster: its exit status (bad input: one line, 2).
    ``checked``: the caller ran ``check_before_work`` already (before starting its cluster),
    so it is not run twice."""
    try:
        if not checked:
            check_before_work(command, values)
        with performance_report(values.get("performance_report"), overwrite=bool(values.get("overwrite"))):
            status = RUN[command](values) or 0
        if values.get("performance_report"):
            log(f"performance report: {values['performance_report']}")
        return status
    except InputError as exc:
        print(f"error: {cli_message(exc)}", file=sys.stderr)
        return getattr(exc, "exit_code", EXIT_BAD_INPUT)


def _located(values: dict, key: str):
    """The location option ``key`` (a URL resolved with the command's storage options)."""
    where = values[key]
    return resolve(where, storage=values.get("storage_options")) if "://" in str(where) else where


def _storage(values: dict):
    """The command's storage options (None: the environment's), passed to its workflow."""
    return values.get("storage_options")


def _progress(values) -> bool | None:
    """--quiet: no bars; else the workflows' rule (bars when stderr is a terminal, not in CI)."""
    return False if values["quiet"] else None


def pick(values: dict, *names) -> dict:
    """The named option values, as keyword arguments of a workflow (same names)."""
    return {name: values[name] for name in names}


def _dataset(values, name=None):
    return workflows.load_dataset(
        name or values["dataset"],
        n=values.get("n"),
        seed=values.get("seed", 0),
        chunk_rows=values.get("chunk_rows"),
        progress=_progress(values),
        storage=_storage(values),
    )


def ingest(values):
    options = pick(values, "format", "column", "labels", "label_column", "chunk_rows", "overwrite")
    ds = workflows.ingest(
        values["source"], values["out"], progress=_progress(values), storage=_storage(values), **options
    )
    print(f"dataset: {ds.path} ({ds.n} x {ds.d} {ds.dtype}, labels: {ds.has_labels})")


def synth(values):
    import time

    started = time.perf_counter()
    options = pick(values, "n", "seed", "chunk_rows", "overwrite")
    ds = workflows.synth(values["kind"], values["out"], progress=_progress(values), storage=_storage(values), **options)
    secs = time.perf_counter() - started
    print(f"dataset: {ds.path} ({ds.n} x {ds.d} {ds.dtype}) in {secs:.1f}s ({ds.n / secs:,.0f} rows/s)")


def split(values):
    s = workflows.split(_dataset(values), **pick(values, "queries", "seed", "name", "overwrite"))
    print(
        f"split {s.name}: {s.n_query} queries, {s.n_database} database rows, "
        f"seed {values['seed']}, sha256 {s.manifest['query_sha256'][:16]}"
    )


def groundtruth(values):
    ds = _dataset(values)
    options = pick(values, "split", "top_k", "top_percent")
    truth = workflows.groundtruth(ds, progress=_progress(values), **options)
    print(
        f"ground truth: {ds.path}/groundtruth ({ds.get_split(values['split']).n_query} queries x "
        f"{truth.description['k']} neighbours, stored as {truth.description['form']})"
    )


def train(values):
    options = pick(values, "bits", "seed", "split", "overwrite", "resume")
    params = method_params("train", values)
    model = workflows.train(
        _dataset(values),
        values["method"],
        values["out"],
        params=params,
        codes=values.get("codes"),
        progress=_progress(values),
        storage=_storage(values),
        **options,
    )
    stats = model.training_stats_
    secs, passes, rows = stats["train_seconds"], stats.get("passes", 1), stats["n_train"]
    print(
        f"model: {values['out']} ({model.method}, {model.n_bits} bits, id {model.model_id}, {secs:.1f}s, "
        f"{passes} passes over {rows:,} rows: {passes * rows / secs:,.0f} rows/s)"
    )


def encode(values):
    ds = _dataset(values)
    done = workflows.encode(
        ds,
        values["model"],
        values["out"],
        overwrite=values["overwrite"],
        progress=_progress(values),
        storage=_storage(values),
    )
    print(
        f"codes: {done.path} ({done.n} x {done.code_size} bytes) in {done.seconds:.1f}s "
        f"({done.n / done.seconds:,.0f} rows/s)"
    )


def index(values):
    if values["kind"] == "residual":
        built = workflows.residual_index(
            _dataset(values), values["out"], split=values["split"], lists=values["lists"], rotation=values["rotation"],
            seed=values["seed"], tune_rows=values["tune_rows"] or 0,
            target_recall=values["target_recall"] or 0.9,
            overwrite=values["overwrite"], progress=_progress(values), storage=_storage(values),
        )  # fmt: skip
        tuning = built.tuning
        if tuning is not None:
            print(
                f"tuned on {values['tune_rows']:,} validation rows (leave-one-out): nprobe {tuning.nprobe}, eps "
                f"{tuning.eps}, recall@10 {tuning.recall:.3f} at {tuning.queries_per_second:,.0f} queries/s"
                + ("" if tuning.reached else f" (target {tuning.target} not reached)")
            )
        print(
            f"index: {built.path} ({built.n:,} rows, {built.n_lists:,} lists, {built.ram_bytes_per_vector:.1f} bytes "
            f"of RAM per row when searched) in {built.seconds:.1f}s"
        )
        return
    done = workflows.index(
        values["codes"], values["out"], kind=values["kind"], substrings=values["substrings"],
        dataset=values.get("dataset"), lists=values["lists"], quantiser=values["quantiser"],
        kmeans_rows=values["kmeans_rows"],
        quantiser_dims=values["quantiser_dims"], seed=values["seed"], overwrite=values["overwrite"],
        progress=_progress(values), storage=_storage(values),
    )  # fmt: skip
    parts = f"{done.substrings} substring tables per shard"
    if done.kind == "ivf" and done.quantiser == "codes":
        parts = f"{done.n_lists:,} lists, centroids in code space"
    elif done.kind == "ivf":
        projected = done.quantiser_dims < done.d
        parts = f"{done.n_lists:,} lists" + (
            f" in {done.quantiser_dims} of {done.d} principal directions" if projected else ""
        )
    print(f"index: {done.path} ({done.n:,} codes, {parts}) in {done.seconds:.1f}s")


def search(values):
    if values["index"] and workflows.is_residual_index(_located(values, "index")):
        options = pick(values, "split", "k", "nprobe", "recall", "overwrite")
        done = workflows.search_vectors(_dataset(values), values["index"], values["out"], storage=_storage(values),
                                        **options)  # fmt: skip
        print(
            f"results: {done.path} ({done.n_queries} queries x {done.n_database:,} vectors, {done.rows} rows) in "
            f"{done.seconds:.2f}s ({done.n_queries / done.seconds:,.0f} queries/s on one thread) by {done.searched_by}"
        )
        if done.recall is not None:
            print(f"recall@{done.k} of the exact Euclidean top-{done.k}: {done.recall:.4f}")
        return
    where = (values["model"], values["codes"], values["out"])
    options = pick(values, "split", "k", "radius", "index", "nprobe", "rerank", "candidates", "recall", "overwrite")
    done = workflows.search(_dataset(values), *where, progress=_progress(values), storage=_storage(values), **options)
    print(
        f"results: {done.path} ({done.n_queries} queries x {done.n_database:,} codes, {done.rows} rows) in "
        f"{done.seconds:.2f}s ({done.n_queries * done.n_database / done.seconds / 1e9:.2f} G query-code pairs/s) "
        f"by {done.searched_by}"
    )
    if done.recall is not None:
        print(f"recall@{done.k} of the exact Euclidean top-{done.k}: {done.recall:.4f}")


def _evaluate_options(command, values) -> dict:
    return {
        **pick(values, "methods", "bits", "queries", "seed", "ks", "top_k", "top_percent"),
        "params": method_params(command, values),
        "evaluation_options": pick(values, "dish2_dictionaries"),  # how particular methods are scored
        "neighbours": _neighbour_searches(values),
        "log_lines": None if values["quiet"] else log,
    }


def _neighbour_searches(values):
    if not values.get("recall_at"):
        return None
    return NeighbourSearches(
        recall_at=values["recall_at"], rerank_candidates=tuple(values["rerank_candidates"]),
        ivf_lists=values["ivf_lists"], ivf_nprobes=tuple(values["ivf_nprobes"]),
    )  # fmt: skip


def _print_report(ds_name: str, report: dict, out) -> None:

    print(
        f"\n## {ds_name}: {report['dataset']['n']} points, {report['split']['n_query']} queries, ground truth "
        f"{report['ground_truth']['kind']}\n"
    )
    print(quality_table(report))
    if neighbour_table(report):
        print("\n" + neighbour_table(report), end="")
    print(f"\nreport: {out}/report.json, report.md, " + ", ".join(report["plots"]))


def evaluate(values):
    ds = _dataset(values)
    options = _evaluate_options("evaluate", values)
    report = workflows.evaluate(
        ds,
        out=values["out"],
        ground_truth=values["ground_truth"],
        progress=_progress(values),
        storage=_storage(values),
        **options,
    )
    _print_report(ds.source, report, values["out"])


def demo(values):
    options = _evaluate_options("demo", values)
    where = pick(values, "out", "n", "chunk_rows")
    reports = workflows.demo(progress=_progress(values), storage=_storage(values), **where, **options)
    for name, report in reports.items():
        _print_report(name, report, f"{values['out']}/{name}")


RUN = {
    "ingest": ingest,
    "synth": synth,
    "split": split,
    "groundtruth": groundtruth,
    "train": train,
    "encode": encode,
    "index": index,
    "search": search,
    "evaluate": evaluate,
    "demo": demo,
}
