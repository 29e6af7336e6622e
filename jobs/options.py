"""The option table: every option of every ``dhash`` command, defined once.

The command-line parser (jobs/cli.py), ``--config`` TOML files (jobs/config.py), the steps
of ``dhash run`` pipelines (jobs/run.py), ``dhash --help`` and the config schema
(``data_schemas/config.schema.json``, written by ``python -m dhash.jobs.options``) are all built
from ``OPTIONS``: a name, the commands taking it, a value type, a default and a help text.

A flag's text and a TOML value go through the same ``type`` callable; a TOML value must
also have the TOML type the option expects (an integer option takes ``bits = 12``, not
``12.7`` or ``"12"``; a switch takes ``true``/``false``, not ``"false"``). Every refusal is
an ``InputError``: one line naming the key and the fix.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from dataclasses import dataclass

from dhash.errors import InputError


class OptionParser(argparse.ArgumentParser):
    """argparse whose errors are one-line InputErrors (exit 2 via the CLI), not usage dumps."""

    def error(self, message):
        raise InputError(f"{self.prog}: {message}; see `{self.prog} --help`")


def _integer(text, low: int, what: str) -> int:
    if isinstance(text, bool):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    try:
        value = int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    return value


def positive_int(text) -> int:
    return _integer(text, 1, "a positive integer")


def non_negative_int(text) -> int:
    return _integer(text, 0, "an integer >= 0")


def _real(text, positive: bool) -> float:
    what = "a positive number" if positive else "a number >= 0"
    if isinstance(text, bool):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not value == value or value in (float("inf"), float("-inf")) or value < 0 or (positive and value == 0):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_float(text) -> float:
    return _real(text, True)


def non_negative_float(text) -> float:
    return _real(text, False)


def positive_int_list(text) -> list[int]:
    """``16,32,64`` (or a TOML array) -> [16, 32, 64]; every item a positive integer."""
    if isinstance(text, int) and not isinstance(text, bool):
        text = [text]  # TOML: bits = 16 is a list of one
    items = text if isinstance(text, list) else [v for v in str(text).split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list of positive integers, got nothing")
    try:
        return [positive_int(v) for v in items]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of positive integers, got {text!r}"
        ) from None


# Longest code length accepted. Hash codes exist to be much smaller than the vectors they
# index: 4096 bits (512 bytes a row) is already the size of a 128-d float32 vector, and
# every method keeps (features, bits) float64 projections and (rows, bits) codes in memory.
MAX_BITS = 4096


def _check_bits(value: int) -> int:
    if value > MAX_BITS:
        raise argparse.ArgumentTypeError(f"expected a code length of 1 to {MAX_BITS} bits, got {value}")
    return value


def bit_count(text) -> int:
    """A code length: a positive integer up to ``MAX_BITS``."""
    return _check_bits(positive_int(text))


def bit_counts(text) -> list[int]:
    """Code lengths, comma-separated (or a TOML array), each 1 to ``MAX_BITS``."""
    return [_check_bits(v) for v in positive_int_list(text)]


def name_list(text) -> list[str]:
    items = text if isinstance(text, list) else str(text).split(",")
    names = [str(v).strip().lower() for v in items if str(v).strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of names, got nothing")
    return names


def topology(value):
    """A topology name, or (config files only) an explicit edge list [[0, 1], [1, 2], ...]."""
    if isinstance(value, list):
        if not all(
            isinstance(e, list) and len(e) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in e)
            for e in value
        ):
            raise argparse.ArgumentTypeError(f"expected a topology name or a list of [i, j] node pairs, got {value!r}")
        return value
    return str(value)


def json_object(text) -> dict:
    """``--storage-options '{"anon": true}'`` -> dict (a TOML table passes through)."""
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def date(text) -> str:
    """YYYY-MM-DD (a TOML date too)."""
    try:
        return dt.date.fromisoformat(str(text)).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, got {text!r}") from None


def toml_scalar(text_: str):
    """``--set`` values are TOML scalars when they parse as one (numbers, true/false), else strings."""
    import tomllib

    try:
        return tomllib.loads(f"v = {text_}")["v"]
    except tomllib.TOMLDecodeError:
        return text_


def text(value) -> str:
    return str(value)


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
    "bench",
    "run",
)
COMMANDS = {
    "ingest": "Convert a file (fvecs/bvecs/ivecs, IDX, npy, parquet) or a built-in source into a dataset",
    "synth": "Generate a synthetic dataset chunk-parallel on the cluster",
    "split": "Draw a seeded query/database split and store it in the dataset",
    "groundtruth": "Exact Euclidean neighbours of a split's queries (computed once, stored in the dataset)",
    "train": "Learn hash functions on a dataset's database rows and save a model directory",
    "encode": "Encode every row of a dataset into packed binary codes (zarr)",
    "index": "Multi-index hashing tables of a codes store, for exact Hamming search that compares few codes",
    "search": "Hamming top-k (or radius) search of a split's queries; results to parquet",
    "evaluate": "Train, encode, search and score methods x bit lengths; write a report directory",
    "demo": "End-to-end demo: sift-synth (and Fashion-MNIST when installed) with LSH, PCAH, ITQ, DisH",
    "bench": "Benchmark a stage against its peer (FAISS, or the plain-pass floor); writes JSON + Markdown",
    "run": "Run a TOML pipeline of dhash steps as one scheduled batch job (lock, skip up-to-date steps, logs)",
}
METHOD_COMMANDS = ("train", "evaluate", "demo")
REPORT_COMMANDS = ("evaluate", "demo")


@dataclass(frozen=True)
class Option:
    """One option. ``default`` may be a dict {command: default}; ``required`` names the
    commands that need it (from the command line or the config); ``param`` is the method
    parameter it sets (``method``: for that method only)."""

    name: str
    commands: tuple
    help: str
    type: object = text
    default: object = None
    required: tuple = ()
    switch: bool = False
    positional: bool = False
    choices: tuple | None = None
    group: str = "options"
    param: str | None = None
    method: str | None = None
    dest_name: str | None = None
    repeat: bool = False
    metavar: str | None = None

    @property
    def dest(self) -> str:
        return self.dest_name or self.name.replace("-", "_")

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    def default_for(self, command: str):
        if isinstance(self.default, dict):
            return self.default.get(command)
        return False if self.switch and self.default is None else self.default

    def parse(self, value, where: str):
        """A TOML value checked and converted like the flag's text would be."""
        key = self.name
        if self.switch:
            if not isinstance(value, bool):
                # suggest the boolean the value spells ("false" -> false), not always true
                spelt = str(value).strip().lower()
                fix = f"{key} = {spelt}" if spelt in ("true", "false") else f"{key} = true or {key} = false"
                raise InputError(
                    f"{where}: {key} must be true or false, got {value!r}; write {fix} (a boolean, unquoted)"
                )
            return value
        accepted = _TOML_TYPES.get(self.type, (str,))
        if isinstance(value, bool) or not isinstance(value, accepted):
            want = " or ".join(_TOML_NAMES[t] for t in accepted)
            hint = f"; write {key} = {int(value)}" if isinstance(value, float) and int in accepted else ""
            raise InputError(f"{where}: {key} must be {want}, got {value!r}{hint}")
        try:
            value = self.type(value)
        except (argparse.ArgumentTypeError, InputError, ValueError, TypeError) as exc:
            raise InputError(f"{where}: bad value for {key} ({exc})") from None
        if self.choices is not None and value not in self.choices:
            raise InputError(f"{where}: {key} must be one of {', '.join(map(str, self.choices))}, got {value!r}")
        return value


def _opt(name, commands, help_, **kw) -> Option:
    return Option(name, tuple(commands), help_, **kw)


_DISH = "DisH (methods dish, dish-allreduce)"
_SGH = "SGH, SPLH, USPLH and baselines (methods sgh, splh, usplh, pcah-adjusted, sikh, klsh, bre, agh, agh2, dgh, kmh)"
_MAC = "MAC, its two-step baselines and KSH (methods maccut, macquad, cut, quad, ksh)"
_ADSH = "ADSH and DPSH (methods adsh, dpsh; the deep extra)"
_CLUSTER = "cluster and job"
_EVAL = ("evaluate", "demo")

# a table reads best one option per line:
# fmt: off
OPTIONS: tuple[Option, ...] = (
    # -- every command
    _opt("scheduler", CLUSTER_COMMANDS, "address of a running Dask scheduler (else $DASK_SCHEDULER_ADDRESS, else a "
         "local cluster)", group=_CLUSTER),
    _opt("workers", CLUSTER_COMMANDS, "local cluster: worker processes (default: from the CPU cores)", type=positive_int,
         group=_CLUSTER),
    _opt("threads", CLUSTER_COMMANDS, "local cluster: threads per worker (default: from the CPU cores)",
         type=positive_int, group=_CLUSTER),
    _opt("config", CLUSTER_COMMANDS, "TOML file with this command's options (flags given here win)", group=_CLUSTER),
    _opt("quiet", CLUSTER_COMMANDS, "no progress bars", switch=True, group=_CLUSTER),
    _opt("storage-options", CLUSTER_COMMANDS, "JSON object of fsspec storage options for s3:// gs:// abfs:// "
         "locations (endpoint_url, profile, anon, ...); else the config's storage-options table, else "
         "$DHASH_STORAGE_OPTIONS", type=json_object, metavar="JSON", group=_CLUSTER),
    _opt("performance-report", CLUSTER_COMMANDS, "save Dask's performance report of this job (task stream, worker "
         "profiles, bandwidth)", metavar="FILE.html", group=_CLUSTER),
    # -- ingest, synth
    _opt("source", ["ingest"], "input file (path or URL), or a built-in source name (fashion-mnist)", positional=True,
         required=("ingest",)),
    _opt("kind", ["synth"], "sift: SIFT-like 128-d uint8 (sift-synth)", positional=True, choices=("sift",),
         required=("synth",)),
    _opt("format", ["ingest"], "auto (by extension), fvecs, bvecs, ivecs, idx, npy, parquet", default="auto"),
    _opt("column", ["ingest"], "parquet: the vector column"),
    _opt("labels", ["ingest"], "labels file (IDX labels, .ivecs or .npy of integers)"),
    _opt("label-column", ["ingest"], "parquet: integer label column"),
    _opt("n", ["synth"], "number of points", type=positive_int, default=1_000_000),
    _opt("n", ["evaluate"], "built-in source rows: sift-synth (default 1000000), debian-minilm (its first N; "
         "default all)", type=positive_int),
    _opt("n", ["demo"], "sift-synth: number of points", type=positive_int, default=1_000_000),
    _opt("n", ["bench"], "database rows (search: codes; others: sift-synth rows)", type=positive_int,
         required=("bench",)),
    _opt("chunk-rows", ["ingest", "synth", *_EVAL], "rows per feature chunk (default: ~16 MiB per chunk)",
         type=positive_int),
    # -- datasets, splits
    _opt("dataset", ["split", "groundtruth", "train", "encode", "search", "evaluate"],
         "dataset location (path or URL), or a built-in source (fashion-mnist, sift-synth, debian-minilm, debian-sift)",
         required=("split", "groundtruth", "train", "encode", "search", "evaluate")),
    _opt("queries", ["split", *_EVAL], "query rows drawn with the seed", type=positive_int, default=1000),
    _opt("queries", ["bench"], "search/groundtruth: queries", type=positive_int, default=1000),
    _opt("name", ["split"], "name of the split", default="default"),
    _opt("split", ["groundtruth", "search"], "split whose queries are used (database = the other rows)",
         default="default"),
    _opt("split", ["train"], "train on the database rows of this split (default: all rows)"),
    _opt("top-k", ["groundtruth", *_EVAL], "euclidean ground truth: K nearest neighbours", type=positive_int),
    _opt("top-percent", ["groundtruth", *_EVAL], "euclidean ground truth: top P percent of the database",
         type=positive_float),
    # -- models
    _opt("method", ["train"], "lsh, pcah, itq, dish, dish-allreduce, sgh, splh, usplh, pcah-adjusted",
         required=("train",)),
    _opt("method", ["bench"], "train: dish, dish-allreduce, itq, or itq-vs-faiss (ITQ vs faiss.ITQTransform: time, "
         "Fashion-MNIST map)", default="dish"),
    _opt("bits", ["train", "bench"], f"code length in bits (1 to {MAX_BITS})", type=bit_count, default=32),
    _opt("bits", _EVAL, f"code lengths in bits (1 to {MAX_BITS}), comma-separated", type=bit_counts,
         default={"evaluate": [32], "demo": [32, 64]}),
    _opt("methods", _EVAL, "methods, comma-separated", type=name_list,
         default={"evaluate": ["lsh", "pcah", "itq"], "demo": ["lsh", "pcah", "itq", "dish"]}),
    _opt("seed", ["synth", "split", "train", "bench", *_EVAL], "random seed: fixes every result", type=non_negative_int,
         default=0),
    _opt("model", ["encode", "search"], "model directory made by `dhash train`", required=("encode", "search")),
    _opt("codes", ["search"], "codes made by `dhash encode` with this model", required=("search",)),
    _opt("codes", ["index"], "codes store to index (made by `dhash encode`)", required=("index",)),
    _opt("substrings", ["index"], "substrings m of each code, one table each (default: bits / log2(rows per "
         "codes chunk), the multi-index hashing paper's rule)", type=positive_int),
    _opt("index", ["search"], "search through this index (made by `dhash index` from these codes): the same "
         "results as the linear scan"),
    _opt("rerank", ["search"], "re-rank the Hamming top --candidates: exact (squared L2 to the original vectors, "
         "read from the dataset chunk by chunk) or asymmetric (the queries' real projections against the codes)",
         choices=("exact", "asymmetric")),
    _opt("candidates", ["search"], "Hamming candidates per query that --rerank re-ranks (default 10 x k)",
         type=positive_int),
    _opt("codes", ["train"], "adsh: codes store for the learned database codes (every row of the dataset; the "
         "split's queries encoded by the network)"),
    _opt("n-iter", ["train"], "itq: iterations (default 50)", type=positive_int, param="n_iter", method="itq"),
    _opt("dictionary", ["train"], "dish: node whose dictionary encodes (DisH2, default 0)", type=non_negative_int,
         param="dictionary", method="dish", group=_DISH),
    _opt("resume", ["train"], "continue an interrupted run from OUT.checkpoint (itq, dish: saved after every "
         "iteration)", switch=True),
    _opt("nodes", METHOD_COMMANDS, "number of nodes P (default 10)", type=positive_int, param="nodes", group=_DISH),
    _opt("topology", METHOD_COMMANDS, "random (default), ring, star, complete; a config file may give an edge list",
         type=topology, param="topology", group=_DISH),
    _opt("partition", METHOD_COMMANDS, "contiguous (default), random, by-label", param="partition", group=_DISH),
    _opt("rho", METHOD_COMMANDS, "ADMM penalty (default: scaled to the data, see --rho-scale)", type=positive_float,
         param="rho", group=_DISH),
    _opt("rho-scale", METHOD_COMMANDS, "rho = this x mean node size x RMS distance to the mean (default 0.03)",
         type=positive_float, param="rho_scale", method="dish", group=_DISH),
    _opt("inner-steps", METHOD_COMMANDS, "ADMM steps per outer iteration K (default 5)", type=positive_int,
         param="inner_steps", group=_DISH),
    _opt("max-iter", METHOD_COMMANDS, "outer iterations at most (default 50)", type=positive_int, param="max_iter",
         method="dish", group=_DISH),
    _opt("init", METHOD_COMMANDS, "random (default) or pca", param="init", group=_DISH),
    _opt("n-bases", METHOD_COMMANDS, "sgh: kernel bases m (default 300)", type=positive_int, param="n_bases",
         group=_SGH),
    _opt("bandwidth-scale", METHOD_COMMANDS, "sgh: kernel width = this x RMS distance to the bases (default 0.5)",
         type=positive_float, param="bandwidth_scale", method="sgh", group=_SGH),
    _opt("sikh-bandwidth-scale", METHOD_COMMANDS, "sikh: Gaussian kernel width = this x RMS distance to the mean "
         "(default 1)", type=positive_float, param="bandwidth_scale", method="sikh", group=_SGH),
    _opt("klsh-anchors", METHOD_COMMANDS, "klsh: anchor rows p drawn with the seed (default 300)",
         type=positive_int, param="n_anchors", method="klsh", group=_SGH),
    _opt("klsh-subset-size", METHOD_COMMANDS, "klsh: anchors t averaged per bit (default 30)",
         type=positive_int, param="subset_size", method="klsh", group=_SGH),
    _opt("klsh-bandwidth-scale", METHOD_COMMANDS, "klsh: Gaussian kernel width = this x RMS distance between "
         "anchors (default 1)", type=positive_float, param="bandwidth_scale", method="klsh", group=_SGH),
    _opt("bre-train-size", METHOD_COMMANDS, "bre: training rows n_t drawn with the seed (default 1000)",
         type=positive_int, param="train_size", method="bre", group=_SGH),
    _opt("bre-points-per-bit", METHOD_COMMANDS, "bre: training rows t in each hash function's kernel sum "
         "(default 20)", type=positive_int, param="points_per_bit", method="bre", group=_SGH),
    _opt("bre-sweeps", METHOD_COMMANDS, "bre: coordinate-descent sweeps at most (default 10)",
         type=positive_int, param="n_iter", method="bre", group=_SGH),
    _opt("agh-anchors", METHOD_COMMANDS, "agh, agh2: k-means anchors m (default 300)",
         type=positive_int, param="n_anchors", method="agh", group=_SGH),
    _opt("agh-nearest", METHOD_COMMANDS, "agh, agh2: nearest anchors s per point (default 2)",
         type=positive_int, param="n_nearest", method="agh", group=_SGH),
    _opt("kmeans-iter", METHOD_COMMANDS, "agh, agh2: Lloyd steps of the anchors' k-means (default 5)",
         type=positive_int, param="kmeans_iter", method="agh", group=_SGH),
    _opt("dgh-rho", METHOD_COMMANDS, "dgh: weight rho of the penalty tying the bits to the balanced, uncorrelated "
         "Y (default 10)", type=positive_float, param="rho", method="dgh", group=_SGH),
    _opt("dgh-max-iter", METHOD_COMMANDS, "dgh: alternations of the B- and Y-steps at most (default 20)",
         type=positive_int, param="max_iter", method="dgh", group=_SGH),
    _opt("dgh-max-b-iter", METHOD_COMMANDS, "dgh: signed-gradient steps per B-step at most, one pass over the "
         "workers' graph rows each (default 300)", type=positive_int, param="max_b_iter", method="dgh", group=_SGH),
    _opt("kmh-bits-per-subspace", METHOD_COMMANDS, "kmh: bits b per subspace, 2^b codewords each; the bits must be "
         "a multiple of b (default 4)", type=positive_int, param="bits_per_subspace", method="kmh", group=_SGH),
    _opt("kmh-iter", METHOD_COMMANDS, "kmh: iterations, one pass each (default 50)",
         type=positive_int, param="n_iter", method="kmh", group=_SGH),
    _opt("sgh-rho-scale", METHOD_COMMANDS, "sgh: rho = this x 2 max ||x - mean||^2 (default 0.5)",
         type=positive_float, param="rho_scale", method="sgh", group=_SGH),
    _opt("kernel-cache", METHOD_COMMANDS, "sgh: keep kernel features on the workers between passes (default auto: "
         "when they fit)", choices=("auto", "memory", "recompute"), param="kernel_cache", group=_SGH),
    _opt("labeled", METHOD_COMMANDS, "splh, pcah-adjusted: labeled training points drawn with the seed (default "
         "1000); maccut, macquad, cut, quad: training points of the affinities, ksh: labeled points; sdh, cosdish, "
         "dpsh: training points, every row when at least their number (default 5000)", type=positive_int,
         param="n_labeled", group=_SGH),
    _opt("eta", METHOD_COMMANDS, "splh, usplh: weight of the (pseudo-)label term relative to the covariance (default: splh 1, usplh 2)",
         type=positive_float, param="eta", group=_SGH),
    _opt("region-size", METHOD_COMMANDS, "usplh: points per boundary region (default 2000)", type=positive_int,
         param="region_size", group=_SGH),
    _opt("decay", METHOD_COMMANDS, "usplh: decay lambda of earlier pseudo-labels, in (0, 1] (default 0.5)",
         type=positive_float, param="decay", group=_SGH),
    _opt("affinity", METHOD_COMMANDS, "labels (similar = same class; default) or knn (similar = exact Euclidean "
         "neighbours, no labels needed)", choices=("labels", "knn"), param="affinity", method="mac", group=_MAC),
    _opt("mac-loss", METHOD_COMMANDS, "ksh (default) or esplh", choices=("ksh", "esplh"), param="loss", method="mac",
         group=_MAC),
    _opt("mac-hash", METHOD_COMMANDS, "hash function per bit: linear SVM (default) or kernel (linear SVM on RBF "
         "features)", choices=("linear", "kernel"), param="hash_function", method="mac", group=_MAC),
    _opt("kappa-plus", METHOD_COMMANDS, "similar pairs per training point (default 100)", type=positive_int,
         param="n_similar", method="mac", group=_MAC),
    _opt("kappa-minus", METHOD_COMMANDS, "dissimilar pairs per training point (default 500)", type=positive_int,
         param="n_dissimilar", method="mac", group=_MAC),
    _opt("mac-centres", METHOD_COMMANDS, "RBF centres of the kernel hash function (default 500)", type=positive_int,
         param="n_centres", method="mac", group=_MAC),
    _opt("mu-start", METHOD_COMMANDS, "first penalty mu_1 (default: cut 0.3, quad 0.01)", type=positive_float,
         param="mu_start", method="mac", group=_MAC),
    _opt("mu-factor", METHOD_COMMANDS, "penalty multiplier alpha per iteration, > 1 (default 1.4)",
         type=positive_float, param="mu_factor", method="mac", group=_MAC),
    _opt("mac-max-iter", METHOD_COMMANDS, "MAC iterations at most (default 40)", type=non_negative_int,
         param="max_iter", method="mac", group=_MAC),
    _opt("z-passes", METHOD_COMMANDS, "Z-step passes over the bits per iteration at most (default 2)",
         type=positive_int, param="z_passes", method="mac", group=_MAC),
    _opt("ksh-anchors", METHOD_COMMANDS, "ksh: kernel anchors m drawn among the labeled points (default 300)",
         type=positive_int, param="n_anchors", method="ksh", group=_MAC),
    _opt("ksh-max-iter", METHOD_COMMANDS, "ksh: L-BFGS steps of each bit's smoothed problem (default 500)",
         type=non_negative_int, param="max_iter", method="ksh", group=_MAC),
    _opt("validation-size", METHOD_COMMANDS, "training rows held out for early stopping (default 2000; 0: none)",
         type=non_negative_int, param="validation_size", method="mac", group=_MAC),
    _opt("validation-database", METHOD_COMMANDS, "what early stopping ranks the validation rows against: "
         "held-out (default: half the validation rows rank the other half) or the training points",
         choices=("held-out", "training"),
         param="validation_database", method="mac", group=_MAC),
    _opt("adsh-gamma", METHOD_COMMANDS, "weight gamma of the quantisation term (default 200)", type=non_negative_float,
         param="gamma", method="adsh", group=_ADSH),
    _opt("outer-iter", METHOD_COMMANDS, "outer iterations T_out, each with a new Omega (default 50)", type=positive_int,
         param="outer_iter", method="adsh", group=_ADSH),
    _opt("inner-iter", METHOD_COMMANDS, "network epochs + V-steps per Omega, T_in (default 3)", type=positive_int,
         param="inner_iter", method="adsh", group=_ADSH),
    _opt("omega", METHOD_COMMANDS, "database rows sampled per outer iteration, |Omega| (default 2000)", type=positive_int,
         param="n_samples", method="adsh", group=_ADSH),
    _opt("batch-size", METHOD_COMMANDS, "network mini-batch (default 64)", type=positive_int, param="batch_size",
         group=_ADSH),
    _opt("learning-rate", METHOD_COMMANDS, "Adam's learning rate (default 0.001)", type=positive_float,
         param="learning_rate", group=_ADSH),
    _opt("network", METHOD_COMMANDS, "cnn (images; dropout 0.5 in its hidden layer for adsh, none for dpsh) or "
         "mlp (feature vectors); default by the row's size: a square image (side >= 16, grey or 3 colours) gets the cnn", choices=("cnn", "mlp"), param="network", group=_ADSH),
    _opt("torch-threads", METHOD_COMMANDS, "threads of the network step (fixed, for reproducible results; default "
         "adsh 2, dpsh 1)", type=positive_int, param="threads", group=_ADSH),
    _opt("epochs", METHOD_COMMANDS, "dpsh: passes of the network over its training rows (default 50)",
         type=positive_int, param="epochs", method="dpsh", group=_ADSH),
    _opt("dpsh-eta", METHOD_COMMANDS, "dpsh: weight eta of the quantisation term (default 0.1)",
         type=non_negative_float, param="quantisation_weight", method="dpsh", group=_ADSH),
    # -- search
    _opt("k", ["search"], "neighbours per query (default 100)", type=positive_int),
    _opt("k", ["bench"], "search/groundtruth: neighbours per query", type=positive_int, default=100),
    _opt("radius", ["search"], "radius search instead of top-k", type=non_negative_int),
    # -- evaluate, demo
    _opt("ground-truth", _EVAL, "default: labels when the dataset has them", choices=("labels", "euclidean")),
    _opt("ks", _EVAL, "K values of precision@K", type=positive_int_list, default=[1, 10, 50, 100, 200, 500, 1000]),
    _opt("dish2-dictionaries", _EVAL, "DisH2: score this many node dictionaries drawn with the seed (1 = the paper's "
         "DisH2, one random node); default all nodes, reported as mean and std", type=positive_int),
    # -- bench
    _opt("stage", ["bench"], "search, groundtruth, train or encode", positional=True,
         choices=("search", "groundtruth", "train", "encode"), required=("bench",)),
    _opt("iterations", ["bench"], "train: outer iterations (fixed, no early stop)", type=positive_int, default=10),
    _opt("nodes", ["bench"], "train: DisH nodes", type=positive_int, default=10),
    _opt("floor-repeats", ["bench"], "train: time the floor before and after ours (2, averaged) or only before (1)",
         type=positive_int, default=2, choices=(1, 2)),
    _opt("data", ["bench"], "dataset to use (its first --n rows); default: sift-synth of --n rows, cached"),
    _opt("bench-threads", ["bench"], "search/groundtruth: threads for both sides (default: all cores)",
         type=positive_int),
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
    _opt("out", ["bench"], "result JSON file (a Markdown table is written beside it)", required=("bench",)),
    _opt("overwrite", ["ingest", "synth", "split", "train", "encode", "index", "search", "bench"],
         "replace an existing output of the same kind that dhash wrote whole (one that holds anything else is "
         "refused), and an earlier --performance-report", switch=True),
)
# fmt: on


def options_of(command: str) -> dict[str, Option]:
    """dest -> Option of the options ``command`` takes, in table order."""
    return {o.dest: o for o in OPTIONS if command in o.commands}


def option_names(options) -> str:
    return ", ".join(sorted(o.name for o in options.values()))


def method_params(command: str, values: dict) -> dict:
    """The method parameters set by ``values`` (dest -> value): shared ones by name, and
    method-only ones under the method's name (the form ``hashing.method_params`` reads)."""
    params = {}
    for dest, opt in options_of(command).items():
        if opt.param is None or values.get(dest) is None:
            continue
        if opt.method is None:
            params[opt.param] = values[dest]
        else:
            params.setdefault(opt.method, {})[opt.param] = values[dest]
    return params


# the TOML types each option type accepts (others: str)
_TOML_TYPES = {
    positive_int: (int,),
    non_negative_int: (int,),
    positive_float: (int, float),
    non_negative_float: (int, float),
    positive_int_list: (list, str, int),
    bit_count: (int,),
    bit_counts: (list, str, int),
    name_list: (list, str),
    json_object: (dict, str),
    topology: (str, list),
    date: (str, dt.date),
}
_TOML_NAMES = {
    int: "an integer",
    float: "a number",
    list: "an array",
    str: "a string",
    dict: "a table",
    bool: "true or false",
    dt.date: "a date",
}
_JSON_TYPES = {
    positive_int: {"type": "integer", "minimum": 1},
    non_negative_int: {"type": "integer", "minimum": 0},
    positive_float: {"type": "number", "exclusiveMinimum": 0},
    non_negative_float: {"type": "number", "minimum": 0},
    positive_int_list: {
        "oneOf": [
            {"type": "array", "items": {"type": "integer", "minimum": 1}},
            {"type": "integer", "minimum": 1},
            {"type": "string"},
        ]
    },
    bit_count: {"type": "integer", "minimum": 1, "maximum": MAX_BITS},
    bit_counts: {
        "oneOf": [
            {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": MAX_BITS}},
            {"type": "integer", "minimum": 1, "maximum": MAX_BITS},
            {"type": "string"},
        ]
    },
    name_list: {"oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}]},
    json_object: {"oneOf": [{"type": "object"}, {"type": "string"}]},
    topology: {
        "oneOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}},
        ]
    },
    date: {"type": "string", "format": "date"},
    text: {"type": "string"},
}
STORAGE_TABLE = "storage-options"


def _json_property(opt: Option) -> dict:
    prop = {"type": "boolean"} if opt.switch else dict(_JSON_TYPES[opt.type])
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


if __name__ == "__main__":  # python -m dhash.jobs.options > data_schemas/config.schema.json
    print(json.dumps(config_schema(), indent=1))
