"""The method registry: names -> estimators, building them from job options, and loading
saved models (JSON + .npz, never pickle)."""

from __future__ import annotations

import json

from dask_hashcodes import __version__
from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing.adsh import ADSH
from dask_hashcodes.hashing.anchor_graph import AGH
from dask_hashcodes.hashing.base import (
    ARRAYS_FILE,
    MODEL_FILE,
    MODEL_REMEDY,
    MODEL_SCHEMA,
    Hasher,
    resolve_location,
    resolve_seed,
)
from dask_hashcodes.hashing.constraints import InvalidParameter
from dask_hashcodes.hashing.cosdish import COSDISH
from dask_hashcodes.hashing.discrete_graph import DGH
from dask_hashcodes.hashing.dish import DisH
from dask_hashcodes.hashing.dpsh import DPSH
from dask_hashcodes.hashing.kernel import BRE, KLSH, KSH
from dask_hashcodes.hashing.linear import ITQ, LSH, PCAH, IsoHash
from dask_hashcodes.hashing.mac import MAC
from dask_hashcodes.hashing.periodic import SH, SIKH
from dask_hashcodes.hashing.quantization import KMH
from dask_hashcodes.hashing.sdh import SDH
from dask_hashcodes.hashing.sgh import SGH
from dask_hashcodes.hashing.splh import SPLH, USPLH
from dask_hashcodes.storage.atomic import read_verified, require_committed
from dask_hashcodes.storage.npz import npz_arrays

_ESTIMATORS = (
    LSH, PCAH, ITQ, IsoHash, SH, SIKH, KLSH, BRE, AGH, DGH, KMH, DisH, SGH, SPLH, USPLH,
    MAC, KSH, ADSH, SDH, COSDISH, DPSH,
)  # fmt: skip
HASHERS: dict[str, type[Hasher]] = {cls.method: cls for cls in _ESTIMATORS}


# names accepted by the jobs that select a variant of a registered estimator
METHOD_VARIANTS = {
    "dish-allreduce": ("dish", {"consensus": "allreduce"}),
    "pcah-adjusted": ("splh", {"sequential": False}),
    "agh2": ("agh", {"layers": 2}),
    "maccut": ("mac", {"solver": "cut"}),
    "macquad": ("mac", {"solver": "quad"}),
    # the two-step methods MAC starts from: free codes, then h fitted once
    "cut": ("mac", {"solver": "cut", "max_iter": 0}),
    "quad": ("mac", {"solver": "quad", "max_iter": 0}),
}
METHOD_NAMES = (*HASHERS, *METHOD_VARIANTS)

# the methods an evaluation runs when none are named: unsupervised baselines any dataset can
# run; the demo adds the distributed method. Named here so that the workflows name no method.
BASELINE_METHODS = ("lsh", "pcah", "itq")
DEMO_METHODS = (*BASELINE_METHODS, "dish")

# Every method parameter has the command-line flag --{method}-{parameter} (--itq-n-iter).
# These are the shorter names earlier releases gave some of them, kept so that existing
# scripts and configs keep working: flag name -> (the methods whose parameter it sets,
# parameter). One short flag may set the same parameter of several methods (--labeled).
SHORT_FLAGS = {
    "n-iter": (("itq",), "n_iter"),
    "dictionary": (("dish",), "dictionary"),
    "nodes": (("dish",), "nodes"),
    "topology": (("dish",), "topology"),
    "partition": (("dish",), "partition"),
    "rho": (("dish", "sgh"), "rho"),
    "rho-scale": (("dish",), "rho_scale"),
    "inner-steps": (("dish",), "inner_steps"),
    "max-iter": (("dish",), "max_iter"),
    "init": (("dish",), "init"),
    "n-bases": (("sgh",), "n_bases"),
    "bandwidth-scale": (("sgh",), "bandwidth_scale"),
    "kernel-cache": (("sgh",), "kernel_cache"),
    "klsh-anchors": (("klsh",), "n_anchors"),
    "bre-sweeps": (("bre",), "n_iter"),
    "agh-anchors": (("agh",), "n_anchors"),
    "agh-nearest": (("agh",), "n_nearest"),
    "kmeans-iter": (("agh",), "kmeans_iter"),
    "dgh-anchors": (("dgh",), "n_anchors"),
    "dgh-nearest": (("dgh",), "n_nearest"),
    "kmh-iter": (("kmh",), "n_iter"),
    "labeled": (("splh", "mac", "ksh", "sdh", "cosdish", "dpsh"), "n_labeled"),
    "eta": (("splh", "usplh"), "eta"),
    "region-size": (("usplh",), "region_size"),
    "decay": (("usplh",), "decay"),
    "affinity": (("mac",), "affinity"),
    "knn-search": (("mac",), "knn_search"),
    "mac-hash": (("mac",), "hash_function"),
    "kappa-plus": (("mac",), "n_similar"),
    "kappa-minus": (("mac",), "n_dissimilar"),
    "mac-centres": (("mac",), "n_centres"),
    "mu-start": (("mac",), "mu_start"),
    "mu-factor": (("mac",), "mu_factor"),
    "z-passes": (("mac",), "z_passes"),
    "validation-size": (("mac",), "validation_size"),
    "validation-database": (("mac",), "validation_database"),
    "ksh-anchors": (("ksh",), "n_anchors"),
    "sdh-anchors": (("sdh",), "n_anchors"),
    "cosdish-columns": (("cosdish",), "n_columns"),
    "outer-iter": (("adsh",), "outer_iter"),
    "inner-iter": (("adsh",), "inner_iter"),
    "omega": (("adsh",), "n_samples"),
    "batch-size": (("adsh", "dpsh"), "batch_size"),
    "learning-rate": (("adsh", "dpsh"), "learning_rate"),
    "network": (("adsh", "dpsh"), "network"),
    "input-shape": (("adsh", "dpsh"), "input_shape"),
    "torch-threads": (("adsh", "dpsh"), "threads"),
    "epochs": (("dpsh",), "epochs"),
    "dpsh-eta": (("dpsh",), "quantisation_weight"),
}


def make_hasher(method: str, n_bits: int, *, random_state: int | None = 0, **params) -> Hasher:
    """Build an estimator by name (one of METHOD_NAMES). Every parameter must be one the
    estimator takes (a parameter of None means its default); ``random_state`` is passed to
    the methods that draw random numbers."""
    base, fixed = METHOD_VARIANTS.get(method, (method, {}))
    try:
        cls = HASHERS[base]
    except KeyError:
        raise InputError(f"unknown method {method!r}; choose from {', '.join(METHOD_NAMES)}") from None
    valid = [p for p in cls._get_param_names() if p != "n_bits" and p not in fixed]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise InputError(f"method {method} has no parameter {', '.join(unknown)}; its parameters: {', '.join(valid)}")
    params = {k: v for k, v in params.items() if v is not None}
    if "random_state" in valid:
        params.setdefault("random_state", random_state)
    return cls(n_bits=n_bits, **params, **fixed)


def method_class(method: str) -> type[Hasher]:
    """The estimator class behind a method name (variants included)."""
    return HASHERS[METHOD_VARIANTS.get(method, (method, {}))[0]]


def method_params(method: str, params: dict | None) -> dict:
    """The parameters of ``method`` in ``params``: a key naming a method holds options for
    that method only (``{"sgh": {"rho_scale": 0.5}}``); other keys are given to every method
    whose estimator takes them (None: its default)."""
    params = params or {}
    cls = method_class(method)
    base, fixed = METHOD_VARIANTS.get(method, (method, {}))
    # options of the base method skip what the variant fixes (cut is mac with max_iter = 0)
    own = {**{k: v for k, v in params.get(base, {}).items() if k not in fixed}, **params.get(method, {})}
    shared = {
        k: v for k, v in params.items() if k not in METHOD_NAMES and k in cls._get_param_names() and k not in fixed
    }
    return {k: v for k, v in {**shared, **own}.items() if v is not None}


def check_params_used(methods, params: dict | None) -> None:
    """Every shared parameter must be taken by at least one of ``methods`` (a typo or an
    option for a method not run is an error, not silently ignored)."""
    for key, value in (params or {}).items():
        if key in METHOD_NAMES or value is None:
            continue
        if not any(key in method_class(m)._get_param_names() for m in methods):
            raise InputError(
                f"parameter {key} is not taken by {', '.join(methods)}; remove it or add a method that takes it"
            )


def _major(version) -> int:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return 0


def _refuse_newer(meta, meta_file) -> None:
    """A model written by a newer major version of dhash (or a newer model schema) may
    mean something this version cannot read correctly: refuse it rather than guess."""

    if not isinstance(meta, dict):
        return
    schema = str(meta.get("schema", ""))
    newer_schema = schema.startswith("dhash.model/") and _major(schema.rpartition("/")[2]) > _major(MODEL_SCHEMA[12:])
    if newer_schema or _major(meta.get("library_version", 0)) > _major(__version__):
        raise InputError(
            f"{meta_file} was written by dhash {meta.get('library_version')} (schema {schema}), newer than "
            f"this dhash {__version__}; upgrade (pip install -U dask-hashcodes) to load it"
        )


def load_model(path) -> Hasher:
    """Load a committed model directory written by ``Hasher.save`` (no pickle: JSON + .npz).
    Both files are read only as the commit record lists them (size and checksum), the
    arrays must be exactly those the method declares for its parameters, and their content
    must give the recorded model id."""

    loc = resolve_location(path)
    remedy = MODEL_REMEDY
    if not loc.child(MODEL_FILE).exists() and not loc.child(".dhash-commit.json").exists():
        raise InputError(f"{loc} is not a model directory (no {MODEL_FILE}); train one with `dhash train`")
    record = require_committed(loc, "model", remedy)
    meta_file = loc.child(MODEL_FILE)
    raw = read_verified(loc, MODEL_FILE, record, remedy)
    try:
        meta = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{meta_file} is not valid JSON ({str(exc)[:60]}); {remedy}") from None
    _refuse_newer(meta, meta_file)
    if not isinstance(meta, dict) or meta.get("schema") != MODEL_SCHEMA or meta.get("method") not in HASHERS:
        got = (meta.get("schema"), meta.get("method")) if isinstance(meta, dict) else (None, None)
        raise InputError(
            f"{meta_file} has schema {got[0]!r} / method {got[1]!r}; expected {MODEL_SCHEMA} with one of {', '.join(HASHERS)}"
        )
    arrays_file = loc.child(ARRAYS_FILE)
    try:
        model = HASHERS[meta["method"]](**meta["params"])
        model._validate_params()  # the declared arrays' shapes are computed from them
        n_features = meta["n_features"]
        if not isinstance(n_features, int) or isinstance(n_features, bool) or n_features < 1:
            raise TypeError(f"n_features {n_features!r} is not a positive integer")
        model.n_features_in_ = n_features
        expected_id = meta["model_id"]
        arrays = npz_arrays(read_verified(loc, ARRAYS_FILE, record, remedy), arrays_file, remedy)
        model._set_learned_arrays(arrays, arrays_file)
    except (KeyError, TypeError, InvalidParameter) as exc:
        raise InputError(f"{meta_file} lacks or has a bad entry ({str(exc)[:120]}); {remedy}") from None
    model.training_stats_ = meta.get("training", {})
    model.dataset_ = meta.get("dataset", {})
    if "random_state" in model.get_params():
        model.seed_ = resolve_seed(meta.get("seed", model.random_state if model.random_state is not None else 0))
    if model.model_id != expected_id:
        raise InputError(
            f"{loc}: arrays do not match model.json (model id {model.model_id} != {expected_id}); the model directory is corrupt, re-train it"
        )
    return model
