"""The option table: every option of every ``dhash`` command, defined once.

The command-line parser (pipeline/dask_hashcodes/cli/main.py), ``--config`` TOML files (pipeline/dask_hashcodes/cli/config.py), the steps
of ``dhash run`` pipelines (pipeline/dask_hashcodes/cli/run.py), ``dhash --help`` and the config schema
(``data_schemas/config.schema.json``, written by ``python -m dask_hashcodes.cli.options``) are all built
from ``OPTIONS``: a name, the commands taking it, a value type, a default and a help text.

The method options (``METHOD_OPTIONS``) are generated from the estimators
(``dask_hashcodes.cli.method_options``), none written here. Value types are those of
``dask_hashcodes.cli.option_types``: a flag's text and a TOML value go through the same
``type`` callable; a TOML value must also have the TOML type the option expects (an
integer option takes ``bits = 12``, not ``12.7`` or ``"12"``; a switch takes
``true``/``false``, not ``"false"``). Every refusal is an ``InputError``: one line naming
the key and the fix.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass

from dask_hashcodes.cli.method_options import METHOD_OPTIONS, variants
from dask_hashcodes.cli.option_types import (
    MAX_BITS,
    Option,
    bit_count,
    bit_counts,
    date,
    json_object,
    json_type,
    name_list,
    non_negative_int,
    positive_float,
    positive_int,
    positive_int_list,
)
from dask_hashcodes.data.sources import SOURCES
from dask_hashcodes.errors import InputError
from dask_hashcodes.evaluation.evaluate import DEFAULT_KS
from dask_hashcodes.hashing.registry import BASELINE_METHODS, DEMO_METHODS, METHOD_NAMES, method_class
from dask_hashcodes.indexes.rerank import K_FACTOR
from dask_hashcodes.indexes.residual import ROTATIONS


class OptionParser(argparse.ArgumentParser):
    """argparse whose errors are one-line InputErrors (exit 2 via the CLI), not usage dumps."""

    def error(self, message):
        raise InputError(f"{self.prog}: {message}; see `{self.prog} --help`")


# ------------------------------------------------------------------ the table ----------

CLUSTER_COMMANDS = (
    "ingest",
    "synth",
    "split",
    "groundtruth",
    "train",
    "encode",
    "index",
    "search",
    "evaluate",
    "demo",
    "run",
)
COMMANDS = {
    "ingest": "Convert a file (fvecs/bvecs/ivecs, IDX, npy, parquet) or a built-in source into a dataset",
    "synth": "Generate a synthetic dataset chunk-parallel on the cluster",
    "split": "Draw a seeded query/database split and store it in the dataset",
    "groundtruth": "Exact Euclidean neighbours of a split's queries (computed once, stored in the dataset)",
    "train": "Learn hash functions on a dataset's database rows and save a model directory",
    "encode": "Encode every row of a dataset into packed binary codes (zarr)",
    "index": "An index of a codes store for Hamming search that compares few codes: multi-index hashing tables "
    "(exact) or an inverted file (approximate); or a residual index of a split's database rows for Euclidean search",
    "search": "Hamming top-k (or radius) search of a split's queries, or Euclidean top-k through a residual index; "
    "results to parquet",
    "evaluate": "Train, encode, search and score methods x bit lengths; write a report directory",
    "demo": "End-to-end demo: sift-synth (and Fashion-MNIST when installed) with "
    + ", ".join(method_class(name).__name__ for name in DEMO_METHODS),
    "run": "Run a TOML pipeline of dhash steps as one scheduled batch job (lock, skip up-to-date steps, logs)",
}


def _opt(name, commands, help_, **kw) -> Option:
    return Option(name, tuple(commands), help_, **kw)


# ------------------------------------------------------- when an option applies --------
# An option that would do nothing for the command as given is refused, not ignored: an
# Option's ``applies`` lists conditions on the other options' values, and ``refuse_unused``
# checks every option *given* (on the command line or in the config, not defaulted) against
# them before any work starts. Each condition says when it holds and, when it does not, the
# one-line refusal: the option, when it applies, and what to add or drop.


def is_set(value) -> bool:
    """A value that does something: not None, and for a switch, on."""
    return value is not None and value is not False


def _one_of(values) -> str:
    """'a', 'a or b', 'a, b or c'."""
    items = [str(v) for v in values]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _why(why: str) -> str:
    return f" ({why})" if why else ""


@dataclass(frozen=True)
class With:
    """Applies when option ``dest`` is set (``values`` empty) or has one of ``values`` (a
    list option such as --methods: holds one of them). ``commands``: the commands this
    condition is for (empty: all of the option's); ``why``: what the option does, a few
    words for the refusal."""

    dest: str
    values: tuple = ()
    why: str = ""
    commands: tuple = ()

    def holds(self, command: str, values: dict) -> bool:
        value = values.get(self.dest)
        if not self.values:
            return is_set(value)
        return any(v in self.values for v in (value if isinstance(value, list) else [value]))

    def phrase(self, command: str, options: dict) -> str:
        other = options[self.dest]
        if other.positional:
            return f"to dhash {command} {_one_of(self.values)}"
        if not self.values:
            return f"with {other.flag}"
        if other.type is name_list:
            return f"when {other.flag} includes {_one_of(self.values)}"
        return f"with {other.flag} {_one_of(self.values)}"

    def refusal(self, opt: Option, command: str, values: dict, options: dict) -> str:
        other = options[self.dest]
        if other.positional or len(self.values) > 1:
            fix = f"drop {opt.flag}"
        else:
            fix = f"add {other.flag}{' ' + str(self.values[0]) if self.values else ''} or drop {opt.flag}"
        return f"{opt.flag} applies only {self.phrase(command, options)}{_why(self.why)}; {fix}"


@dataclass(frozen=True)
class Without:
    """Applies unless option ``dest`` is set (``values`` empty) or has one of ``values``."""

    dest: str
    values: tuple = ()
    why: str = ""
    commands: tuple = ()

    def holds(self, command: str, values: dict) -> bool:
        return not With(self.dest, self.values).holds(command, values)

    def refusal(self, opt: Option, command: str, values: dict, options: dict) -> str:
        other, why = options[self.dest], _why(self.why)
        if other.positional:
            return f"{opt.flag} does not apply to dhash {command} {_one_of(self.values)}{why}; drop {opt.flag}"
        if self.values:
            return f"{opt.flag} does not apply with {other.flag} {_one_of(self.values)}{why}; drop {opt.flag}"
        return f"{opt.flag} does not apply with {other.flag}{_why(self.why)}; drop {opt.flag} or {other.flag}"


@dataclass(frozen=True)
class Never:
    """Does not apply to ``commands``: ``why`` says why, ``fix`` (default: drop it) what to do."""

    commands: tuple
    why: str
    fix: str = ""

    def holds(self, command: str, values: dict) -> bool:
        return False

    def refusal(self, opt: Option, command: str, values: dict, options: dict) -> str:
        return f"{opt.flag} does not apply to dhash {command} ({self.why}); {self.fix or 'drop ' + opt.flag}"


SCHEDULER_VARIABLE = "DASK_SCHEDULER_ADDRESS"


def scheduler_address(values: dict) -> tuple[str, str] | None:
    """(address, where it comes from) of the running scheduler a command joins, as
    ``dask_hashcodes.distributed.cluster.connect`` picks it; None: a local cluster is started."""
    from dask_hashcodes import config as settings

    for address, where in (
        (values.get("scheduler"), "given by --scheduler"),
        (os.environ.get(SCHEDULER_VARIABLE), f"in ${SCHEDULER_VARIABLE}"),
        (settings.get("scheduler"), "of the dhash.scheduler setting"),
    ):
        if address:
            return address, where
    return None


@dataclass(frozen=True)
class LocalCluster:
    """Applies when the command starts a local cluster: no scheduler address is given (by
    --scheduler, $DASK_SCHEDULER_ADDRESS or the dhash.scheduler setting)."""

    commands: tuple = ()

    def holds(self, command: str, values: dict) -> bool:
        return scheduler_address(values) is None

    def refusal(self, opt: Option, command: str, values: dict, options: dict) -> str:
        address, where = scheduler_address(values)
        return (
            f"{opt.flag} sizes the local cluster dhash starts, and this command joins the scheduler {address} "
            f"{where}; drop {opt.flag}"
        )


# the options naming a place data is read from or written to
LOCATION_DESTS = ("source", "out", "dataset", "labels", "model", "codes", "index", "performance_report")


@dataclass(frozen=True)
class AnyURL:
    """Applies when one of the command's locations is a URL (s3://, gs://, ...): storage
    options are how those are opened; local paths take none."""

    commands: tuple = ()

    def holds(self, command: str, values: dict) -> bool:
        return any("://" in str(values[d]) for d in LOCATION_DESTS if is_set(values.get(d)))

    def refusal(self, opt: Option, command: str, values: dict, options: dict) -> str:
        return (
            f"{opt.flag} applies only to URL locations (s3://, gs://, abfs://, ...), and every location of this "
            f"dhash {command} is a local path; drop {opt.flag}"
        )


_CLUSTER = "cluster and job"
_EVAL = ("evaluate", "demo")
# options of the Dask cluster: ingest runs without one
_ON_A_CLUSTER = (Never(("ingest",), "it runs without a Dask cluster"),)
_LOCAL = LocalCluster(tuple(c for c in CLUSTER_COMMANDS if c != "ingest"))  # ingest: refused by _ON_A_CLUSTER
_BUILT_IN = ("fashion-mnist", "debian-sift")  # ingest: sources that bring their own vectors and labels
_NO_BUILT_IN = (Without("source", _BUILT_IN, "a built-in source brings its own vectors and labels"),)


def _methods_where(test) -> tuple[str, ...]:
    """The method names (variants too) whose estimator class passes ``test``."""
    return tuple(name for name in METHOD_NAMES if test(method_class(name)))


_CHECKPOINTING = _methods_where(lambda cls: cls.supports_checkpoint)
_DATABASE_CODES = _methods_where(lambda cls: cls.learns_database_codes)
_NODE_DICTIONARIES = _methods_where(lambda cls: "dish2_dictionaries" in cls.evaluation_options)
# every name --method and --methods accept, read from the registry (never a hand-kept list)
_METHOD_LIST = _one_of(METHOD_NAMES)

# a table reads best one option per line:
# fmt: off
OPTIONS: tuple[Option, ...] = (
    # -- every command
    _opt("scheduler", CLUSTER_COMMANDS, "address of a running Dask scheduler (else $DASK_SCHEDULER_ADDRESS, else a "
         "local cluster)", group=_CLUSTER, applies=_ON_A_CLUSTER),
    _opt("workers", CLUSTER_COMMANDS, "local cluster: worker processes (default: from the CPU cores)", type=positive_int,
         group=_CLUSTER, applies=(*_ON_A_CLUSTER, _LOCAL)),
    _opt("threads", CLUSTER_COMMANDS, "local cluster: threads per worker (default: from the CPU cores)",
         type=positive_int, group=_CLUSTER, applies=(*_ON_A_CLUSTER, _LOCAL)),
    _opt("config", CLUSTER_COMMANDS, "TOML file with this command's options (flags given here win)", group=_CLUSTER),
    _opt("quiet", CLUSTER_COMMANDS, "no progress bars", switch=True, group=_CLUSTER),
    _opt("storage-options", CLUSTER_COMMANDS, "JSON object of fsspec storage options for s3:// gs:// abfs:// "
         "locations (endpoint_url, profile, anon, ...); else the config's storage-options table, else "
         "$DHASH_STORAGE_OPTIONS", type=json_object, metavar="JSON", group=_CLUSTER,
         applies=(AnyURL(commands=tuple(c for c in CLUSTER_COMMANDS if c != "run")),)),
    _opt("performance-report", CLUSTER_COMMANDS, "save Dask's performance report of this job (task stream, worker "
         "profiles, bandwidth)", metavar="FILE.html", group=_CLUSTER,
         applies=(*_ON_A_CLUSTER, Never(("run",), "each step of a pipeline may have its own report",
                                        "add performance-report to a step of the pipeline instead"))),
    # -- ingest, synth
    _opt("source", ["ingest"], "input file (path or URL), or a built-in source name (fashion-mnist)", positional=True,
         required=("ingest",)),
    _opt("kind", ["synth"], "sift: SIFT-like 128-d uint8 (sift-synth)", positional=True, choices=("sift",),
         required=("synth",)),
    _opt("format", ["ingest"], "auto (by extension), fvecs, bvecs, ivecs, idx, npy, parquet", default="auto",
         applies=_NO_BUILT_IN),
    _opt("column", ["ingest"], "parquet: the vector column", applies=_NO_BUILT_IN),
    _opt("labels", ["ingest"], "labels file (IDX labels, .ivecs or .npy of integers)", applies=_NO_BUILT_IN),
    _opt("label-column", ["ingest"], "parquet: integer label column", applies=_NO_BUILT_IN),
    _opt("n", ["synth"], "number of points", type=positive_int, default=1_000_000),
    _opt("n", ["evaluate"], "built-in source rows: sift-synth (default 1000000), debian-minilm (its first N; "
         "default all)", type=positive_int,
         applies=(With("dataset", ("sift-synth", "debian-minilm"), "the rows of a generated source"),)),
    _opt("n", ["demo"], "sift-synth: number of points", type=positive_int, default=1_000_000),
    _opt("chunk-rows", ["ingest", "synth", *_EVAL], "rows per feature chunk (default: ~16 MiB per chunk)",
         type=positive_int, applies=(With("dataset", SOURCES, "how a built-in source is chunked when it is made",
                                          ("evaluate",)),)),
    # -- datasets, splits
    _opt("dataset", ["split", "groundtruth", "train", "encode", "search", "evaluate", "index"],
         "dataset location (path or URL), or a built-in source (fashion-mnist, sift-synth, debian-minilm, debian-sift)",
         required=("split", "groundtruth", "train", "encode", "search", "evaluate"),
         applies=(With("kind", ("ivf", "residual"), "the features an inverted file clusters", ("index",)),)),
    _opt("queries", ["split", *_EVAL], "query rows drawn with the seed", type=positive_int, default=1000),
    _opt("name", ["split"], "name of the split", default="default"),
    _opt("split", ["groundtruth", "search"], "split whose queries are used (database = the other rows)",
         default="default"),
    _opt("split", ["train"], "train on the database rows of this split (default: all rows)"),
    _opt("split", ["index"], "residual: index the database rows of this split (its queries are left out: they are "
         "what `dhash search --split` asks)", default="default",
         applies=(With("kind", ("residual",), "the rows a residual index holds"),)),
    _opt("top-k", ["groundtruth", *_EVAL], "euclidean ground truth: K nearest neighbours", type=positive_int,
         applies=(Without("ground_truth", ("labels",), "it sets the Euclidean ground truth", ("evaluate",)),)),
    _opt("top-percent", ["groundtruth", *_EVAL], "euclidean ground truth: top P percent of the database",
         type=positive_float,
         applies=(Without("ground_truth", ("labels",), "it sets the Euclidean ground truth", ("evaluate",)),
                  Without("top_k", (), "the Euclidean ground truth is the top K or the top P percent"))),
    # -- models
    _opt("method", ["train"], f"one of {_METHOD_LIST}", required=("train",)),
    _opt("bits", ["train"], f"code length in bits (1 to {MAX_BITS})", type=bit_count, default=32),
    _opt("bits", _EVAL, f"code lengths in bits (1 to {MAX_BITS}), comma-separated", type=bit_counts,
         default={"evaluate": [32], "demo": [32, 64]}),
    _opt("methods", _EVAL, f"methods, comma-separated, each one of {_METHOD_LIST}", type=name_list,
         default={"evaluate": list(BASELINE_METHODS), "demo": list(DEMO_METHODS)}),
    _opt("seed", ["synth", "split", "train", "index", *_EVAL], "random seed: fixes every result",
         type=non_negative_int, default=0,
         applies=(With("kind", ("ivf", "residual"), "it draws the rows k-means learns from", ("index",)),)),
    _opt("model", ["encode"], "model directory made by `dhash train`", required=("encode",)),
    _opt("model", ["search"], "model directory made by `dhash train` (a Hamming search; not with a residual --index)"),
    _opt("codes", ["search"], "codes made by `dhash encode` with this model (a Hamming search; not with a residual "
         "--index)"),
    _opt("codes", ["index"], "codes store to index (made by `dhash encode`; mih and ivf)",
         applies=(Without("kind", ("residual",), "a residual index codes the dataset's rows itself"),)),
    _opt("kind", ["index"], "mih: multi-index hashing tables of --codes (exact Hamming search); ivf: an inverted "
         "file of --codes (k-means lists of the dataset's features; a search ranks the codes of the lists nearest "
         "each query); residual: an inverted file of the --dataset's own rows, coded as binary residuals to their "
         "list and re-ranked by the Euclidean distance (search answers the Euclidean top-k in one process)",
         choices=("mih", "ivf", "residual"), default="mih"),
    _opt("rotation", ["index"], "residual: the orthogonal rotation of the residuals before their signs are kept: "
         "random (default), structured (sign flips and Hadamard transforms: stores no D x D matrix, for "
         "high-dimensional data) or learned (ITQ on a sample of the residuals)",
         choices=ROTATIONS,
         applies=(With("kind", ("residual",), "how a residual index codes its rows"),)),
    _opt("tune-rows", ["index"], "residual: choose the lists probed per query and eps on this many indexed rows drawn with the seed, "
         "each searched for its 10 nearest among the others (validation from the data; the split's queries are "
         "never used; default: the library's defaults are kept)", type=positive_int,
         applies=(With("kind", ("residual",), "a residual index's search settings"),)),
    _opt("target-recall", ["index"], "residual with --tune-rows: the recall@10 the fastest kept setting reaches "
         "(default 0.9)", type=positive_float,
         applies=(With("tune_rows", (), "the target of the tuning"),)),
    _opt("substrings", ["index"], "mih: substrings m of each code, one table each (default: bits / log2(rows per "
         "codes chunk), the multi-index hashing paper's rule)", type=positive_int,
         applies=(With("kind", ("mih",), "the tables of a multi-index"),)),
    _opt("lists", ["index"], "ivf, residual: lists, k-means centroids of the dataset's features (default: ivf "
         "4 sqrt(n), residual 2 sqrt(n))",
         type=positive_int, applies=(With("kind", ("ivf", "residual"), "the k-means lists of an inverted file"),)),
    _opt("quantiser", ["index"], "ivf: where the lists' centroids live: features (k-means on the dataset's "
         "features, which queries probe by their vectors; the default) or codes (k-means on the codes themselves, "
         "as FAISS's IndexBinaryIVF: no dataset read, a popcount per row and centroid instead of a float distance; "
         "queries probe by their codes)",
         choices=("features", "codes"), default="features",
         applies=(With("kind", ("ivf",), "the coarse quantiser of an inverted file"),)),
    _opt("kmeans-rows", ["index"], "ivf: rows k-means learns the centroids from, drawn with the seed (default 256 "
         "per list); every row is then assigned to its nearest centroid", type=positive_int,
         applies=(With("kind", ("ivf",), "the k-means of an inverted file"),)),
    _opt("quantiser-dims", ["index"], "ivf: principal directions of the k-means rows the centroids live in; rows "
         "and queries are projected onto them before they meet a centroid (default: the fewest holding 90 percent of the "
         "rows' variance, where that saves work; the feature count: the features' own space)", type=positive_int,
         applies=(With("kind", ("ivf",), "the coarse quantiser of an inverted file"),)),
    _opt("index", ["search"], "search through this index (made by `dhash index` from these codes): a multi-index "
         "gives the linear scan's results, an inverted file the top-k of the --nprobe lists nearest each query"),
    _opt("nprobe", ["search"], "lists of an inverted file --index searched per query (default: 4; a residual index's "
         "own, chosen on validation queries)", type=positive_int,
         applies=(With("index", (), "the lists of an inverted file probed per query"),)),
    _opt("rerank", ["search"], "re-rank the Hamming top --candidates: exact (squared L2 to the original vectors, "
         "read from the dataset chunk by chunk) or asymmetric (the queries' real projections against the codes)",
         choices=("exact", "asymmetric"), applies=(Without("radius", (), "it re-ranks a top-k search"),)),
    _opt("candidates", ["search"], f"Hamming candidates per query that --rerank re-ranks (default {K_FACTOR} x k)",
         type=positive_int, applies=(With("rerank", (), "the candidates it re-ranks"),)),
    _opt("recall", ["search"], "also measure recall@k of the exact Euclidean top-k neighbours of the queries (computed "
         "once on the cluster and stored in the dataset, as the groundtruth command does)", switch=True,
         applies=(Without("radius", (), "it scores a top-k search"),)),
    _opt("codes", ["train"], f"{', '.join(_DATABASE_CODES)}: codes store for the learned database codes (every row "
         "of the dataset; the split's queries encoded by the network)",
         applies=(With("method", _DATABASE_CODES, "it stores the database codes such a method learns"),)),
    _opt("resume", ["train"], f"continue an interrupted run from OUT.checkpoint ({', '.join(_CHECKPOINTING)}: saved "
         "after every iteration); with no checkpoint there, train from the start", switch=True,
         applies=(With("method", _CHECKPOINTING, "it continues the checkpoint such a method saves after every iteration"),)),
    *METHOD_OPTIONS,
    # -- search
    _opt("k", ["search"], "neighbours per query (default 100)", type=positive_int),
    _opt("radius", ["search"], "radius search instead of top-k", type=non_negative_int),
    # -- evaluate, demo
    _opt("ground-truth", _EVAL, "default: labels when the dataset has them", choices=("labels", "euclidean"),
         applies=(Never(("demo",), "the demo scores sift-synth by Euclidean and Fashion-MNIST by label ground "
                                   "truth"),)),
    _opt("ks", _EVAL, "K values of precision@K", type=positive_int_list, default=list(DEFAULT_KS)),
    _opt("recall-at", ["evaluate"], "also measure recall@K of the exact Euclidean top-K neighbours (computed once and "
         "stored in the dataset) for codes every row is encoded into: in Hamming order, re-ranked exactly, and "
         "through an inverted file with --ivf-lists", type=positive_int),
    _opt("rerank-candidates", ["evaluate"], "--recall-at: Hamming candidates R re-ranked by the exact squared L2",
         type=positive_int_list, default=[100, 1000], applies=(With("recall_at", (), "part of its recall measure"),)),
    _opt("ivf-lists", ["evaluate"], "--recall-at: also an inverted file of this many k-means lists of the database "
         "(0: 4 sqrt(n)), probed at each --ivf-nprobes, its Hamming candidates re-ranked exactly",
         type=non_negative_int, applies=(With("recall_at", (), "part of its recall measure"),)),
    _opt("ivf-nprobes", ["evaluate"], "--recall-at: lists probed per query in the inverted file", type=positive_int_list,
         default=[4], applies=(With("recall_at", (), "part of its recall measure"),
                               With("ivf_lists", (), "the lists of that inverted file probed per query"))),
    _opt("dish2-dictionaries", _EVAL, "DisH2: score this many node dictionaries drawn with the seed (1 = the paper's "
         "DisH2, one random node); default all nodes, reported as mean and std", type=positive_int,
         applies=(With("methods", _NODE_DICTIONARIES, "how its node dictionaries are scored"),)),
    # -- run
    _opt("pipeline", ["run"], "pipeline file (see jobs/configs/nightly.toml, weekly.toml)", positional=True,
         required=("run",)),
    _opt("force", ["run"], "run every step, even those whose inputs and output are unchanged", switch=True),
    _opt("date", ["run"], "the {date} of the run, YYYY-MM-DD (default: today, UTC): backfills", type=date),
    _opt("set", ["run"], "override a [vars] entry of the pipeline (repeatable)", dest_name="variables", repeat=True,
         metavar="NAME=VALUE"),
    _opt("dry-run", ["run"], "print the steps and which would be skipped; run nothing", switch=True),
    _opt("workdir", ["run"], "working directory (default: the pipeline's [pipeline] workdir, relative to its file)"),
    # -- outputs (last: they read best at the end of --help)
    _opt("out", ["ingest"], "dataset to create (zarr v3; path or URL)", required=("ingest",)),
    _opt("out", ["synth"], "dataset to create (zarr v3; path or URL)", required=("synth",)),
    _opt("out", ["train"], "model directory to create", required=("train",)),
    _opt("out", ["encode"], "codes store to create (zarr)", required=("encode",)),
    _opt("out", ["index"], "index to create (zarr; path or URL)", required=("index",)),
    _opt("out", ["search"], "results parquet file (query_id, rank, id, hamming)", required=("search",)),
    _opt("out", ["evaluate"], "report directory", required=("evaluate",)),
    _opt("out", ["demo"], "report directory", default="runs/demo"),
    _opt("overwrite", ["ingest", "synth", "split", "train", "encode", "index", "search"],
         "replace an existing output of the same kind that dhash wrote whole (one that holds anything else is "
         "refused), and an earlier --performance-report", switch=True),
)
# fmt: on


def options_of(command: str) -> dict[str, Option]:
    """dest -> Option of the options ``command`` takes, in table order."""
    return {o.dest: o for o in OPTIONS if command in o.commands}


class Values(dict):
    """dest -> value of every option of a command, which also knows the dests ``given`` (on
    the command line or in the config) as opposed to filled in from the defaults."""

    def __init__(self, values: dict, given=()):
        super().__init__(values)
        self.given = frozenset(given)


def conditions() -> list[tuple[str, Option, object]]:
    """(command, option, condition) of every condition in the table, in table order."""
    return [
        (command, opt, condition)
        for command in COMMANDS
        for opt in options_of(command).values()
        for condition in opt.applies
        if not condition.commands or command in condition.commands
    ]


def refuse_unused(command: str, values: dict, given) -> None:
    """An InputError for the first option in ``given`` (dests) that would do nothing for
    ``command`` with these ``values`` (an Option's ``applies``): one line naming it, when it
    applies and what to add or drop. An option left at its default is never refused."""
    options = options_of(command)
    for dest, opt in options.items():
        if dest not in given or not is_set(values.get(dest)):
            continue
        for condition in opt.applies:
            if (not condition.commands or command in condition.commands) and not condition.holds(command, values):
                raise InputError(condition.refusal(opt, command, values, options))


def option_names(options) -> str:
    return ", ".join(sorted(o.name for o in options.values()))


def method_params(command: str, values: dict) -> dict:
    """The method parameters set by ``values`` (dest -> value), under the name of each
    estimator a flag sets (``{"dish": {"rho": 5.0}, "sgh": {"rho": 5.0}}``: the form
    ``hashing.method_params`` reads; a variant such as dish-allreduce reads its base's).
    A flag that sets no method the command runs is refused, not silently ignored. A
    method's own ``--{method}-{param}`` flag wins over a short flag setting the same
    parameter of several methods (``--labeled 500 --sdh-n-labeled 2000``)."""
    chosen = values.get("methods") or [values.get("method")]
    params: dict = {}
    short_flags_first = sorted(options_of(command).items(), key=lambda item: not item[1].short_for)
    for dest, opt in short_flags_first:
        if opt.param is None or values.get(dest) is None:
            continue
        reached = [name for method in opt.methods for name in variants(method, opt.param)]
        known = all(name in METHOD_NAMES for name in chosen)  # an unknown name is refused by the workflow
        if known and not set(reached) & set(chosen):
            raise InputError(
                f"{opt.flag} sets {opt.param} of {', '.join(reached)}, and this {command} runs "
                f"{', '.join(chosen)}; remove {opt.flag} or run one of those methods"
            )
        for method in opt.methods:
            params.setdefault(method, {})[opt.param] = values[dest]
    return params


STORAGE_TABLE = "storage-options"


def _json_property(opt: Option) -> dict:
    if opt.switch:
        prop = {"type": "boolean"}
    else:
        prop = json_type(opt.type)
    if opt.choices is not None:
        prop["enum"] = list(opt.choices)
    prop["description"] = opt.help
    return prop


def config_schema() -> dict:
    """The JSON schema of ``--config`` files: top-level keys (any command's options) and one
    table per command; built from ``OPTIONS``, committed as data_schemas/config.schema.json."""
    tables = {}
    for command in COMMANDS:
        props = {o.name: _json_property(o) for o in options_of(command).values() if o.name != "config"}
        tables[command] = {"type": "object", "properties": props, "additionalProperties": False}
    variants: dict[str, list] = {}
    for table in tables.values():
        for name, prop in table["properties"].items():
            if prop not in variants.setdefault(name, []):
                variants[name].append(prop)
    top = {name: props[0] if len(props) == 1 else {"anyOf": props} for name, props in variants.items()}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "dhash.config/1",
        "title": "dhash --config file",
        "description": "Options of dhash commands: top-level keys apply to the command run, a [command] table "
        "to that command only; [storage-options] holds fsspec options for remote locations.",
        "type": "object",
        "properties": {
            **dict(sorted(top.items())),
            **tables,
            STORAGE_TABLE: {"type": "object", "description": "fsspec storage options"},
        },
        "additionalProperties": False,
    }


if __name__ == "__main__":  # python -m dask_hashcodes.cli.options > data_schemas/config.schema.json
    print(json.dumps(config_schema(), indent=1))
