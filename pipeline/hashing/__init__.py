"""Hash-function learners (one module per method family) and the method registry."""
from pipeline.errors import InputError
from pipeline.hashing.base import Hasher, load_model
from pipeline.hashing.dish import DisH
from pipeline.hashing.linear import ITQ, LSH, PCAH
from pipeline.hashing.sgh import SGH
from pipeline.hashing.splh import SPLH, USPLH

HASHERS: dict[str, type[Hasher]] = {cls.method: cls for cls in (LSH, PCAH, ITQ, DisH, SGH, SPLH, USPLH)}


# names accepted by the jobs that select a variant of a registered estimator
METHOD_VARIANTS = {"dish-allreduce": ("dish", {"consensus": "allreduce"}),
                   "pcah-adjusted": ("splh", {"sequential": False})}
METHOD_NAMES = (*HASHERS, *METHOD_VARIANTS)


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
    base = METHOD_VARIANTS.get(method, (method, {}))[0]
    own = {**params.get(base, {}), **params.get(method, {})}
    shared = {k: v for k, v in params.items() if k not in METHOD_NAMES and k in cls._get_param_names()}
    return {k: v for k, v in {**shared, **own}.items() if v is not None}


def check_params_used(methods, params: dict | None) -> None:
    """Every shared parameter must be taken by at least one of ``methods`` (a typo or an
    option for a method not run is an error, not silently ignored)."""
    for key, value in (params or {}).items():
        if key in METHOD_NAMES or value is None:
            continue
        if not any(key in method_class(m)._get_param_names() for m in methods):
            raise InputError(f"parameter {key} is not taken by {', '.join(methods)}; remove it or add a method "
                             "that takes it")


__all__ = ["HASHERS", "ITQ", "LSH", "METHOD_NAMES", "PCAH", "SGH", "SPLH", "USPLH", "DisH", "Hasher", "load_model", "make_hasher", "method_class", "method_params", "check_params_used"]
