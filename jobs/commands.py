"""What each ``dhash`` command does: call its workflow (pipeline/workflows.py) with the
typed option values and print where the outputs went. Used by the command line
(jobs/cli.py) and by ``dhash run`` steps (jobs/run.py) alike.

``values`` is a dict dest -> value holding every option of the command (defaults filled
in, see jobs/options.py).
"""
from __future__ import annotations

import sys

from jobs.options import method_params
from pipeline import workflows
from pipeline.distributed.cluster import performance_report
from pipeline.errors import InputError

EXIT_BAD_INPUT = 2
# what each command writes at its ``out``: an existing path is replaced only if it is this kind
OUTPUT_KINDS = {"ingest": "dataset", "synth": "dataset", "train": "model", "encode": "codes",
                "search": "search-results", "evaluate": "report"}   # demo: one report per dataset below out


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def needs_cluster(command: str, values: dict) -> bool:
    if command == "bench":
        return values["stage"] in workflows.BENCH_NEEDS_CLUSTER
    return command not in ("ingest", "run")


def check_before_work(command: str, values: dict) -> None:
    """Checks that need no data, before any cluster starts or any computation runs: option
    combinations, and where this command will write (writable, replaceable when it exists)."""
    from pipeline.storage.atomic import check_output
    from pipeline.storage.location import set_storage_options
    set_storage_options(values.get("storage_options"))
    if command == "search" and values["radius"] is not None and values["k"] is not None:
        raise InputError("give either --k (top-k search) or --radius (radius search), not both")
    kind = OUTPUT_KINDS.get(command)
    if kind is not None and values.get("out"):
        # evaluate replaces its own previous report; the others need --overwrite
        check_output(values["out"], kind=kind, overwrite=values.get("overwrite", True))
    if values.get("performance_report"):
        check_output(values["performance_report"], kind="file", overwrite=True)


def execute(command: str, values: dict) -> int:
    """Run one command on the current cluster: its exit status (bad input: one line, 2)."""
    try:
        check_before_work(command, values)
        with performance_report(values.get("performance_report")):
            status = RUN[command](values) or 0
        if values.get("performance_report"):
            log(f"performance report: {values['performance_report']}")
        return status
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", EXIT_BAD_INPUT)


def _progress(values) -> bool:
    return not values["quiet"]


def _dataset(values, name=None):
    return workflows.dataset(name or values["dataset"], n=values.get("n"), seed=values.get("seed", 0),
                             chunk_rows=values.get("chunk_rows"), progress=_progress(values))


def ingest(values):
    ds = workflows.ingest(values["source"], values["out"], format=values["format"], column=values["column"],
                          labels=values["labels"], label_column=values["label_column"],
                          chunk_rows=values["chunk_rows"], overwrite=values["overwrite"], progress=_progress(values))
    print(f"dataset: {ds.path} ({ds.n} x {ds.d} {ds.dtype}, labels: {ds.has_labels})")


def synth(values):
    import time
    started = time.perf_counter()
    ds = workflows.synth(values["kind"], values["out"], n=values["n"], seed=values["seed"],
                         chunk_rows=values["chunk_rows"], overwrite=values["overwrite"], progress=_progress(values))
    secs = time.perf_counter() - started
    print(f"dataset: {ds.path} ({ds.n} x {ds.d} {ds.dtype}) in {secs:.1f}s ({ds.n / secs:,.0f} rows/s)")


def split(values):
    s = workflows.split(_dataset(values), queries=values["queries"], seed=values["seed"], name=values["name"],
                        overwrite=values["overwrite"])
    print(f"split {s.name}: {s.n_query} queries, {s.n_database} database rows, "
          f"seed {values['seed']}, sha256 {s.manifest['query_sha256'][:16]}")


def groundtruth(values):
    ds = _dataset(values)
    truth = workflows.groundtruth(ds, split=values["split"], top_k=values["top_k"], top_percent=values["top_percent"])
    print(f"ground truth: {ds.path}/groundtruth ({ds.get_split(values['split']).n_query} queries x "
          f"{truth.description['k']} neighbours, stored as {truth.description['form']})")


def train(values):
    model = workflows.train(_dataset(values), values["method"], values["out"], bits=values["bits"], seed=values["seed"],
                            split=values["split"], params=method_params("train", values),
                            overwrite=values["overwrite"], resume=values["resume"])
    stats = model.training_stats_
    secs, passes, rows = stats["train_seconds"], stats.get("passes", 1), stats["n_train"]
    print(f"model: {values['out']} ({model.method}, {model.n_bits} bits, id {model.model_id}, {secs:.1f}s, "
          f"{passes} passes over {rows:,} rows: {passes * rows / secs:,.0f} rows/s)")


def encode(values):
    done = workflows.encode(_dataset(values), values["model"], values["out"], overwrite=values["overwrite"],
                            progress=_progress(values))
    print(f"codes: {done.path} ({done.n} x {done.code_bytes} bytes) in {done.seconds:.1f}s "
          f"({done.n / done.seconds:,.0f} rows/s)")


def search(values):
    done = workflows.search(_dataset(values), values["model"], values["codes"], values["out"], split=values["split"],
                            k=values["k"], radius=values["radius"], overwrite=values["overwrite"],
                            progress=_progress(values))
    print(f"results: {done.path} ({done.n_queries} queries x {done.n_database:,} codes, {done.rows} rows) in "
          f"{done.seconds:.2f}s ({done.n_queries * done.n_database / done.seconds / 1e9:.2f} G query-code pairs/s)")


def _evaluate_options(command, values) -> dict:
    return {"methods": values["methods"], "bits": values["bits"], "queries": values["queries"], "seed": values["seed"],
            "ks": values["ks"], "params": method_params(command, values),
            "dish2_dictionaries": values["dish2_dictionaries"], "log_lines": None if values["quiet"] else log}


def _print_report(ds_name: str, report: dict, out) -> None:
    from pipeline.evaluation.report import quality_table
    print(f"\n## {ds_name}: {report['dataset']['n']} points, {report['split']['n_query']} queries, ground truth "
          f"{report['ground_truth']['kind']}\n")
    print(quality_table(report))
    print(f"\nreport: {out}/report.json, report.md, " + ", ".join(report["plots"]))


def evaluate(values):
    ds = _dataset(values)
    report = workflows.evaluate(ds, out=values["out"], ground_truth=values["ground_truth"], top_k=values["top_k"],
                                top_percent=values["top_percent"], **_evaluate_options("evaluate", values))
    _print_report(ds.source, report, values["out"])


def demo(values):
    reports = workflows.demo(values["out"], n=values["n"], top_k=values["top_k"], top_percent=values["top_percent"],
                             chunk_rows=values["chunk_rows"], progress=_progress(values),
                             **_evaluate_options("demo", values))
    for name, report in reports.items():
        _print_report(name, report, f"{values['out']}/{name}")


def bench(values):
    result = workflows.bench(values["stage"], values["out"], n=values["n"], bits=values["bits"],
                             queries=values["queries"], k=values["k"], method=values["method"],
                             iterations=values["iterations"], nodes=values["nodes"],
                             floor_repeats=values["floor_repeats"], data=values["data"],
                             threads=values["bench_threads"], seed=values["seed"])
    log(result.pop("markdown"))
    print(f"bench: {values['out']} (ratio ours/peer seconds {result['ratio_ours_over_peer_seconds']})")


RUN = {"ingest": ingest, "synth": synth, "split": split, "groundtruth": groundtruth, "train": train,
       "encode": encode, "search": search, "evaluate": evaluate, "demo": demo, "bench": bench}
