"""``python -m benchmarks search|groundtruth|train|encode``: one stage of ours against its
peer (FAISS, or the plain-pass floor) on the same data, written as BASE.json and a Markdown
table BASE.md (``benchmarks.harness.runs``). Run it from the root of a checkout with the
``bench`` extra installed (``pip install -e '.[bench]'``): the benchmarks are part of the
repository, not of the installed package, so the ``dhash`` command has no such command.

Bad input exits with status 2 and one line ``error: <problem; fix>``, as ``dhash`` does; an
option given for a stage it does nothing for is refused rather than ignored.
"""

from __future__ import annotations

import sys

from dask_hashcodes.cli.main import configure_logging
from dask_hashcodes.cli.option_types import bit_count, non_negative_int, positive_int
from dask_hashcodes.cli.options import OptionParser
from dask_hashcodes.errors import InputError

PROG = "python -m benchmarks"
STAGES = ("search", "groundtruth", "train", "encode")
ON_A_CLUSTER = ("train", "encode")  # search and groundtruth time single-process kernels
EXIT_BAD_INPUT = 2

# (flag, argparse keywords, the stages it applies to): given for another stage it is refused
OPTIONS = (
    ("--n", dict(type=positive_int, required=True, help="database rows (search: codes; others: sift-synth rows)"),
     STAGES),
    ("--bits", dict(type=bit_count, default=32, help="code length in bits (default 32)"), ("search", "train", "encode")),
    ("--queries", dict(type=positive_int, default=1000, help="queries (default 1000)"), ("search", "groundtruth")),
    ("--k", dict(type=positive_int, default=100, help="neighbours per query (default 100)"), ("search", "groundtruth")),
    ("--method", dict(default="dish", help="dish, dish-allreduce, itq, or itq-vs-faiss (ITQ against "
                      "faiss.ITQTransform: time, Fashion-MNIST map); default dish"), ("train",)),
    ("--iterations", dict(type=positive_int, default=10, help="outer iterations, fixed, no early stop (default "
                          "10)"), ("train",)),
    ("--nodes", dict(type=positive_int, default=10, help="DisH nodes (default 10)"), ("train",)),
    ("--floor-repeats", dict(type=positive_int, default=2, choices=(1, 2), help="time the floor before and after "
                             "ours (2, averaged) or only before (1)"), ("train",)),
    ("--data", dict(help="dataset to use, its first --n rows (URLs open with $DHASH_STORAGE_OPTIONS); default: "
                    "sift-synth of --n rows, cached"), ("groundtruth", "train", "encode")),
    ("--bench-threads", dict(type=positive_int, help="threads for both sides (default: all cores); train: only "
                             "with --method itq-vs-faiss"), ("search", "groundtruth", "train")),
    ("--seed", dict(type=non_negative_int, default=0, help="random seed: fixes every result (default 0)"), STAGES),
    ("--out", dict(required=True, help="where the result goes: BASE.json and a Markdown table BASE.md, BASE being "
                   "--out without a .json or .md suffix (x, x.json and x.md all write x.json and x.md)"), STAGES),
    ("--overwrite", dict(action="store_true", help="replace an earlier result of these benchmarks (never a file "
                         "they did not write, nor one edited since)"), STAGES),
    ("--scheduler", dict(help="address of a running Dask scheduler (else $DASK_SCHEDULER_ADDRESS, else a local "
                         "cluster)"), ON_A_CLUSTER),
    ("--workers", dict(type=positive_int, help="local cluster: worker processes (default: from the CPU cores)"),
     ON_A_CLUSTER),
    ("--threads", dict(type=positive_int, help="local cluster: threads per worker (default: from the CPU cores)"),
     ON_A_CLUSTER),
    ("--performance-report", dict(metavar="FILE.html", help="save Dask's performance report of the run"),
     ON_A_CLUSTER),
    ("--quiet", dict(action="store_true", help="no line naming the cluster, no per-iteration log lines"), STAGES),
)  # fmt: skip
ITQ_VS_FAISS = "itq-vs-faiss"
# train options read by one kind of train benchmark only: the floor comparison's (the ITQ run
# against faiss.ITQTransform has its own fixed iterations and no floor), and the threads
# FAISS is given (only that run has FAISS in it)
FLOOR_ONLY = ("--iterations", "--nodes", "--floor-repeats")
FAISS_ONLY = ("--bench-threads",)


def build_parser() -> OptionParser:
    parser = OptionParser(
        prog=PROG,
        description="Time one stage of dask-hashcodes against its peer (FAISS, or the plain-pass floor) on the "
        "same data. Run from the root of a checkout with the bench extra installed.",
    )
    parser.add_argument("stage", choices=STAGES, help="the stage to time against its peer")
    for flag, keywords, _ in OPTIONS:
        # no argparse defaults: None means "not given", so an option given where it does
        # nothing can be told apart from one left at its default
        shown = {k: v for k, v in keywords.items() if k not in ("default", "required")}
        parser.add_argument(flag, **shown, **({"default": None} if "action" not in keywords else {}))
    return parser


def parse_args(argv) -> dict:
    """dest -> value of every option (defaults filled in), after refusing a missing required
    option and any option given for a stage (or train method) it does nothing for."""
    args = vars(build_parser().parse_args(argv))
    stage = args["stage"]
    for flag, keywords, stages in OPTIONS:
        dest = flag[2:].replace("-", "_")
        given = args[dest] not in (None, False)
        if keywords.get("required") and not given:
            raise InputError(f"{PROG} {stage}: {flag} is required; see `{PROG} --help`")
        if given and stage not in stages:
            raise InputError(f"{flag} does not apply to {PROG} {stage} (only to {', '.join(stages)}); drop {flag}")
        against_faiss = stage == "train" and args["method"] == ITQ_VS_FAISS
        if given and flag in FLOOR_ONLY and against_faiss:
            raise InputError(f"{flag} does not apply to {PROG} train --method {ITQ_VS_FAISS}; drop {flag}")
        if given and flag in FAISS_ONLY and stage == "train" and not against_faiss:
            raise InputError(f"{flag} applies to {PROG} train only with --method {ITQ_VS_FAISS}; drop {flag}")
        if not given and "default" in keywords:
            args[dest] = keywords["default"]
    return args


def run(args: dict) -> None:
    """Check where the result goes, start or join the cluster a stage runs on, run the stage
    and print its table and where it went."""
    try:
        from benchmarks.harness import runs
    except ImportError as exc:
        raise InputError(
            f"the benchmarks need the bench extra ({exc.name} is missing); pip install -e '.[bench]' in this checkout"
        ) from None
    from dask_hashcodes.distributed.cluster import REPORT_KIND, connect, disconnect, performance_report
    from dask_hashcodes.storage.atomic import check_file_output

    runs.check_result_out(args["out"], overwrite=args["overwrite"], flag="--overwrite")
    if args["performance_report"]:
        check_file_output(args["performance_report"], kind=REPORT_KIND, overwrite=args["overwrite"], flag="--overwrite")
    client = None
    if args["stage"] in ON_A_CLUSTER:
        client = connect(args["scheduler"], workers=args["workers"], threads=args["threads"], quiet=args["quiet"])
    try:
        options = {name: args[name] for name in ("n", "bits", "queries", "k", "method", "iterations", "nodes")}
        options.update({name: args[name] for name in ("floor_repeats", "data", "seed")})
        with performance_report(args["performance_report"], overwrite=args["overwrite"]):
            result = runs.run_stage(
                args["stage"], args["out"], threads=args["bench_threads"], overwrite=args["overwrite"], **options
            )
    finally:
        if client is not None:
            disconnect(client)
    print(result.pop("markdown"), file=sys.stderr)
    written = " and ".join(str(path) for path in runs.result_paths(args["out"]))
    print(f"{args['stage']}: {written} (ratio ours/peer seconds {result['ratio_ours_over_peer_seconds']})")


def main(argv=None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        configure_logging(args["quiet"])
        run(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", EXIT_BAD_INPUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
